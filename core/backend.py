"""The backend contract (entry-point group ``rlgear.backends``).

A backend owns the framework: thread pools, seeding and RNG state, and the
public API its algorithms' policy modules import (base Policy class, model
catalog, action distributions, optimizers). Core never imports a framework; it
only calls this small interface, and only when a run asks for the backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np


class Backend(ABC):
    """Instantiated once per process that uses the framework."""

    #: Name of the framework (shown by ``rlgear plugins``).
    framework: ClassVar[str] = ""
    #: One line shown by ``rlgear plugins``.
    description: ClassVar[str] = ""

    @abstractmethod
    def setup(self, num_threads: int, seed: int | None) -> None:
        """Set the framework's thread pools and seed its global RNG."""

    @abstractmethod
    def get_rng_state(self) -> dict[str, np.ndarray]:
        """The framework's RNG state as arrays (stored in checkpoints)."""

    @abstractmethod
    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``get_rng_state`` returned."""

    def reseed(self, seed: int) -> None:
        """Seed the framework's global RNG again (threads untouched); PBT calls it after an exploit.

        The default does nothing: a backend whose framework draws global random
        numbers during training overrides it (the built-in ones do).
        """

    def version(self) -> str:
        """The framework's version, for ``rlgear plugins``; empty if unknown."""
        return ""
