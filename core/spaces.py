"""Framework-neutral descriptions of observation and action spaces.

Core does not depend on gymnasium: env adapters translate their spaces into
these two small classes, policies are built from them, and checkpoints store
them as JSON so a policy can be rebuilt without creating an environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Discrete:
    """``n`` actions (or observations) numbered ``0 .. n-1``."""

    n: int
    kind = "discrete"

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Discrete", "n": int(self.n)}


@dataclass(frozen=True, eq=False)
class Box:
    """A real-valued array of a fixed shape, with element-wise bounds."""

    low: np.ndarray
    high: np.ndarray
    dtype: np.dtype = np.dtype(np.float32)
    kind = "continuous"

    def __post_init__(self) -> None:
        low = np.asarray(self.low, dtype=self.dtype)
        high = np.asarray(self.high, dtype=self.dtype)
        if low.shape != high.shape:
            raise ValueError(f"Box bounds differ in shape: {low.shape} vs {high.shape}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.low.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def bounded(self) -> bool:
        return bool(np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Box)
            and self.dtype == other.dtype
            and np.array_equal(self.low, other.low)
            and np.array_equal(self.high, other.high)
        )

    def __hash__(self) -> int:
        return hash((self.shape, str(self.dtype)))

    def __repr__(self) -> str:
        return f"Box(shape={self.shape}, dtype={self.dtype})"

    def to_json(self) -> dict[str, Any]:
        # Infinite bounds are written as strings: JSON has no infinity.
        def encode(a: np.ndarray) -> list:
            return [x if np.isfinite(x) else str(x) for x in a.astype(np.float64).ravel().tolist()]

        return {
            "type": "Box",
            "shape": list(self.shape),
            "dtype": str(self.dtype),
            "low": encode(self.low),
            "high": encode(self.high),
        }


Space = Discrete | Box


def space_from_json(data: dict[str, Any]) -> Space:
    """Rebuild a space written by ``to_json`` (used when loading checkpoints)."""
    if data["type"] == "Discrete":
        return Discrete(int(data["n"]))
    if data["type"] == "Box":
        shape = tuple(data["shape"])
        low = np.array([float(x) for x in data["low"]], dtype=np.float64).reshape(shape)
        high = np.array([float(x) for x in data["high"]], dtype=np.float64).reshape(shape)
        return Box(low, high, np.dtype(data["dtype"]))
    raise ValueError(f"unknown space type {data['type']!r}")


def flat_dim(space: Space) -> int:
    """Length of the flat float vector a model sees for an observation of ``space``."""
    return space.n if isinstance(space, Discrete) else space.size
