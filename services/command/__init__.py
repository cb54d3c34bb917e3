"""The command side: commands over the domain's aggregates, saved as events (group
commit, turns on contended aggregates), and the use cases that decide: erasure, retention,
consolidation, parked events."""
