"""The relational module's entities (``model.relational``): what both backends read as a set.

Zambaldi et al. 2018 ("Relational deep reinforcement learning") run multi-head dot-product
self-attention over *entities* and max-pool the result; this module fixes, once for both
backends, which observations are entity sets and how:

* an **image** (a rank-3 Box, :mod:`rlgear.config.conv`): the conv trunk's feature map
  ``[B, H', W', C]`` before flattening; each cell is an entity of ``C + 2`` features, its ``C``
  channels then its ``(x, y)`` coordinates in ``[-1, 1]`` (:func:`cell_coordinates`), as in the
  paper. Cells are in row-major (HWC) order and are always present.
* a **2-D Box** ``[N, F]``: ``N`` entities of ``F`` features (the flat row is ``N * F`` values,
  entity-major). **An all-zero row is an absent entity**: it is masked out of the attention keys
  and of the max pooling, so padding a set with zero rows changes nothing (Box-World's entity
  mode writes vanished pixels as zero rows). An observation with no entity present pools to zeros.

Anything else is refused with a one-line error naming ``model.relational``.

Weights (framework-neutral names; kernels ``[in, out]``): ``shared/conv_<i>/...`` (the conv trunk
of images), ``relational/input/{kernel,bias}`` (projection to ``relational_dim``), per block
``relational/block_<l>/``: ``norm_attention/{scale,offset}``,
``attention/{query,key,value,output}/{kernel,bias}``, ``norm_mlp/{scale,offset}``,
``mlp_0/{kernel,bias}``, ``mlp_1/{kernel,bias}`` (one ``block_0`` with
``relational_shared_weights``); then the catalog MLP's ``policy/...`` and ``value/...``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config.conv import ConvSpec, ImageVectorBox, conv_layers, is_image
from rlgear.errors import ConfigError
from rlgear.spaces import Box, Space

#: Layer-norm epsilon of both backends (torch's ``nn.LayerNorm`` default).
LAYER_NORM_EPSILON = 1e-5


@dataclass(frozen=True)
class EntityLayout:
    """How an observation row becomes ``[num_entities, features]``.

    ``conv`` is the image's trunk (entities are its output cells plus coordinates), or None for a
    2-D Box read row by row (entities may be absent: all-zero rows).
    """

    num_entities: int
    features: int
    conv: ConvSpec | None


def entity_layout(space: Space, model_config: Any) -> EntityLayout:
    """The entities of ``space`` (see the module docstring); ConfigError naming ``model.relational``
    for a space that is neither an image nor a 2-D Box."""
    if isinstance(space, ImageVectorBox):
        raise ConfigError(
            f"model.relational: the observation space {space!r} holds an image beside other parts; "
            "the relational module reads an image or a 2-D Box [entities, features] alone"
        )
    if is_image(space):
        spec = conv_layers(space, model_config)
        assert spec is not None
        height, width, channels = spec.output_shape
        return EntityLayout(height * width, channels + 2, spec)
    if isinstance(space, Box) and len(space.shape) == 2:
        if getattr(model_config, "conv_filters", None):
            raise ConfigError(
                f"model.conv_filters: set, but the observation space {space!r} is a 2-D Box of "
                "entities (model.relational reads its rows directly); remove it"
            )
        return EntityLayout(int(space.shape[0]), int(space.shape[1]), None)
    raise ConfigError(
        f"model.relational: expects an image (a rank-3 Box) or a 2-D Box [entities, features]; "
        f"the observation space is {space!r}"
    )


def mlp_dim(model_config: Any) -> int:
    """Hidden units of each block's MLP: ``relational_mlp_dim``, or 2 x ``relational_dim``."""
    return int(model_config.relational_mlp_dim or 2 * model_config.relational_dim)


def num_weight_blocks(model_config: Any) -> int:
    """Blocks with weights of their own: 1 with ``relational_shared_weights``, else ``relational_blocks``."""
    return 1 if model_config.relational_shared_weights else int(model_config.relational_blocks)


def cell_coordinates(height: int, width: int) -> np.ndarray:
    """``[height * width, 2]`` float32 ``(x, y)`` of each cell in row-major order, in ``[-1, 1]``
    (a single row or column sits at 0)."""
    xs = np.linspace(-1.0, 1.0, width) if width > 1 else np.zeros(1)
    ys = np.linspace(-1.0, 1.0, height) if height > 1 else np.zeros(1)
    grid_y, grid_x = np.meshgrid(ys, xs, indexing="ij")
    return np.stack([grid_x.ravel(), grid_y.ravel()], axis=-1).astype(np.float32)
