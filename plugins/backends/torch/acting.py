"""How a torch policy acts: feed-forward and recurrent, through the numpy twin or the model.

:class:`TorchActing` is one part of :class:`~rlgear.plugins.backends.torch.policy.TorchPolicy`.
By default (``model.numpy_inference: true``) actions come from a numpy copy of the catalog
model (:mod:`rlgear.blocks.inference`, :mod:`rlgear.blocks.lstm_inference`), refreshed when
``weights_version`` moves; otherwise the torch model runs under ``inference_mode``. A
recurrent policy carries its state between calls (the LSTM's ``[h, c]``, each
``[B, lstm_cell_size]``; the attention memory's ``[memory, mask]``,
:mod:`rlgear.blocks.attention_memory`, whose twin is :mod:`rlgear.blocks.attention_inference`); the
rollout worker resets it at FIRST steps.

The twin acts on the CPU wherever the policy learns (``learners.device``): it reads the weights as
numpy. Without a twin the model acts on its device: observations (and mask, state) go there and
the outputs come back as numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.blocks import attention_memory
from rlgear.blocks.attention_inference import NumpyAttentionActorCritic
from rlgear.blocks.inference import POLICY_HEAD, NumpyActorCritic, fill_action_logp
from rlgear.blocks.lstm_inference import NumpyLSTMActorCritic
from rlgear.config.conv import conv_layers
from rlgear.export.signature import recurrent_signature
from rlgear.plugins.backends.torch.export_heads import ActorCriticHead, ExportHead
from rlgear.plugins.backends.torch.models import ActorCriticMLP
from rlgear.policy import flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete, Space
from rlgear.timestep import TimeStep


class TorchActing:
    """``compute_actions`` and what it needs; mixed into ``TorchPolicy`` (which sets the attributes)."""

    observation_space: Space
    action_space: Space
    config: Any
    model: torch.nn.Module
    dist_class: Any
    recurrent: bool
    fast_actor: NumpyActorCritic | NumpyLSTMActorCritic | None
    weights_version: int
    defer_extras: bool
    device: torch.device
    _action_dtype: type

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

    def preprocess(self, observations: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(flatten_observations(self.observation_space, observations))

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        if not self.recurrent:
            return []
        if self.config.model.attention:
            return attention_memory.initial_state(batch_size, self.config.model)
        cell = int(self.config.model.lstm_cell_size)
        return [np.zeros((batch_size, cell), np.float32), np.zeros((batch_size, cell), np.float32)]

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        """``action_logp`` of the rows the numpy twin acted on (it records the policy head instead)."""
        fill_action_logp(self.fast_actor, columns)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        if self.recurrent:
            return self._compute_recurrent_actions(timestep, state, explore)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            obs = flatten_observations(self.observation_space, timestep.observation)
            actions, head, values = fast.act_deferred(obs, explore, timestep.action_mask)
            if self.defer_extras:  # the sampler: log-probabilities per fragment (finish_fragment)
                return actions, state, {POLICY_HEAD: head, SampleBatch.VF_PREDS: values}
            logp = fast.logp(head, actions, timestep.action_mask)
            return actions, state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        mask = None if timestep.action_mask is None else self._acting_tensor(timestep.action_mask)
        with torch.inference_mode():
            dist_inputs, values = self.model(self._acting_tensor(self.preprocess(timestep.observation)))
            dist = self.dist_class(dist_inputs, mask)
            actions = dist.sample() if explore else dist.deterministic_sample()
            extras = {SampleBatch.ACTION_LOGP: dist.logp(actions).cpu().numpy()}
            if values is not None:
                extras[SampleBatch.VF_PREDS] = values.cpu().numpy()
        return actions.cpu().numpy().astype(self._action_dtype, copy=False), state, extras

    def _acting_tensor(self, value: np.ndarray | torch.Tensor) -> torch.Tensor:
        """An acting input on the model's device (no pinning: a few rows per call)."""
        tensor = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _compute_recurrent_actions(
        self, timestep: TimeStep, state: list[np.ndarray] | None, explore: bool
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        n = np.shape(timestep.step_type)[0]
        if state is None:
            state = self.get_initial_state(n)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            obs = flatten_observations(self.observation_space, timestep.observation)
            actions, logp, values, new_state = fast.act(
                obs, state, explore, timestep.prev_action, timestep.reward, timestep.action_mask
            )
            return actions, new_state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        with torch.inference_mode():
            dist_inputs, values, new_state = self.recurrent_step(timestep, state)
            mask = timestep.action_mask
            dist = self.dist_class(dist_inputs, None if mask is None else self._acting_tensor(mask))
            actions = dist.sample() if explore else dist.deterministic_sample()
            extras = {
                SampleBatch.ACTION_LOGP: dist.logp(actions).cpu().numpy(),
                SampleBatch.VF_PREDS: values.cpu().numpy(),
            }
        new_state = [s.cpu().numpy() for s in new_state]
        return actions.cpu().numpy().astype(self._action_dtype, copy=False), new_state, extras

    def recurrent_step(
        self, timestep: TimeStep, state: list[np.ndarray]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """One step of the framework's LSTM model: ``(dist_inputs, values, new_state)`` (for acting and
        for tests comparing backends and the numpy twin); no gradient is recorded."""
        with torch.no_grad():
            return self.model(
                self._acting_tensor(self.preprocess(timestep.observation)),
                [self._acting_tensor(np.asarray(s, np.float32)) for s in state],
                self._acting_tensor(np.asarray(timestep.prev_action)),
                self._acting_tensor(np.asarray(timestep.reward, np.float32)),
                1,
            )

    def export_head(self, explore: bool) -> ExportHead:
        """The acting part of an exported graph (``rlgear export``): the model and its distribution."""
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
        with torch.inference_mode():
            dist_inputs, _ = self.model(self._acting_tensor(self.preprocess(observations)))
        return dist_inputs.cpu().numpy()
