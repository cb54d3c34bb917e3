"""The query side: everything that reads the read models only — search (``retrieval``),
facts, history, briefing, slicing, export, the prompt context — and the overlay of this process's
own writes the read models do not hold yet."""
