"""FIFO: run trials in the order they were added, never pause or stop one early."""

from __future__ import annotations

from rlgear.scheduler import TrialScheduler


class FIFOScheduler(TrialScheduler):
    description = "first in, first out: every trial runs to its stop criteria"
