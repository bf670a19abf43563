"""``python -m rlgear`` is the same as the ``rlgear`` command."""

from rlgear.cli import main

raise SystemExit(main())
