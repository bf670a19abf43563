"""The attention memory's recurrent state (``model.attention``): its layout, shared by both backends.

The catalog attention model (GTrXL, Parisotto et al. 2019) is a recurrent model whose state is
its memory, so it rides on everything the LSTM has: the evaluator carries the state per env slot,
zeroes it at FIRST steps and stores it in the batch as ``state_in_<k>``; the learner starts each
sequence from the state of its first row. Two float32 arrays per env slot:

* ``state_in_0`` -- the memory, ``[B, layers * M * dim]``: for block ``l`` the block's *inputs* at
  the last ``M`` (``attention_memory``) steps, oldest first; flat so that it travels through the
  same ``[B, width]`` columns as the LSTM's ``h`` and ``c`` (the models view it as
  ``[B, layers, M, dim]``);
* ``state_in_1`` -- the validity mask, ``[B, M]``: 1 where that slot holds a step of the current
  episode, 0 where it is empty.

Zeros (the evaluator's reset at FIRST) are an empty memory. Each step attends to itself and to the
valid slots and earlier steps of its own episode no more than ``M`` steps back, when acting one
step at a time and when learning on sequences alike, so a learner's sequence gives the actor's
outputs exactly.

Weights (framework-neutral names; kernels ``[in, out]``): ``shared/hidden_<i>`` (the MLP trunk),
``attention/input/{kernel,bias}`` (projection to ``dim``), per block ``attention/block_<l>/``:
``norm_attn/{scale,offset}``, ``attn/{query,key,value,output}/kernel``, ``attn/distance_bias``
(``[heads, M + 1]``, a learned logit bias per head and distance back: the relative position),
``gate_attn/{input_kernel,state_kernel,candidate_kernel,bias}``, ``norm_mlp/{scale,offset}``,
``mlp_0/{kernel,bias}``, ``mlp_1/{kernel,bias}``, ``gate_mlp/...``; then ``policy/output``,
``value/output`` (``policy/log_std`` for Box actions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.errors import ConfigError
from rlgear.spaces import Box, Discrete, Space

#: Epsilon of the blocks' layer norms (torch's default), the same on both backends.
LAYER_NORM_EPSILON = 1e-5
#: GTrXL's gate bias ``b_g``: the update gate starts near 0 (sigmoid(-2) = 0.12), so each block
#: starts near the identity map and the agent first learns as if memoryless (Parisotto et al. 2019).
GATE_BIAS_INIT = 2.0


def check_action_space(action_space: Space) -> None:
    """The attention models have one Categorical or Gaussian head, as the LSTM's: MultiDiscrete and
    Tuple/Dict actions are refused by name rather than given a head of the wrong width."""
    if not isinstance(action_space, Discrete | Box):
        raise ConfigError(
            f"model.attention: recurrent policies act in Discrete or Box action spaces, the env's is "
            f"{action_space!r} (use a feed-forward model, model.attention: false)"
        )


def mlp_dim(model_config: Any) -> int:
    """Hidden units of each block's MLP: ``attention_mlp_dim``, or 4 x ``attention_dim``."""
    return int(model_config.attention_mlp_dim or 4 * model_config.attention_dim)


def state_sizes(model_config: Any) -> tuple[int, int]:
    """Widths of the two state arrays: the flat memory (``layers * M * dim``) and the mask (``M``)."""
    memory = int(model_config.attention_memory)
    return int(model_config.attention_layers) * memory * int(model_config.attention_dim), memory


def initial_state(batch_size: int, model_config: Any) -> list[np.ndarray]:
    """An empty memory for ``batch_size`` env slots: zeros, all slots invalid."""
    return [np.zeros((batch_size, width), np.float32) for width in state_sizes(model_config)]


def bytes_per_row(model_config: Any) -> int:
    """Bytes the state adds to each batch row (``state_in_0`` and ``state_in_1``, float32)."""
    return 4 * sum(state_sizes(model_config))
