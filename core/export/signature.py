"""What an exported policy takes and gives, decided once for every format (numpy only).

Why here, framework-free: ONNX, TorchScript and SavedModel files must take the same inputs and
give the same outputs, and the sidecar ``PATH.json`` and ``docs/export.md`` describe them for
players written in any language. Each backend's exporter builds its graph from an
:class:`ObservationPlan` (the preprocessing rlgear does before acting, spelled out as data) and
names inputs and outputs with the functions below.

Inputs are the env's observation as the env gives it:

* a ``Box`` or ``Discrete`` observation is one input ``obs`` (``[B, *shape]`` float32, or
  ``[B]`` int64 for Discrete);
* a ``Dict`` or ``Tuple`` observation is one input per leaf, ``obs.<key>`` (nested:
  ``obs.<key>.<key>``; Tuple parts by index, ``obs.0``), including ``obs.action_mask`` when the
  env gives an action mask that way (1 = allowed);
* ``MultiBinary`` leaves are float32 0/1, ``MultiDiscrete`` leaves int64 ``[B, k]``;
* a recurrent policy adds its state (:class:`RecurrentSignature`): ``state_in.0`` and
  ``state_in.1``, zeros at an episode's start (the LSTM's ``h`` and ``c`` ``[B, cell]``, or the
  attention memory and its mask); an LSTM policy also ``prev_action`` (the action it returned
  last, zeros at a start) and ``prev_reward`` (float32 ``[B]``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlgear.config.conv import is_image
from rlgear.errors import RLGearError
from rlgear.preprocessing import ACTION_MASK_KEY, ObservationPreprocessor
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Tuple, action_parts

#: The formats ``rlgear export`` writes, and the backend that writes each.
FORMAT_BACKENDS = {"onnx": "torch", "torchscript": "torch", "savedmodel": "tf"}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, dtype (``float32``, ``int64``) and shape (None: any size)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]
    doc: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "doc": self.doc}


@dataclasses.dataclass(frozen=True)
class ObservationLeaf:
    """One part of the env's observation: the input ``name``, the keys that reach it, its space."""

    name: str
    keys: tuple[Any, ...]
    space: Space

    @property
    def spec(self) -> TensorSpec:
        integer = isinstance(self.space, Discrete | MultiDiscrete)
        return TensorSpec(self.name, "int64" if integer else "float32", (None, *self.space.shape))


@dataclasses.dataclass(frozen=True)
class Encoding:
    """How one leaf becomes columns of the model's flat input, in order.

    ``kind``: ``float`` (the values flattened), ``one_hot`` (a Discrete index, ``sizes = (n,)``)
    or ``one_hots`` (a MultiDiscrete row, one one-hot per entry of ``sizes``).
    """

    leaf: int
    kind: str
    sizes: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class FilterPlan:
    """The frozen observation filter: ``clip((x - mean) / sqrt(var + epsilon), -clip, clip)`` on the
    columns from ``passthrough`` on (the image columns before it pass unchanged)."""

    mean: np.ndarray
    var: np.ndarray
    epsilon: float
    clip: float
    passthrough: int


@dataclasses.dataclass(frozen=True)
class ObservationPlan:
    """Every step from the env's observation to the model's flat float32 input ``[B, F]``."""

    leaves: tuple[ObservationLeaf, ...]
    encodings: tuple[Encoding, ...]
    mask_leaf: int | None
    filter: FilterPlan | None

    def to_json(self) -> dict[str, Any]:
        """The plan as the sidecar describes it (so a player can check what the graph does)."""
        steps = [
            {
                "input": self.leaves[e.leaf].name,
                "encoding": e.kind,
                **({"sizes": list(e.sizes)} if e.sizes else {}),
            }
            for e in self.encodings
        ]
        out: dict[str, Any] = {"flat_input": steps, "action_mask_input": None, "observation_filter": None}
        if self.mask_leaf is not None:
            out["action_mask_input"] = self.leaves[self.mask_leaf].name
        if self.filter is not None:
            f = self.filter
            out["observation_filter"] = {
                "mean": f.mean.astype(float).tolist(), "var": f.var.astype(float).tolist(),
                "epsilon": f.epsilon, "clip": f.clip, "passthrough_columns": f.passthrough,
            }  # fmt: skip
        return out


def _leaves(space: Space, keys: tuple = (), name: str = "obs") -> list[ObservationLeaf]:
    if isinstance(space, Dict | Tuple):
        keyed = space.items() if isinstance(space, Dict) else list(enumerate(space.spaces))
        return [leaf for key, sub in keyed for leaf in _leaves(sub, (*keys, key), f"{name}.{key}")]
    if not isinstance(space, Box | Discrete | MultiDiscrete | MultiBinary):
        raise TypeError(f"observation part {name}: unsupported space {space!r}")
    return [ObservationLeaf(name, keys, space)]


def _encoding(index: int, space: Space) -> Encoding:
    if isinstance(space, Discrete):
        return Encoding(index, "one_hot", (space.n,))
    if isinstance(space, MultiDiscrete):
        return Encoding(index, "one_hots", tuple(int(n) for n in space.nvec))
    return Encoding(index, "float")


