"""The four workspaces of the main window, one module each."""
