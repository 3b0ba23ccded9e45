"""``python -m studio`` starts the desktop app (same as ``rl-studio``)."""

from studio.app import main

raise SystemExit(main())
