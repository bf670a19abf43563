"""The ``rlgear`` command (also ``python -m rlgear``); :mod:`rlgear.cli.main` parses and dispatches."""

from rlgear.cli.main import main

__all__ = ["main"]
