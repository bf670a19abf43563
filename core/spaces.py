"""Framework-neutral descriptions of observation and action spaces.

Core does not depend on gymnasium: env adapters translate their spaces into
these small classes (``Discrete``, ``Box``, ``MultiDiscrete``, ``MultiBinary``
and the structures ``Dict`` and ``Tuple``), policies are built from them, and
checkpoints store them as JSON so a policy can be rebuilt without creating an
environment.

Composite actions (``MultiDiscrete``, ``Tuple``/``Dict`` of ``Discrete``,
``Box`` and ``MultiDiscrete``) travel through batches as one flat array per
row (:func:`flatten_action`); the evaluator turns them back into the
structure the env expects (:func:`unflatten_action`) before stepping it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
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
            type(other) is type(self)  # a subclass (rlgear.config.conv.ImageVectorBox) adds a layout
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


@dataclass(frozen=True)
class MultiDiscrete:
    """``len(nvec)`` discrete choices made together; choice ``i`` is one of ``0 .. nvec[i]-1``.

    Only a flat ``nvec`` is supported: it is the layout of a product of Categoricals.
    """

    nvec: tuple[int, ...]
    kind = "multi_discrete"

    def __post_init__(self) -> None:
        nvec = tuple(int(n) for n in np.asarray(self.nvec).reshape(-1))
        if np.ndim(self.nvec) != 1 or not nvec or min(nvec) < 1:
            raise ValueError(
                f"MultiDiscrete needs a flat, non-empty nvec of positive counts, got {self.nvec!r}"
            )
        object.__setattr__(self, "nvec", nvec)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.nvec),)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64)

    def to_json(self) -> dict[str, Any]:
        return {"type": "MultiDiscrete", "nvec": list(self.nvec)}


@dataclass(frozen=True)
class MultiBinary:
    """An array of 0/1 flags; ``n`` is a count or a shape."""

    n: tuple[int, ...]
    kind = "multi_binary"

    def __init__(self, n: int | tuple[int, ...] | list[int]):
        shape = (int(n),) if np.ndim(n) == 0 else tuple(int(d) for d in n)
        if not shape or min(shape) < 1:
            raise ValueError(f"MultiBinary needs a positive size or shape, got {n!r}")
        object.__setattr__(self, "n", shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.n

    @property
    def size(self) -> int:
        return int(np.prod(self.n, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int8)

    def to_json(self) -> dict[str, Any]:
        return {"type": "MultiBinary", "n": list(self.n)}


@dataclass(frozen=True)
class Dict:
    """Named sub-spaces, kept in sorted key order (as gymnasium does): that order is the flat layout's."""

    spaces: tuple[tuple[str, Any], ...]
    kind = "composite"

    def __init__(self, spaces: Mapping[str, Any] | Iterable[tuple[str, Any]]):
        items = spaces.items() if isinstance(spaces, Mapping) else spaces
        pairs = tuple(sorted(((str(k), v) for k, v in items), key=lambda kv: kv[0]))
        if not pairs:
            raise ValueError("Dict space needs at least one sub-space")
        object.__setattr__(self, "spaces", pairs)

    def keys(self) -> list[str]:
        return [k for k, _ in self.spaces]

    def items(self) -> list[tuple[str, Any]]:
        return list(self.spaces)

    def __getitem__(self, key: str) -> Any:
        for k, v in self.spaces:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self.spaces)

    def __len__(self) -> int:
        return len(self.spaces)

    def __repr__(self) -> str:
        return "Dict(" + ", ".join(f"{k}: {v!r}" for k, v in self.spaces) + ")"

    def to_json(self) -> dict[str, Any]:
        return {"type": "Dict", "spaces": {k: v.to_json() for k, v in self.spaces}}


@dataclass(frozen=True)
class Tuple:
    """Sub-spaces in a fixed order."""

    spaces: tuple[Any, ...]
    kind = "composite"

    def __init__(self, spaces: Iterable[Any]):
        parts = tuple(spaces)
        if not parts:
            raise ValueError("Tuple space needs at least one sub-space")
        object.__setattr__(self, "spaces", parts)

    def __getitem__(self, index: int) -> Any:
        return self.spaces[index]

    def __len__(self) -> int:
        return len(self.spaces)

    def __repr__(self) -> str:
        return "Tuple(" + ", ".join(repr(v) for v in self.spaces) + ")"

    def to_json(self) -> dict[str, Any]:
        return {"type": "Tuple", "spaces": [v.to_json() for v in self.spaces]}


Space = Discrete | Box | MultiDiscrete | MultiBinary | Dict | Tuple


