"""What MAPPO's torch and TF policies share (no framework here): the critic's input spec, the value
statistics, learning on normalized targets, and the weights that carry the statistics.

The actor is PPO's policy MLP on the agent's own observation and acts exactly as PPO's does (the
numpy twin, export, ``rlgear evaluate``); its value output is 0, since values come from the critic
in postprocessing. The critic is a separate MLP (``critic/hidden_<i>``, ``critic/output``) on the
critic input; with ``value_normalization`` its outputs are normalized values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.inference import NumpyActor
from rlgear.plugins.algorithms.ppo.mappo.critic_input import CRITIC_OBS, CriticSpec, critic_spec
from rlgear.plugins.algorithms.ppo.mappo.value_norm import PREFIX, ValueNorm
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete, Space


class CentralisedCritic:
    """Mixed in before PPO's policy of a backend; the backend module supplies ``critic_values``."""

    config: Any
    action_space: Space
    observation_space: Space
    loss_columns = (
        SampleBatch.OBS,
        SampleBatch.ACTIONS,
        SampleBatch.ACTION_LOGP,
        SampleBatch.ADVANTAGES,
        SampleBatch.VALUE_TARGETS,
        SampleBatch.VF_PREDS,
        CRITIC_OBS,
    )

    def critic_setup(self, observation_space: Space, config: Any) -> None:
        """Before the base class builds the model: the critic's input width, the value statistics."""
        if getattr(config.model, "lstm", False):
            raise TypeError(
                "model.lstm: mappo's actor and critic are feed-forward MLPs (set model.lstm: false)"
            )
        if getattr(config.model, "attention", False):
            raise TypeError(
                "model.attention: mappo's actor and critic are feed-forward MLPs (set model.attention: false)"
            )
        if config.model.vf_share_layers:
            raise TypeError("model.vf_share_layers: mappo's critic is a separate network (set it false)")
        #: The resolved critic input (training.critic_input against the env).
        self.critic_spec: CriticSpec = critic_spec(config, observation_space)
        #: The value statistics (None with value_normalization: false).
        self.value_norm: ValueNorm | None = ValueNorm() if config.training.value_normalization else None

    def critic_hidden_sizes(self) -> list[int]:
        model = self.config.model
        return list(model.critic_hidden_sizes or model.hidden_sizes)

    def critic_values(self, critic_obs: np.ndarray) -> np.ndarray:
        """The critic's outputs ``[N]`` (normalized values with value_normalization) for ``[N, dim]``."""
        raise NotImplementedError

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """Update the value statistics with the batch's targets (once), then PPO's epochs on targets
        normalized with them (the critic learns to predict normalized values)."""
        norm = self.value_norm
        if norm is None:
            return super().learn_on_batch(batch)  # type: ignore[misc]
        norm.update(batch[SampleBatch.VALUE_TARGETS])
        normalized = SampleBatch(batch)
        normalized[SampleBatch.VALUE_TARGETS] = norm.normalize(batch[SampleBatch.VALUE_TARGETS])
        stats = super().learn_on_batch(normalized)  # type: ignore[misc]
        mean, var = norm.mean_var()
        return {**stats, "value_norm_mean": mean, "value_norm_std": float(np.sqrt(var))}

    # --- the statistics travel with the weights (sync to workers, checkpoints) -----------------
    def get_weights(self) -> dict[str, np.ndarray]:
        weights = super().get_weights()  # type: ignore[misc]
        if self.value_norm is not None:
            weights.update(self.value_norm.arrays())
        return weights

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        if self.value_norm is not None:
            self.value_norm.load(weights)
        super().set_weights({k: v for k, v in weights.items() if not k.startswith(PREFIX)})  # type: ignore[misc]

    def _make_fast_actor(self) -> NumpyActor | None:
        """The numpy twin of the actor alone (PPO's acting without a value head)."""
        model = self.config.model
        if not (model.numpy_inference and isinstance(self.action_space, Discrete | Box)):
            return None
        seed = None if self.config.seed is None else self.config.seed + 1
        return NumpyActor(self.action_space, len(model.hidden_sizes), model.activation, seed)
