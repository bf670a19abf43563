"""How a TF policy acts: feed-forward and recurrent, through the numpy twin or a compiled graph.

:class:`TFActing` is one part of :class:`~rlgear.plugins.backends.tf.policy.TFPolicy`. By
default (``model.numpy_inference: true``) actions come from a numpy copy of the catalog model,
refreshed when ``weights_version`` moves. Otherwise one XLA-compiled function per acting path
takes one packed tensor in and gives one out (observations, sampling noise from the policy's
``acting_rng``, the action mask or the recurrent state side by side): for the small graphs RL acting
runs, each extra input or output tensor costs more than the arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks import attention_memory
from rlgear.blocks.attention_inference import NumpyAttentionActorCritic
from rlgear.blocks.inference import POLICY_HEAD, NumpyActorCritic, fill_action_logp
from rlgear.blocks.lstm_inference import NumpyLSTMActorCritic
from rlgear.config.conv import conv_layers
from rlgear.export.signature import recurrent_signature
from rlgear.plugins.backends.tf.distributions import action_noise_width
from rlgear.plugins.backends.tf.export_heads import ActorCriticHead, ExportHead
from rlgear.plugins.backends.tf.models import ActorCriticMLP
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.policy import action_dim, flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete, MultiDiscrete, Space, flat_action_dim, flat_dim
from rlgear.timestep import TimeStep


def _mask_width(space: Space) -> int:
    """Width of an action mask for ``space`` (0: masks are not supported)."""
    if isinstance(space, Discrete):
        return space.n
    if isinstance(space, MultiDiscrete):
        return sum(space.nvec)
    return 0


class TFActing:
    """``compute_actions`` and what it needs; mixed into ``TFPolicy``, which sets the attributes and
    compiles :meth:`_act_packed` and :meth:`_recurrent_act_packed` (``_compile``)."""

    observation_space: Space
    action_space: Space
    config: Any
    model: Any
    dist_class: Any
    recurrent: bool
    acting_rng: np.random.Generator
    fast_actor: NumpyActorCritic | NumpyLSTMActorCritic | None
    weights_version: int
    defer_extras: bool
    _act: Any
    _act_masked: Any
    _recurrent_act: Any
    _forward: Any

    def _make_fast_actor(self) -> NumpyActorCritic | None:
        model_config = self.config.model
        seed = None if self.config.seed is None else self.config.seed + 1
        spec = conv_layers(self.observation_space, model_config)
        # composite actions act in the framework, and so do Atari-sized images (ConvSpec.twin_acts)
        twin_acts = isinstance(self.action_space, Discrete | Box) and (spec is None or spec.twin_acts)
        if self.recurrent:
            if not (model_config.numpy_inference and twin_acts):
                return None
            twin = NumpyAttentionActorCritic if model_config.attention else NumpyLSTMActorCritic
            return twin(
                self.action_space, model_config, seed, conv_layers(self.observation_space, model_config)
            )
        if model_config.relational:  # no numpy twin of the relational encoder: it acts in the framework
            return None
        if not (model_config.numpy_inference and isinstance(self.model, ActorCriticMLP) and twin_acts):
            return None
        conv = None if self.model.encoder is None else conv_layers(self.observation_space, model_config)
        return NumpyActorCritic(
            self.action_space, len(model_config.hidden_sizes), model_config.activation,
            bool(model_config.vf_share_layers), seed, conv,
        )  # fmt: skip

    def preprocess(self, observations: np.ndarray) -> np.ndarray:
        """Flat float32 ``[B, F]`` observations (one-hot for Discrete), as the model takes them."""
        return flatten_observations(self.observation_space, observations)

    def _act_impl(
        self, obs: tf.Tensor, noise: tf.Tensor, mask: tf.Tensor | None = None
    ) -> dict[str, tf.Tensor]:
        """Actions sampled with ``noise`` (among those ``mask`` allows), their log-probabilities and values."""
        dist_inputs, values = self.model(obs)
        dist = self.dist_class(dist_inputs, mask)
        actions = dist.sample(noise)
        out = {"actions": actions, SampleBatch.ACTION_LOGP: dist.logp(actions)}
        if values is not None:
            out[SampleBatch.VF_PREDS] = values
        return out

    def _act_packed(self, obs_and_noise: tf.Tensor) -> tf.Tensor:
        """:meth:`_act_impl` with one input and one output, the cheapest shape of a TF call.

        In: observations then noise, ``[B, F + noise width]`` (then the action mask as 0/1
        columns, for envs with masks). Out: the action
        columns (one for Discrete, exact as float32 below 2**24 actions), the
        log-probability, then the value if the model has one. Each extra
        input or output tensor costs a conversion and a binding: for 8
        observations, packing took 18% off a call (TF 2.21, CPU).
        """
        features = flat_dim(self.observation_space)
        noise_end = features + action_noise_width(self.action_space)
        mask = obs_and_noise[:, noise_end:] > 0.5 if obs_and_noise.shape[1] > noise_end else None
        out = self._act_impl(obs_and_noise[:, :features], obs_and_noise[:, features:noise_end], mask)
        batch = tf.shape(obs_and_noise)[0]
        columns = [
            tf.reshape(tf.cast(out["actions"], tf.float32), [batch, -1]),
            out[SampleBatch.ACTION_LOGP][:, None],
        ]
        if SampleBatch.VF_PREDS in out:
            columns.append(out[SampleBatch.VF_PREDS][:, None])
        return tf.concat(columns, axis=1)

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        if not self.recurrent:
            return []
        return [np.zeros((batch_size, width), np.float32) for width in self.state_widths()]

    def state_widths(self) -> list[int]:
        """Widths of the recurrent state arrays: the LSTM's ``h`` and ``c``, or the attention memory
        and its mask (:mod:`rlgear.blocks.attention_memory`)."""
        if self.config.model.attention:
            return list(attention_memory.state_sizes(self.config.model))
        cell = int(self.config.model.lstm_cell_size)
        return [cell, cell]

    def _recurrent_act_packed(self, packed: tf.Tensor) -> tf.Tensor:
        """One recurrent step and a sample, one tensor in and out (as :meth:`_act_packed`).

        In: observations, noise, previous reward, the state arrays (h, c; or memory, mask), previous
        action (``[B, ...]`` columns, in that order). Out: action columns, log-probability, value, the
        state arrays after the step.
        """
        features = flat_dim(self.observation_space)
        noise_width = action_dim(self.action_space)
        obs, rest = packed[:, :features], packed[:, features:]
        noise, reward = rest[:, :noise_width], rest[:, noise_width]
        start, state = noise_width + 1, []
        for width in self.state_widths():
            state.append(rest[:, start : start + width])
            start += width
        prev_action = rest[:, start:]
        if isinstance(self.action_space, Discrete):
            prev_action = prev_action[:, 0]
        dist_inputs, values, state = self.model(obs, state, prev_action, reward, 1)
        dist = self.dist_class(dist_inputs)
        actions = dist.sample(noise)
        batch = tf.shape(packed)[0]
        columns = [tf.reshape(tf.cast(actions, tf.float32), [batch, -1]), dist.logp(actions)[:, None]]
        return tf.concat([*columns, values[:, None], *state], axis=1)

    def _compute_recurrent_actions(
        self, timestep: TimeStep, state: list[np.ndarray] | None, explore: bool
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        obs = self.preprocess(timestep.observation)
        n = obs.shape[0]
        if state is None:
            state = self.get_initial_state(n)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            actions, logp, values, new_state = fast.act(
                obs, state, explore, timestep.prev_action, timestep.reward, timestep.action_mask
            )
            return actions, new_state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        if timestep.action_mask is not None:
            raise ValueError(
                "a recurrent policy on the tf backend acts on masked actions with its numpy twin only: "
                "set model.numpy_inference: true (the default), or use the torch backend"
            )
        if explore:
            noise = self.dist_class.draw_noise(self.acting_rng, n, self.action_space)
        else:
            noise = self.dist_class.greedy_noise(n, self.action_space)
        inputs = [
            obs, noise, np.asarray(timestep.reward, np.float32).reshape(n, 1), *state,
            np.asarray(timestep.prev_action, np.float32).reshape(n, -1),
        ]  # fmt: skip
        packed = self._recurrent_act(tf.constant(np.concatenate(inputs, axis=1).astype(np.float32))).numpy()
        k = 1 if isinstance(self.action_space, Discrete) else self.action_space.size
        actions = (
            packed[:, 0].astype(np.int64)
            if k == 1 and isinstance(self.action_space, Discrete)
            else packed[:, :k]
        )
        new_state, start = [], k + 2
        for width in self.state_widths():
            new_state.append(packed[:, start : start + width].copy())
            start += width
        return (
            actions,
            new_state,
            {SampleBatch.ACTION_LOGP: packed[:, k], SampleBatch.VF_PREDS: packed[:, k + 1]},
        )

    def recurrent_step(
        self, timestep: TimeStep, state: list[np.ndarray]
    ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """One step of the framework's LSTM model: ``(dist_inputs, values, new_state)`` (for tests)."""
        return self.model(
            tf.constant(self.preprocess(timestep.observation)),
            [tf.constant(np.asarray(s, np.float32)) for s in state],
            tf.constant(np.asarray(timestep.prev_action)),
            tf.constant(np.asarray(timestep.reward, np.float32)),
            1,
        )

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        """``action_logp`` of the rows the numpy twin acted on (it records the policy head instead)."""
        fill_action_logp(self.fast_actor, columns)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        if self.recurrent:
            return self._compute_recurrent_actions(timestep, state, explore)
        obs = self.preprocess(timestep.observation)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            actions, head, values = fast.act_deferred(obs, explore, timestep.action_mask)
            if self.defer_extras:  # the sampler: log-probabilities per fragment (finish_fragment)
                return actions, state, {POLICY_HEAD: head, SampleBatch.VF_PREDS: values}
            logp = fast.logp(head, actions, timestep.action_mask)
            return actions, state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        if explore:
            noise = self.dist_class.draw_noise(self.acting_rng, obs.shape[0], self.action_space)
        else:
            noise = self.dist_class.greedy_noise(obs.shape[0], self.action_space)
        mask = timestep.action_mask
        # tf.constant: cheaper than tf.convert_to_tensor for a numpy array
        if mask is None:
            packed = self._act(tf.constant(np.concatenate([obs, noise], axis=1))).numpy()
        else:
            if self._act_masked is None:
                raise ValueError(
                    f"an action mask needs Discrete or MultiDiscrete actions, not {self.action_space!r}"
                )
            columns = [obs, noise, mask.astype(np.float32)]
            packed = self._act_masked(tf.constant(np.concatenate(columns, axis=1))).numpy()
        space = self.action_space
        if isinstance(space, Discrete):
            k, actions = 1, packed[:, 0].astype(np.int64)
        elif isinstance(space, MultiDiscrete):
            k = len(space.nvec)
            actions = np.rint(packed[:, :k]).astype(np.int64)
        else:
            k = space.size if isinstance(space, Box) else flat_action_dim(space)
            actions = packed[:, :k]
        extras = {SampleBatch.ACTION_LOGP: packed[:, k]}
        if packed.shape[1] > k + 1:
            extras[SampleBatch.VF_PREDS] = packed[:, k + 1]
        return actions, state, extras

    def export_head(self, explore: bool) -> ExportHead:
        """The acting part of an exported graph (``rlgear export``): the model and its distribution
        (the export copies it, so the live model is untouched)."""
        recurrent = recurrent_signature(self.config.model, self.action_space) if self.recurrent else None
        return ActorCriticHead(
            self.model, self.dist_class, self.action_space, self.num_outputs, explore, recurrent
        )

    def action_distribution_inputs(self, observations: np.ndarray) -> np.ndarray:
        """Logits (Discrete) or means and log stds (Box): for tests and cross-backend parity."""
        if self.recurrent:
            raise TypeError(
                "a recurrent policy's outputs depend on its state: use recurrent_step(timestep, state)"
            )
        dist_inputs, _ = self._forward(tf.convert_to_tensor(self.preprocess(observations)))
        return dist_inputs.numpy()
