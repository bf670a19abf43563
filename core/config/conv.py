"""The conv trunk of image observations, described once for every backend.

An observation space is an *image* when it is a rank-3 Box ``[H, W, C]``
(channels last, gymnasium's and Atari's layout). Models receive observations
flat, ``[B, H * W * C]`` in HWC order (what ``flatten_observations`` makes of
the image), reshape them to ``[B, H, W, C]``, scale them (uint8 by 1/255,
everything else as is), run the conv layers (no padding, as in Mnih et al.
2015 and the MinAtar paper) and flatten the result in HWC order again. That
order is fixed here so a checkpoint's first dense kernel means the same thing
on torch (NCHW inside) and TF (NHWC).

Framework-neutral conv kernels are ``[kh, kw, in, out]`` (TF's layout; torch's
``[out, in, kh, kw]`` is transposed on the way out and in, like dense kernels).

An image beside other parts of a Dict/Tuple observation reaches the model
as an :class:`ImageVectorBox`: one flat float32 row, the image first
(``H * W * C`` values in HWC order, unscaled) and the other parts' flat
features after it (``vector_size`` values). The conv trunk reads the image
part and appends the vector part to its features, so the hidden layers see
``[conv features, vector]`` (RLlib's ComplexInputNetwork, SB3's
CombinedExtractor).

The backends build their layers from :func:`conv_layers`, which also holds the
defaults and the config errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgear.errors import ConfigError
from rlgear.spaces import Box, Space

#: Mnih et al. 2015 (Nature DQN), for 84x84 Atari frames.
NATURE_FILTERS = [[32, 8, 4], [64, 4, 2], [64, 3, 1]]
#: The smallest image side the Nature stack fits (8/4, 4/2, 3/1 without padding leave 1x1 at 36).
NATURE_MIN_SIDE = 36
#: Young & Tian 2019 (MinAtar): one 16-channel 3x3 stride-1 layer for 10x10 inputs.
MINATAR_FILTERS = [[16, 3, 1]]


@dataclass(frozen=True)
class ConvLayer:
    """One conv layer: ``in_channels -> out_channels``, square ``kernel``, ``stride``, no padding."""

    in_channels: int
    out_channels: int
    kernel: int
    stride: int


@dataclass(frozen=True)
class ConvSpec:
    """The conv trunk of an image space: input shape and scale, layers, and the flat output width."""

    image_shape: tuple[int, int, int]  # H, W, C
    scale: float  # multiplies the observation before the first layer (1/255 for uint8)
    layers: tuple[ConvLayer, ...]
    output_shape: tuple[int, int, int]  # H', W', C' after the last layer
    #: Flat features after the image in each observation row (an :class:`ImageVectorBox`), passed
    #: through and appended to the conv features; 0 for a plain image.
    vector_size: int = 0

    @property
    def twin_acts(self) -> bool:
        """Whether the numpy acting twin runs this trunk (``model.numpy_inference``): for images below
        the Nature stack's 36x36 only. For MinAtar-sized frames it is 2.3-2.9x faster than the
        framework; for 84x84 Atari frames it is no faster on a quiet machine (0.8-1.2x,
        ``bench/conv_acting.py``) and several times slower on a loaded one (its im2col matmuls go
        through multi-threaded BLAS, the frameworks act on one thread), so the framework acts there."""
        return min(self.image_shape[:2]) < NATURE_MIN_SIDE

    @property
    def conv_dim(self) -> int:
        """Width of the last conv layer's output, flattened."""
        return int(np.prod(self.output_shape))

    @property
    def image_size(self) -> int:
        """Width of the image part of an observation row, ``H * W * C``."""
        return int(np.prod(self.image_shape))

    @property
    def output_dim(self) -> int:
        """Width of what the trunk hands to the hidden layers: conv features, then the vector part."""
        return self.conv_dim + self.vector_size


