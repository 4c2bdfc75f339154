"""CLI commands; every public module here defines `register(app)`."""
