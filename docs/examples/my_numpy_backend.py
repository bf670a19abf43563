"""numpy: a backend with no framework (a backend plugin).

A backend owns a framework's threads, seeding and RNG state. This one owns only
numpy's legacy global RNG (``np.random.seed`` / ``np.random.rand``): the smallest
complete backend. (An algorithm whose policy is numpy needs no backend plugin: it
lists the policy under ``"*"`` and rlgear's own ``NoFrameworkBackend`` stands in.)

Registered with ``rlgear.backends = numpy = my_numpy_backend:NumpyBackend``.
"""

from __future__ import annotations

import numpy as np

from rlgear.backend import Backend


class NumpyBackend(Backend):
    framework = "numpy"
    description = "no framework: numpy's global RNG only, for policies written in numpy"

    def setup(self, num_threads: int, seed: int | None) -> None:
        # numpy's BLAS threads are fixed when numpy is imported; nothing to set here.
        if seed is not None:
            np.random.seed(seed % 2**32)

    def reseed(self, seed: int) -> None:
        np.random.seed(int(seed) % 2**32)

    def get_rng_state(self) -> dict[str, np.ndarray]:
        _, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
        return {
            "numpy_keys": np.array(keys, dtype=np.uint32),
            "numpy_pos": np.array([pos, has_gauss], dtype=np.int64),
            "numpy_gauss": np.array([cached_gaussian], dtype=np.float64),
        }

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        if "numpy_keys" in state:
            pos, has_gauss = (int(v) for v in state["numpy_pos"])
            np.random.set_state(
                ("MT19937", state["numpy_keys"], pos, has_gauss, float(state["numpy_gauss"][0]))
            )

    def version(self) -> str:
        return np.__version__
