"""Hyperparameter schedules over ``timesteps_total`` (framework-free)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def piecewise_linear(points: Sequence[Sequence[float]], t: float) -> float:
    """Interpolate ``[[t0, v0], [t1, v1], ...]`` at ``t``; constant outside the range."""
    ts = [float(p[0]) for p in points]
    vs = [float(p[1]) for p in points]
    return float(np.interp(t, ts, vs))
