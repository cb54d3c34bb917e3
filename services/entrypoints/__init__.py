"""The edges: REST, MCP and the process mains. They decode, call one operation, encode."""
