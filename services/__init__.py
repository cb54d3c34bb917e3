"""The application: commands over the domain, and the command line."""
