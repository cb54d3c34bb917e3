"""The application, a side a folder: ``command`` (commands over the domain, saved as events) and
``query`` (reads of the read models only: search, facts, slicing, export); beside them ingest,
keys, the console and the edges in ``services/entrypoints``."""
