"""The edges: the command line, REST, MCP and the process mains (serve, pipeline, relay, projector,
ingest, rebuild, demo). They decode, call one operation, encode; only they import
``services.bootstrap``."""
