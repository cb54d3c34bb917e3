"""Read models built from the event log (one projector per read model)."""
