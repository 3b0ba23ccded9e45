"""The Training workspace: runs, the run dialog, compare, sweeps and readiness."""
