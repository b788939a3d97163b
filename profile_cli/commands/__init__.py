"""The command line: Typer commands, their options and the one output writer."""
