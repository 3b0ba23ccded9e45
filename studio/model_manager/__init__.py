"""The Models workspace: the model catalog view, its controller and dialogs."""
