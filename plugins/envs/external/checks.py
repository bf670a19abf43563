"""What a client may send as observations and rewards: one set of rules for a step and an upload.

Why one module: a version 1 ``step`` carries one observation, a version 2 ``experience`` upload
carries a batch of them (docs/protocol.md sections 5 and 10); an attacker must meet the same
rules either way. Every check raises :class:`~rlgear.external.wire.WireError` with the code the
protocol names and a one-line message naming the field and what was expected.
"""

from __future__ import annotations

import numpy as np

from rlgear.external.wire import FLOAT32_MAX, ErrorCode, WireError
from rlgear.spaces import Box, Discrete

from .settings import ServerSettings


def magnitude_limit(limit: float | None, dtype: np.dtype) -> float | None:
    """``limit``, or None where no value of ``dtype`` can exceed it (uint8 images, bool: no per-step cost)."""
    if limit is None or dtype.kind == "b":
        return None
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    return None if max(-float(info.min), float(info.max)) <= limit else limit


def _where(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


class ObservationCheck:
    """The observation rules of the server's ``observation_space`` (docs/protocol.md section 5)."""

    def __init__(self, settings: ServerSettings):
        self.space = settings.observation_space
        self.shape = tuple(self.space.shape)
        self.dtype = np.dtype(self.space.dtype)
        self.is_float = self.dtype.kind == "f"
        low, high = (
            (np.asarray(self.space.low), np.asarray(self.space.high))
            if isinstance(self.space, Box)
            else (None, None)
        )
        self.bounds = (low, high) if settings.check_bounds and low is not None else None
        self.limit = (
            magnitude_limit(settings.max_abs_observation, self.dtype) if isinstance(self.space, Box) else None
        )

    def __call__(self, obs: np.ndarray, rows: int | None = None, name: str = "observation") -> None:
        """Check one observation (``rows`` None) or ``rows`` of them stacked (``[rows, *shape]``)."""
        shape = self.shape if rows is None else (rows, *self.shape)
        if obs.dtype != self.dtype or obs.shape != shape:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"{name} must be {self.dtype} of shape {list(shape)}, got {obs.dtype} of shape {list(obs.shape)}",
            )
        if self.is_float:
            if not np.isfinite(obs).all():
                raise WireError(ErrorCode.NON_FINITE, f"{name} holds NaN or infinity")
            if obs.dtype.itemsize > 4 and (np.abs(obs) > FLOAT32_MAX).any():
                raise WireError(
                    ErrorCode.NON_FINITE, f"{name} has values beyond float32 (learning uses float32)"
                )
        if self.bounds is not None:
            low, high = self.bounds
            outside = (obs < low) | (obs > high)
            if outside.any():
                index = _where(outside)
                inner = index if rows is None else index[1:]
                raise WireError(
                    ErrorCode.BAD_ARRAY,
                    f"{name}{list(index)} = {float(obs[index]):g} is outside the observation space "
                    f"[{float(low[inner]):g}, {float(high[inner]):g}] (env.kwargs.check_bounds)",
                )
        if self.limit is not None:
            beyond = (obs > self.limit) | (obs < -self.limit)
            if beyond.any():
                index = _where(beyond)
                raise WireError(
                    ErrorCode.BAD_ARRAY,
                    f"{name}{list(index)} = {float(obs[index]):g} is beyond the server's "
                    f"env.kwargs.max_abs_observation = {self.limit:g} (set it higher where observations are this large)",
                )
        if isinstance(self.space, Discrete):
            outside = (obs < 0) | (obs >= self.space.n)
            if outside.any():
                prefix = "" if rows is None else f"{list(_where(outside))} "
                raise WireError(ErrorCode.BAD_ARRAY, f"{name} {prefix}must be in 0..{self.space.n - 1}")
