"""The Workflows workspace: the flow editor, its controller and commands."""