@dataclass(frozen=True, eq=False)
class ImageVectorBox(Box):
    """A flat float32 Box ``[H * W * C + vector_size]``: an image (HWC order, unscaled) then a vector.

    What :class:`rlgear.preprocessing.ObservationPreprocessor` makes of a Dict/Tuple
    observation holding one image beside other parts. It *is* a flat Box, so
    batches, replay buffers, sequences and transfers carry it as any flat
    observation; models read ``image`` to split each row (see the module docstring).
    """

    # A default only because Box's own fields have defaults; build it with image_vector_box().
    image: Box = field(default_factory=lambda: Box(np.zeros((1, 1, 1)), np.ones((1, 1, 1))))

    @property
    def vector_size(self) -> int:
        return self.size - self.image.size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImageVectorBox) and Box.__eq__(self, other) and self.image == other.image

    def __hash__(self) -> int:
        return hash((self.shape, self.image.shape, str(self.image.dtype)))

    def __repr__(self) -> str:
        return f"ImageVectorBox(image={self.image!r}, vector_size={self.vector_size})"


def image_vector_box(image: Box, vector_size: int) -> ImageVectorBox:
    """The unbounded float32 row layout of ``image`` followed by ``vector_size`` features."""
    width = image.size + vector_size
    return ImageVectorBox(
        np.full(width, -np.inf, dtype=np.float32), np.full(width, np.inf, dtype=np.float32), image=image
    )


def is_image(space: Space) -> bool:
    """A rank-3 Box ``[H, W, C]``: what the conv trunk takes."""
    return isinstance(space, Box) and len(space.shape) == 3


def has_conv_input(space: Space) -> bool:
    """An image, or an :class:`ImageVectorBox` row (image plus vector): a space with a conv trunk."""
    return is_image(space) or isinstance(space, ImageVectorBox)


def default_filters(height: int, width: int) -> list[list[int]]:
    """The Nature-DQN stack when the image is large enough for it (36x36 and up), else MinAtar's."""
    return NATURE_FILTERS if min(height, width) >= NATURE_MIN_SIDE else MINATAR_FILTERS


def conv_layers(space: Space, model_config: Any) -> ConvSpec | None:
    """The conv trunk for ``space`` from ``model.conv_filters``, or None if ``space`` is not an image.

    For an :class:`ImageVectorBox` the trunk is its image's, with ``vector_size`` set.
    Raises ConfigError naming ``model.conv_filters`` for a malformed entry or a
    stack that shrinks the image below 1x1 (saying which layer and the sizes).
    """
    filters = getattr(model_config, "conv_filters", None)
    vector_size = 0
    if isinstance(space, ImageVectorBox):
        space, vector_size = space.image, space.vector_size
    if not is_image(space):
        if filters:
            raise ConfigError(
                f"model.conv_filters: set, but the observation space {space!r} is not an image "
                "(a rank-3 Box [height, width, channels]); remove it for flat observations"
            )
        return None
    height, width, channels = (int(d) for d in space.shape)
    if filters is None:
        filters = default_filters(height, width)
    if not filters:
        raise ConfigError("model.conv_filters: expected at least one [out_channels, kernel, stride] layer")
    layers = []
    h, w, c = height, width, channels
    for i, entry in enumerate(filters):
        if not (
            isinstance(entry, list | tuple)
            and len(entry) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in entry)
        ):
            raise ConfigError(
                f"model.conv_filters[{i}]: expected [out_channels, kernel, stride] (three positive "
                f"integers), got {entry!r}"
            )
        out_channels, kernel, stride = entry
        next_h, next_w = (h - kernel) // stride + 1, (w - kernel) // stride + 1
        if h < kernel or w < kernel:
            raise ConfigError(
                f"model.conv_filters[{i}]: kernel {kernel} does not fit the {h}x{w} input of layer {i} "
                f"(image {height}x{width}x{channels}; every layer shrinks it, without padding, to "
                f"(size - kernel) // stride + 1); use fewer or smaller layers"
            )
        layers.append(ConvLayer(c, out_channels, kernel, stride))
        h, w, c = next_h, next_w, out_channels
    dtype = np.dtype(space.dtype)
    scale = 1.0 / 255.0 if dtype == np.uint8 else 1.0
    return ConvSpec((height, width, channels), scale, tuple(layers), (h, w, c), vector_size)