def space_from_json(data: dict[str, Any]) -> Space:
    """Rebuild a space written by ``to_json`` (used when loading checkpoints)."""
    kind = data["type"]
    if kind == "Discrete":
        return Discrete(int(data["n"]))
    if kind == "Box":
        shape = tuple(data["shape"])
        low = np.array([float(x) for x in data["low"]], dtype=np.float64).reshape(shape)
        high = np.array([float(x) for x in data["high"]], dtype=np.float64).reshape(shape)
        return Box(low, high, np.dtype(data["dtype"]))
    if kind == "MultiDiscrete":
        return MultiDiscrete(tuple(int(n) for n in data["nvec"]))
    if kind == "MultiBinary":
        return MultiBinary(tuple(int(n) for n in data["n"]))
    if kind == "Dict":
        return Dict({str(k): space_from_json(v) for k, v in dict(data["spaces"]).items()})
    if kind == "Tuple":
        return Tuple(space_from_json(v) for v in data["spaces"])
    raise ValueError(f"unknown space type {kind!r}")


def flat_dim(space: Space) -> int:
    """Length of the flat float vector a model sees for an observation of ``space``.

    Discrete: one-hot; MultiDiscrete: concatenated one-hots; Box and MultiBinary: their
    elements; Dict and Tuple: the sum of their parts (see :mod:`rlgear.preprocessing`).
    """
    if isinstance(space, Discrete):
        return space.n
    if isinstance(space, MultiDiscrete):
        return sum(space.nvec)
    if isinstance(space, Box | MultiBinary):
        return space.size
    if isinstance(space, Dict):
        return sum(flat_dim(v) for _, v in space.items())
    if isinstance(space, Tuple):
        return sum(flat_dim(v) for v in space.spaces)
    raise TypeError(f"not a space: {space!r}")


# --- composite actions: one flat array per row ------------------------------------------


def action_parts(space: Space) -> list[Space]:
    """The leaves of a Tuple/Dict action space in layout order (Discrete, Box or MultiDiscrete each).

    Raises TypeError naming the part that cannot be an action (MultiBinary, nested structures).
    """
    parts = space.spaces if isinstance(space, Tuple) else [v for _, v in space.items()]
    for part in parts:
        if not isinstance(part, Discrete | Box | MultiDiscrete):
            raise TypeError(
                f"action space {space!r}: part {part!r} is not supported in a Tuple/Dict action "
                "(Discrete, Box and MultiDiscrete are)"
            )
    return list(parts)


def flat_action_dim(space: Space) -> int:
    """Width of the flat action row of a Tuple/Dict space (see :func:`flatten_action`)."""
    return sum(1 if isinstance(p, Discrete) else int(np.prod(p.shape)) for p in action_parts(space))


def flatten_action(space: Space, actions: Any) -> np.ndarray:
    """Batched structured actions ``[B, ...]`` as the flat rows a SampleBatch stores.

    MultiDiscrete: int64 ``[B, k]`` (unchanged). Tuple/Dict: float32 ``[B, D]``, the parts
    side by side in layout order (Tuple order; sorted keys for Dict): a Discrete part is one
    column holding its index, a Box part its elements flattened, a MultiDiscrete part one
    column per choice. Indices are exact in float32 (below 2**24).
    """
    if isinstance(space, MultiDiscrete):
        return np.asarray(actions, dtype=np.int64)
    if not isinstance(space, Tuple | Dict):
        return np.asarray(actions)
    action_parts(space)  # refuses unsupported parts
    values = [np.asarray(v) for v in (actions if isinstance(space, Tuple) else (actions[k] for k in space))]
    return np.concatenate([v.reshape(v.shape[0], -1).astype(np.float32) for v in values], axis=1)


def unflatten_action(space: Space, flat: np.ndarray) -> Any:
    """The inverse of :func:`flatten_action`: a tuple or dict of batched arrays, as gymnasium's
    vector envs take them (Discrete and MultiDiscrete parts as int64, Box parts in their dtype)."""
    if not isinstance(space, Tuple | Dict):
        return flat
    flat = np.asarray(flat)
    out = []
    offset = 0
    for part in action_parts(space):
        width = 1 if isinstance(part, Discrete) else int(np.prod(part.shape))
        column = flat[:, offset : offset + width]
        offset += width
        if isinstance(part, Discrete):
            out.append(np.rint(column[:, 0]).astype(np.int64))
        elif isinstance(part, MultiDiscrete):
            out.append(np.rint(column).astype(np.int64))
        else:
            out.append(column.reshape(flat.shape[0], *part.shape).astype(part.dtype))
    if isinstance(space, Tuple):
        return tuple(out)
    return dict(zip(space.keys(), out, strict=True))


def clip_action(space: Space, actions: Any) -> Any:
    """Structured actions with their bounded Box parts clipped to the bounds (others unchanged)."""
    if isinstance(space, Box):
        return np.clip(actions, space.low, space.high) if space.bounded else actions
    if isinstance(space, Tuple):
        return tuple(clip_action(part, value) for part, value in zip(space.spaces, actions, strict=True))
    if isinstance(space, Dict):
        return {key: clip_action(space[key], actions[key]) for key in space}
    return actions