def observation_plan(preprocessor: ObservationPreprocessor, obs_filter: Any = None) -> ObservationPlan:
    """The plan of ``preprocessor`` (:class:`rlgear.preprocessing.ObservationPreprocessor`) and the
    frozen ``obs_filter`` (:class:`rlgear.sampling.observation_filter.ObservationFilter` or None):
    the same columns in the same order as :meth:`ObservationPreprocessor.transform`."""
    leaves = tuple(_leaves(preprocessor.raw_space))
    mask_leaf = next((i for i, leaf in enumerate(leaves) if leaf.keys == (ACTION_MASK_KEY,)), None)
    if preprocessor.mask_width is None:
        mask_leaf = None
    model_leaves = [i for i in range(len(leaves)) if i != mask_leaf]
    images = [i for i in model_leaves if is_image(leaves[i].space)]
    # An image nested in a Dict/Tuple heads the row (the conv trunk reads it first); a top-level one
    # is the whole row anyway.
    order = images[:1] + [i for i in model_leaves if i not in images[:1]]
    encodings = tuple(_encoding(i, leaves[i].space) for i in order)
    plan_filter = None
    if obs_filter is not None:
        stats = obs_filter.stats
        plan_filter = FilterPlan(
            np.asarray(stats.mean, np.float64), np.asarray(stats.var, np.float64),
            float(_filter_epsilon()), float(obs_filter.clip), int(obs_filter.passthrough or 0),
        )  # fmt: skip
    return ObservationPlan(leaves, encodings, mask_leaf, plan_filter)


def _filter_epsilon() -> float:
    from rlgear.sampling.observation_filter import EPSILON

    return EPSILON


# --- outputs -------------------------------------------------------------------------------


def action_output_specs(action_space: Space) -> list[TensorSpec]:
    """The action outputs, first in every graph: ``action`` or, for Tuple/Dict actions, one
    ``action.<key>`` per part in layout order; as the env takes them (bounded Box parts clipped)."""
    if isinstance(action_space, Tuple | Dict):
        keys = (
            list(action_space.keys()) if isinstance(action_space, Dict) else range(len(action_space.spaces))
        )
        return [
            _action_spec(f"action.{key}", part)
            for key, part in zip(keys, action_parts(action_space), strict=True)
        ]
    return [_action_spec("action", action_space)]


def _action_spec(name: str, space: Space) -> TensorSpec:
    if isinstance(space, Discrete):
        return TensorSpec(name, "int64", (None,), "the action index")
    if isinstance(space, MultiDiscrete):
        return TensorSpec(name, "int64", (None, len(space.nvec)), "one index per choice")
    doc = "clipped to the Box bounds, as the env takes it" if space.bounded else "as the env takes it"
    return TensorSpec(name, "float32", (None, *space.shape), doc)


@dataclasses.dataclass(frozen=True)
class RecurrentSignature:
    """The state a recurrent policy's graph takes and gives back, after the observation's inputs and
    the action outputs: ``kind`` is ``lstm`` (``h``, ``c``, the previous action and reward) or
    ``attention`` (the memory and its mask, nothing else: the GTrXL model reads neither the previous
    action nor the reward). A player feeds ``state_out.<k>`` back as ``state_in.<k>``."""

    kind: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


def lstm_signature(action_space: Space, cell_size: int) -> RecurrentSignature:
    """``model.lstm``: ``h`` and ``c`` ``[B, cell]``, the previous action and the previous reward."""
    if isinstance(action_space, Discrete):
        prev = TensorSpec("prev_action", "int64", (None,), "the action returned last (0 at a start)")
    else:
        prev = TensorSpec("prev_action", "float32", (None, *action_space.shape), "the action returned last")
    inputs = [
        TensorSpec("state_in.0", "float32", (None, cell_size), "LSTM h (zeros at an episode's start)"),
        TensorSpec("state_in.1", "float32", (None, cell_size), "LSTM c (zeros at an episode's start)"),
        prev,
        TensorSpec("prev_reward", "float32", (None,), "the reward of the previous step (0 at a start)"),
    ]
    outputs = [
        TensorSpec("state_out.0", "float32", (None, cell_size), "LSTM h after this step"),
        TensorSpec("state_out.1", "float32", (None, cell_size), "LSTM c after this step"),
    ]
    return RecurrentSignature("lstm", inputs, outputs)


def attention_signature(memory_width: int, slots: int) -> RecurrentSignature:
    """``model.attention``: the memory ``[B, layers * M * dim]`` (each block's inputs at the last
    ``M`` steps, oldest first) and its mask ``[B, M]`` (1 where a slot holds a step of this
    episode); zeros for both are an empty memory, what an episode starts from."""
    memory_doc = "each block's inputs at the last M steps, oldest first"
    mask_doc = "1 where a memory slot holds a step of this episode"
    inputs = [
        TensorSpec("state_in.0", "float32", (None, memory_width), f"attention memory: {memory_doc} (zeros at a start)"),
        TensorSpec("state_in.1", "float32", (None, slots), f"memory mask: {mask_doc} (zeros at a start)"),
    ]  # fmt: skip
    outputs = [
        TensorSpec("state_out.0", "float32", (None, memory_width), "the attention memory after this step"),
        TensorSpec("state_out.1", "float32", (None, slots), "the memory mask after this step"),
    ]
    return RecurrentSignature("attention", inputs, outputs)


def recurrent_signature(model_config: Any, action_space: Space) -> RecurrentSignature | None:
    """The state inputs and outputs of a catalog actor-critic with ``model_config`` (None: it has none)."""
    if getattr(model_config, "attention", False):
        from rlgear.blocks.attention_memory import state_sizes

        return attention_signature(*state_sizes(model_config))
    if getattr(model_config, "lstm", False):
        return lstm_signature(action_space, int(model_config.lstm_cell_size))
    return None


def explore_refused(what: str) -> RLGearError:
    """The one-line refusal of ``--explore`` for a policy whose exploration lives outside its network
    (``what`` says whose, and why), the same from every backend."""
    return RLGearError(f"--explore: {what}: export without --explore")
