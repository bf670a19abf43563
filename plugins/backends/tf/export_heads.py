"""The acting part of an exported TF policy (a SavedModel): from the flat model input to the named outputs.

The TensorFlow twin of ``rlgear.plugins.backends.torch.export_heads``: the same heads, the same
outputs in the same order with the same names, dtypes and shapes, so a SavedModel and an ONNX
file of one checkpoint are interchangeable. Why a head per policy kind: what "acting" means
differs (a distribution's greedy action, a Q-network's argmax, a squashed actor rescaled to the
bounds), and each policy class knows its own: :meth:`TFActing.export_head` gives the
actor-critic one, DQN and the off-policy actors override it. A head is a ``tf.Module`` called
as ``head(flat, mask, extras)`` returning a list in the order of :attr:`ExportHead.outputs`,
so :mod:`rlgear.plugins.backends.tf.export` can put the preprocessing in front of any of them.

Sampling (``--explore``) draws its noise inside the graph (``tf.random``): the policy's own
acting feeds noise drawn by numpy from outside, which a deployed graph has no one to do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.export.signature import (
    RecurrentSignature,
    TensorSpec,
    action_output_specs,
)
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Space, Tuple, action_parts


class ExportHead(tf.Module):
    """Base of the heads: ``extra_inputs`` (after the observation's) and ``outputs`` describe it."""

    def __init__(self) -> None:
        super().__init__()
        self.extra_inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []

    def __call__(self, flat: tf.Tensor, mask: tf.Tensor | None, extras: list[tf.Tensor]) -> list[tf.Tensor]:
        raise NotImplementedError


def sampling_noise(space: Space, batch: tf.Tensor) -> tf.Tensor:
    """Noise for ``dist_class(space).sample``, drawn in the graph: uniform columns for each
    Discrete/MultiDiscrete part (Gumbel-max), standard-normal ones for each Box part, side by side
    in the layout of :func:`rlgear.plugins.backends.tf.distributions.action_noise_width`."""
    if isinstance(space, Discrete):
        return tf.random.uniform([batch, space.n], dtype=tf.float32)
    if isinstance(space, MultiDiscrete):
        return tf.random.uniform([batch, int(sum(space.nvec))], dtype=tf.float32)
    if isinstance(space, Box):
        return tf.random.normal([batch, space.size], dtype=tf.float32)
    return tf.concat([sampling_noise(part, batch) for part in action_parts(space)], axis=-1)


class ActionOutputs(tf.Module):
    """Flat actions ``[B, D]`` (or ``[B]``) -> the action outputs as the env takes them: composite
    actions split into their parts, bounded Box parts clipped (what the collector does)."""

    def __init__(self, action_space: Space):
        super().__init__()
        self.composite = isinstance(action_space, Tuple | Dict)
        self.parts = action_parts(action_space) if self.composite else [action_space]
        self.bounds = {
            i: (
                tf.constant(np.asarray(part.low, np.float32).reshape(-1)),
                tf.constant(np.asarray(part.high, np.float32).reshape(-1)),
            )
            for i, part in enumerate(self.parts)
            if isinstance(part, Box) and part.bounded
        }

    def _clipped(self, i: int, values: tf.Tensor) -> tf.Tensor:
        if i in self.bounds:
            low, high = self.bounds[i]
            values = tf.minimum(tf.maximum(values, low), high)
        return values

    def __call__(self, actions: tf.Tensor) -> list[tf.Tensor]:
        batch = tf.shape(actions)[0]
        if not self.composite:
            (part,) = self.parts
            if isinstance(part, Discrete | MultiDiscrete):
                return [tf.cast(actions, tf.int64)]
            flat = self._clipped(0, tf.reshape(actions, [batch, -1]))
            return [tf.reshape(flat, [batch, *part.shape])]
        out, offset = [], 0
        for i, part in enumerate(self.parts):
            width = (
                1
                if isinstance(part, Discrete)
                else int(part.size if isinstance(part, Box) else len(part.nvec))
            )
            column = actions[:, offset : offset + width]
            offset += width
            if isinstance(part, Discrete):
                out.append(tf.cast(tf.round(column[:, 0]), tf.int64))
            elif isinstance(part, MultiDiscrete):
                out.append(tf.cast(tf.round(column), tf.int64))
            else:
                out.append(tf.reshape(self._clipped(i, column), [batch, *part.shape]))
        return out


def distribution_output_specs(action_space: Space, num_inputs: int) -> list[TensorSpec]:
    """The distribution's extras: what the action was drawn from (the torch head's, name for name)."""
    if isinstance(action_space, Discrete | MultiDiscrete):
        return [TensorSpec("logits", "float32", (None, num_inputs), "the policy's logits (before masking)")]
    if isinstance(action_space, Box):
        size = action_space.size
        specs = []
        if action_space.bounded:
            specs.append(TensorSpec("action_raw", "float32", (None, *action_space.shape), "before clipping"))
        return [
            *specs,
            TensorSpec("mean", "float32", (None, size), "the Gaussian's means"),
            TensorSpec("log_std", "float32", (None, size), "the Gaussian's log standard deviations"),
        ]
    return [
        TensorSpec("action_flat", "float32", (None, None), "the action parts side by side, before clipping"),
        TensorSpec("dist_inputs", "float32", (None, num_inputs), "each part's logits or means and log stds"),
    ]


class ActorCriticHead(ExportHead):
    """A model ``(flat) -> (dist_inputs, values)`` (or a recurrent one's with its state: ``recurrent``
    says which inputs and outputs carry it) and its distribution:
    the action (greedy, or sampled with ``explore``), the distribution's inputs, the value and the
    action's log-probability."""

    def __init__(
        self, model: Any, dist_class: Any, action_space: Space, num_inputs: int, explore: bool,
        recurrent: RecurrentSignature | None = None,
    ):  # fmt: skip
        super().__init__()
        self.model = model
        self.dist_class = dist_class
        self.action_space = action_space
        self.explore = explore
        self.recurrent = recurrent
        self.actions = ActionOutputs(action_space)
        self.extra_inputs = list(recurrent.inputs) if recurrent else []
        self.outputs = [
            *action_output_specs(action_space),
            *distribution_output_specs(action_space, num_inputs),
            TensorSpec("value", "float32", (None,), "the value function's estimate"),
            TensorSpec("action_logp", "float32", (None,), "log-probability of the action (before clipping)"),
            *(recurrent.outputs if recurrent else []),
        ]

    def __call__(self, flat: tf.Tensor, mask: tf.Tensor | None, extras: list[tf.Tensor]) -> list[tf.Tensor]:
        state_out: list[tf.Tensor] = []
        if self.recurrent is not None:
            if self.recurrent.kind == "attention":  # the memory and its mask; zeros are an empty memory
                dist_inputs, values, state_out = self.model(flat, list(extras), None, None, 1)
            else:
                h, c, prev_action, prev_reward = extras
                # seq_len 1 without resets: the model's step loop (the fused BlockLSTM is for sequences)
                dist_inputs, values, state_out = self.model(flat, [h, c], prev_action, prev_reward, 1)
        else:
            dist_inputs, values = self.model(flat)
        dist = self.dist_class(dist_inputs, mask)
        if self.explore:
            raw = dist.sample(sampling_noise(self.action_space, tf.shape(flat)[0]))
        else:
            raw = dist.deterministic_sample()
        outputs = self.actions(raw)
        space = self.action_space
        if isinstance(space, Discrete | MultiDiscrete):
            outputs.append(dist_inputs)
        elif isinstance(space, Box):
            if space.bounded:
                outputs.append(tf.reshape(raw, [tf.shape(raw)[0], *space.shape]))
            mean, log_std = tf.split(dist_inputs, 2, axis=-1)
            outputs += [mean, log_std]
        else:
            outputs += [raw, dist_inputs]
        outputs += [values, dist.logp(raw), *state_out]
        return outputs


class QValueHead(ExportHead):
    """Greedy acting on Q-values (DQN): the best allowed action, and the Q-values themselves.

    ``q_values`` maps the flat input to ``[B, actions]`` (C51: already each distribution's mean).
    """

    def __init__(self, q_values: Any, num_actions: int):
        super().__init__()
        self.q_values = q_values
        self.outputs = [
            TensorSpec("action", "int64", (None,), "the action with the highest Q-value among the allowed"),
            TensorSpec("q_values", "float32", (None, num_actions), "every action's Q-value (before masking)"),
        ]

    def __call__(self, flat: tf.Tensor, mask: tf.Tensor | None, extras: list[tf.Tensor]) -> list[tf.Tensor]:
        q = self.q_values(flat)
        chooser = q if mask is None else tf.where(mask, q, tf.constant(-np.inf, q.dtype))
        return [tf.argmax(chooser, axis=-1, output_type=tf.int64), q]


class SquashedActorHead(ExportHead):
    """A tanh-squashed actor (SAC, TD3, DDPG): ``low + (tanh(u) + 1) (high - low) / 2``, with ``u`` the
    mean (greedy) or, for a Gaussian actor with ``explore``, a sample with log std clipped to
    ``[log_std_min, log_std_max]`` (what :class:`rlgear.blocks.squashed_inference.NumpyTanhActor` does)."""

    def __init__(
        self, actor: Any, action_space: Box, gaussian: bool, explore: bool,
        log_std_min: float, log_std_max: float,
    ):  # fmt: skip
        super().__init__()
        self.actor = actor
        self.num_actions = action_space.size
        self.gaussian, self.explore = gaussian, explore
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        low = np.asarray(action_space.low, np.float32).reshape(-1)
        high = np.asarray(action_space.high, np.float32).reshape(-1)
        self.low = tf.constant(low)
        self.half_range = tf.constant((high - low) / 2)
        self.shape = tuple(action_space.shape)
        self.outputs = [
            TensorSpec("action", "float32", (None, *action_space.shape), "within the Box bounds"),
            TensorSpec("mean", "float32", (None, self.num_actions), "the actor's output before tanh"),
        ]

    def __call__(self, flat: tf.Tensor, mask: tf.Tensor | None, extras: list[tf.Tensor]) -> list[tf.Tensor]:
        out = self.actor(flat)
        mean = out[:, : self.num_actions]
        u = mean
        if self.explore and self.gaussian:
            log_std = tf.clip_by_value(out[:, self.num_actions :], self.log_std_min, self.log_std_max)
            u = mean + tf.exp(log_std) * tf.random.normal(tf.shape(mean), dtype=mean.dtype)
        action = self.low + (tf.tanh(u) + 1.0) * self.half_range
        return [tf.reshape(action, [tf.shape(flat)[0], *self.shape]), mean]


class LayerStackHead(ExportHead):
    """A framework-free MLP policy (:class:`rlgear.numpy_policy.NumpyMLPPolicy`: ES, ARS) rebuilt from its
    ``policy/hidden_<i>`` and ``policy/output`` weights: the argmax of its logits (Discrete) or its
    output as the action (Box, clipped to the bounds as the collector does). The torch head's twin."""

    def __init__(self, weights: dict[str, Any], activation: str, action_space: Space):
        super().__init__()
        from rlgear.plugins.backends.tf.models import ACTIVATIONS

        names = [k.removesuffix("/kernel") for k in weights if k.endswith("/kernel") and "hidden_" in k]
        names = [*sorted(names, key=lambda n: int(n.rsplit("_", 1)[1])), "policy/output"]
        # Variables built from copies of the weights: the SavedModel holds them, the policy is untouched.
        self.kernels = [
            tf.Variable(np.asarray(weights[f"{n}/kernel"], np.float32), name="kernel") for n in names
        ]
        self.biases = [tf.Variable(np.asarray(weights[f"{n}/bias"], np.float32), name="bias") for n in names]
        self.activation = ACTIVATIONS[activation]
        self.discrete = isinstance(action_space, Discrete)
        self.actions = ActionOutputs(action_space)
        width = int(np.shape(weights["policy/output/kernel"])[1])
        self.outputs = [
            *action_output_specs(action_space),
            TensorSpec(
                "logits" if self.discrete else "output", "float32", (None, width), "the network's output"
            ),
        ]

    def __call__(self, flat: tf.Tensor, mask: tf.Tensor | None, extras: list[tf.Tensor]) -> list[tf.Tensor]:
        out = flat
        last = len(self.kernels) - 1
        for i, (kernel, bias) in enumerate(zip(self.kernels, self.biases, strict=True)):
            out = tf.matmul(out, kernel) + bias
            if i < last:
                out = self.activation(out)
        actions = tf.argmax(out, axis=-1, output_type=tf.int64) if self.discrete else out
        return [*self.actions(actions), out]
