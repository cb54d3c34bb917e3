"""The application: commands over the domain, the query side, ingest and consolidation; the
edges in ``services/entrypoints``."""
