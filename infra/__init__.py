"""Adapters to the outside world: settings, PostgreSQL, the event store's wiring."""
