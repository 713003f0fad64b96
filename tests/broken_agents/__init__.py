"""Agent modules that fail as the code of another commit might: the CLI tests load them."""
