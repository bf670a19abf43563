"""rlgear spaces <-> gymnasium spaces, for Minari's metadata (which stores gymnasium's).

Core keeps no dependency on gymnasium; this module imports it only when called (Minari needs it
anyway). Compared by :func:`same_space`: ``Box`` has no ``==`` (its bounds are arrays).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Tuple


def to_gym(space: Space) -> Any:
    import gymnasium as gym

    if isinstance(space, Discrete):
        return gym.spaces.Discrete(space.n)
    if isinstance(space, Box):
        return gym.spaces.Box(space.low, space.high, dtype=space.dtype)
    if isinstance(space, MultiDiscrete):
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec))
    if isinstance(space, MultiBinary):
        return gym.spaces.MultiBinary(list(space.n) if len(space.n) > 1 else space.n[0])
    if isinstance(space, Dict):
        return gym.spaces.Dict({key: to_gym(sub) for key, sub in space.items()})
    if isinstance(space, Tuple):
        return gym.spaces.Tuple(tuple(to_gym(sub) for sub in space.spaces))
    raise TypeError(f"no gymnasium space for {space!r}")


def from_gym(space: Any, where: str) -> Space:
    """``where`` (a dataset) names the source in the error about a space rlgear has no twin of."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete) and int(space.start) == 0:
        return Discrete(int(space.n))
    if isinstance(space, gym.spaces.Box):
        return Box(space.low, space.high, space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1 and not np.any(space.start):
        return MultiDiscrete(tuple(int(n) for n in space.nvec))
    if isinstance(space, gym.spaces.MultiBinary):
        return MultiBinary(tuple(int(n) for n in np.atleast_1d(space.n)))
    if isinstance(space, gym.spaces.Dict):
        return Dict({key: from_gym(sub, where) for key, sub in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        return Tuple(from_gym(sub, where) for sub in space.spaces)
    from rlgear.errors import DatasetError

    raise DatasetError(f"{where}: space {space} has no rlgear equivalent (Box, Discrete, MultiDiscrete, ...)")


def same_space(a: Space, b: Space) -> bool:
    return json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)


def describe(space: Space) -> str:
    """A short one-line form for errors (``Box(float32, (4,))``, ``Discrete(2)``)."""
    if isinstance(space, Box):
        return f"Box({space.dtype}, {tuple(space.low.shape)})"
    if isinstance(space, Dict):
        return "Dict(" + ", ".join(f"{k}: {describe(s)}" for k, s in space.items()) + ")"
    if isinstance(space, Tuple):
        return "Tuple(" + ", ".join(describe(s) for s in space.spaces) + ")"
    return repr(space)
