"""numpy: a framework-free backend built on core's ``NoFrameworkBackend`` (a backend plugin).

Most framework-free code needs no backend at all: a numpy policy listed under ``"*"`` runs
with core's :class:`~rlgear.backend.NoFrameworkBackend`, which seeds numpy's legacy global
RNG and saves it in checkpoints. Write a backend when the code your policies run keeps
global state of its own that a run must set up, seed and checkpoint. Here that is Python's
``random`` module, which pure-Python policies and helpers draw from: the backend adds it to
what core's backend already does, the way a framework backend adds its framework's
generator (``torch.manual_seed``, ``tf.random.set_seed``) and thread pools.

Registered with ``rlgear.backends = numpy = my_numpy_backend:NumpyBackend``.
"""

from __future__ import annotations

import random

import numpy as np

from rlgear.backend import NoFrameworkBackend


class NumpyBackend(NoFrameworkBackend):
    """numpy's legacy global RNG (core's backend) plus Python's ``random`` module."""

    description = "numpy and Python's random module: global RNGs seeded and checkpointed"

    def setup(self, num_threads: int, seed: int | None) -> None:
        super().setup(num_threads, seed)  # numpy's RNG; its BLAS threads are fixed at import
        if seed is not None:
            random.seed(seed)

    def reseed(self, seed: int) -> None:
        super().reseed(seed)
        random.seed(seed)

    def get_rng_state(self) -> dict[str, np.ndarray]:
        # Checkpoints store arrays only (safetensors, no pickle), so random.getstate()'s
        # (version, Mersenne Twister words, cached gauss) tuple goes in as numbers.
        version, words, gauss_next = random.getstate()
        return {
            **super().get_rng_state(),
            "random_version": np.array([version], dtype=np.int64),
            "random_words": np.array(words, dtype=np.uint32),
            # [has a cached normal, its value], as numpy's own "numpy_pos"/"numpy_gauss"
            "random_gauss": np.array([gauss_next is not None, gauss_next or 0.0], dtype=np.float64),
        }

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        super().set_rng_state(state)
        if "random_words" in state:  # absent from a checkpoint of core's own backend
            version = int(state["random_version"][0])
            words = tuple(int(w) for w in state["random_words"])
            has_gauss, gauss = state["random_gauss"]
            random.setstate((version, words, float(gauss) if has_gauss else None))
