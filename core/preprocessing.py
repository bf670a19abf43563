"""The observation preprocessor: structured observations as the arrays models take (numpy only).

Why here: the evaluator runs it on every TimeStep before anything else reads
it, so every backend and every algorithm sees the same arrays, and models
never deal with nests. Built from the env's observation space:

* a top-level ``Box`` passes through unchanged (images keep their ``[H, W, C]``
  shape for a conv net; flat vectors stay as they are), and so does a top-level
  ``Discrete`` (policies one-hot it themselves);
* ``Dict``, ``Tuple``, ``MultiDiscrete`` and ``MultiBinary`` become one flat
  float32 ``Box`` ``[F]``: Box parts flattened, Discrete parts one-hot,
  MultiDiscrete parts concatenated one-hots, MultiBinary parts as 0/1 floats,
  nested structures recursively, in the space's order (Tuple order, sorted
  Dict keys);
* except that an image (a rank-3 Box ``[H, W, C]``) nested in a Dict/Tuple is
  not mixed into that vector: the row starts with the image's ``H * W * C``
  values (HWC order, unscaled) and the other parts follow as above, and the
  space is an :class:`~rlgear.config.conv.ImageVectorBox` that tells models
  where the image ends (the conv trunk takes the image, the vector joins its
  features). One image per observation: several are refused with a
  ConfigError naming them;
* the key ``action_mask`` of a top-level ``Dict`` is not model input: it is the
  action mask (the gymnasium / PettingZoo convention), read by
  :meth:`ObservationPreprocessor.action_mask`. When a single other key is
  left and it is a Box or Discrete, that part passes through as if it were the
  whole observation (PettingZoo's ``{"observation", "action_mask"}``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.config.conv import image_vector_box, is_image
from rlgear.errors import ConfigError, EnvDataError
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Tuple, flat_dim

#: The Dict-observation key holding the action mask.
ACTION_MASK_KEY = "action_mask"

Encoder = Callable[[Any, np.ndarray], None]  # (batched observation part, out[B, width]) -> fills out


def _one_hot_into(values: np.ndarray, n: int, out: np.ndarray, what: str) -> None:
    values = np.asarray(values).astype(np.int64, copy=False).reshape(-1)
    if values.size and (values.min() < 0 or values.max() >= n):
        raise EnvDataError(
            f"observation{what}: values must be in 0..{n - 1}, got {values.min()}..{values.max()}"
        )
    out[:] = 0.0
    out[np.arange(values.shape[0]), values] = 1.0


def _skip(obs: Any, out: np.ndarray) -> None:
    """The encoder of a part written elsewhere (the image of an image-plus-vector row)."""


def _key_path(path: str, key: Any) -> str:
    return f"{path}[{key!r}]" if isinstance(key, str) else f"{path}[{key}]"


def _image_leaves(space: Space, keys: tuple = (), path: str = "") -> list[tuple[tuple, str, Box]]:
    """``(keys, path, space)`` of every image nested in a Dict/Tuple ``space``, in layout order."""
    if is_image(space):
        return [(keys, path, space)]
    if isinstance(space, Dict | Tuple):
        keyed = space.items() if isinstance(space, Dict) else list(enumerate(space.spaces))
        return [leaf for key, sub in keyed for leaf in _image_leaves(sub, (*keys, key), _key_path(path, key))]
    return []


def _encoder(space: Space, path: str, skip_images: bool = False) -> tuple[Encoder, int]:
    """``(encoder, width)`` writing the flat float32 features of ``space`` into a ``[B, width]`` view.

    ``skip_images``: images take no width here (they head the row, see the module docstring).
    """
    if skip_images and is_image(space):
        return _skip, 0
    if isinstance(space, Box | MultiBinary):

        def encode(obs: Any, out: np.ndarray) -> None:
            obs = np.asarray(obs)
            out[:] = obs.reshape(obs.shape[0], -1)

        return encode, flat_dim(space)
    if isinstance(space, Discrete):
        return (lambda obs, out: _one_hot_into(obs, space.n, out, path)), space.n
    if isinstance(space, MultiDiscrete):
        offsets = np.concatenate([[0], np.cumsum(space.nvec)])

        def encode(obs: Any, out: np.ndarray) -> None:
            obs = np.asarray(obs)
            for i, n in enumerate(space.nvec):
                _one_hot_into(obs[:, i], n, out[:, offsets[i] : offsets[i + 1]], f"{path}[{i}]")

        return encode, int(offsets[-1])
    if isinstance(space, Dict | Tuple):
        keyed = space.items() if isinstance(space, Dict) else list(enumerate(space.spaces))
        parts = []
        offset = 0
        for key, sub in keyed:
            encode_part, width = _encoder(sub, _key_path(path, key), skip_images)
            parts.append((key, encode_part, offset, offset + width))
            offset += width

        def encode(obs: Any, out: np.ndarray) -> None:
            for key, encode_part, start, end in parts:
                encode_part(obs[key], out[:, start:end])

        return encode, offset
    raise TypeError(f"observation{path}: unsupported space {space!r}")


def batch_size(obs: Any) -> int:
    """The leading dimension of a batched (possibly nested) observation."""
    while isinstance(obs, dict | tuple | list):
        obs = next(iter(obs.values())) if isinstance(obs, dict) else obs[0]
    return int(np.shape(obs)[0])


class ObservationPreprocessor:
    """Turns a batch of env observations into what the policy sees, and reads the action mask.

    Args:
        space: the env's observation space (raw, as the adapter reports it).
        action_space: the env's action space (a mask must fit it).
        env_name: named in errors.
    """

    def __init__(self, space: Space, action_space: Space | None = None, env_name: str = "env"):
        self.raw_space = space
        self.env_name = env_name
        self.mask_width: int | None = None
        model_space: Space = space
        self._select: Any = None  # the key kept when action_mask leaves a single part
        if isinstance(space, Dict) and ACTION_MASK_KEY in space:
            self.mask_width = self._check_mask_space(space[ACTION_MASK_KEY], action_space)
            rest = {k: v for k, v in space.items() if k != ACTION_MASK_KEY}
            if not rest:
                raise ConfigError(f"env {env_name}: the Dict observation holds only an action_mask")
            if len(rest) == 1 and isinstance(next(iter(rest.values())), Box | Discrete):
                self._select = next(iter(rest))
                model_space = rest[self._select]
            else:
                model_space = Dict(rest)
        #: True when observations reach the policy unchanged (top-level Box or Discrete).
        self.identity = isinstance(model_space, Box | Discrete) and self._select is None
        #: The keys leading to the image that heads each row (image-plus-vector layout), else None.
        self._image_keys: tuple | None = None
        self._image_size = 0
        if self.identity or self._select is not None:
            self.observation_space: Space = model_space
            self._encode = None
            return
        images = _image_leaves(model_space)
        if len(images) > 1:
            raise ConfigError(
                f"env {env_name}: the observation holds {len(images)} images (rank-3 Boxes) at "
                f"{', '.join('observation' + path for _, path, _ in images)}; the conv net takes one "
                "image per observation (stack them into one [H, W, C] image, e.g. along channels, or "
                "flatten the others with a wrapper)"
            )
        self._encode, width = _encoder(model_space, "", skip_images=bool(images))
        if images:
            self._image_keys, _, image = images[0]
            self._image_size = image.size
            self.observation_space = image_vector_box(image, width)
        else:
            self.observation_space = Box(
                np.full(width, -np.inf, dtype=np.float32), np.full(width, np.inf, dtype=np.float32)
            )

    def _check_mask_space(self, mask_space: Space, action_space: Space | None) -> int:
        if not isinstance(mask_space, MultiBinary | Box) or len(mask_space.shape) != 1:
            raise ConfigError(
                f"env {self.env_name}: observation['action_mask'] must be a flat MultiBinary or Box "
                f"(one flag per action), got {mask_space!r}"
            )
        width = mask_space.shape[0]
        if isinstance(action_space, Discrete):
            expected = action_space.n
        elif isinstance(action_space, MultiDiscrete):
            expected = sum(action_space.nvec)
        else:
            raise ConfigError(
                f"env {self.env_name}: an action_mask needs Discrete or MultiDiscrete actions, "
                f"the env's action space is {action_space!r}"
            )
        if width != expected:
            raise ConfigError(
                f"env {self.env_name}: observation['action_mask'] has {width} flags, the action space "
                f"{action_space!r} needs {expected}"
            )
        return width

    def transform(self, observations: Any) -> Any:
        """The model's input for a batch ``[B, ...]`` (a dict/tuple of batched arrays for Dict/Tuple)."""
        if self.identity:
            return observations
        if self._select is not None:
            return observations[self._select]
        if isinstance(self.raw_space, Dict) and self.mask_width is not None:
            observations = {k: v for k, v in observations.items() if k != ACTION_MASK_KEY}
        out = np.empty((batch_size(observations), self.observation_space.shape[0]), dtype=np.float32)
        if self._image_keys is not None:
            image = observations
            for key in self._image_keys:
                image = image[key]
            image = np.asarray(image)
            out[:, : self._image_size] = image.reshape(image.shape[0], -1)
            self._encode(observations, out[:, self._image_size :])
        else:
            self._encode(observations, out)
        return out

    def action_mask(self, observations: Any) -> np.ndarray | None:
        """bool ``[B, n]`` allowed actions, or None when the observations carry no mask."""
        if self.mask_width is None:
            return None
        mask = np.asarray(observations[ACTION_MASK_KEY])
        if mask.ndim != 2 or mask.shape[1] != self.mask_width:
            raise EnvDataError(
                f"env {self.env_name}: action_mask has shape {mask.shape}, expected [B, {self.mask_width}]"
            )
        return mask.astype(bool, copy=False)

    def checked_mask(self, mask: np.ndarray, step_type: np.ndarray, blocks: tuple[int, ...]) -> np.ndarray:
        """``mask`` with every row allowing at least one action in each block, or an error naming the env.

        ``blocks``: the sizes of the mask's parts (``(n,)`` for Discrete, ``nvec`` for MultiDiscrete).
        A LAST row's action is ignored by the env (next-step autoreset), and envs often allow nothing
        at a terminal step: such rows become all-allowed, so no distribution sees a row without any
        action (whose probabilities would be NaN). Any other row without an allowed action is an env bug.
        """
        offsets = np.concatenate([[0], np.cumsum(blocks)])
        empty = np.zeros(mask.shape[0], dtype=bool)
        for start, end in itertools.pairwise(offsets):
            empty |= ~mask[:, start:end].any(axis=1)
        if not empty.any():
            return mask
        last = step_type == 2  # StepType.LAST
        bad = empty & ~last
        if bad.any():
            raise EnvDataError(
                f"env {self.env_name}: action_mask allows no action in env slot(s) "
                f"{np.flatnonzero(bad).tolist()} at a step that is not the episode's last "
                "(every mask row must allow at least one action"
                + (" per sub-action)" if len(blocks) > 1 else ")")
            )
        mask = mask.copy()
        mask[empty] = True
        return mask
