"""The Environments workspace: the env designer, its controller, commands, preview."""
