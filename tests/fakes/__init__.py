"""Stand-ins for outside services, for tests: small, local, deterministic."""
