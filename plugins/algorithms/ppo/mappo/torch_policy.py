"""MAPPO on the torch backend: PPO's loss (unchanged) with values from a separate centralised critic."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.plugins.algorithms.ppo.mappo.common import CentralisedCritic
from rlgear.plugins.algorithms.ppo.mappo.critic_input import CRITIC_OBS
from rlgear.plugins.algorithms.ppo.torch_policy import PPOTorchPolicy
from rlgear.plugins.backends.torch.models import _dense_stack, _head, body_weight_names
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Space, flat_dim


class MAPPOActorCritic(nn.Module):
    """The actor (PPO's policy MLP on the agent's observation) and the critic (an MLP on the critic
    input). Neutral names: ``policy/hidden_<i>``, ``policy/output``, ``policy/log_std`` (Box),
    ``critic/hidden_<i>``, ``critic/output``; ``forward`` is the actor's, with values 0."""

    def __init__(self, obs_dim: int, num_outputs: int, continuous: bool, model_config: Any, critic_dim: int,
                 critic_sizes: list[int]):  # fmt: skip
        super().__init__()
        sizes, act = list(model_config.hidden_sizes), model_config.activation
        ortho = model_config.orthogonal_init
        gain = math.sqrt(2) if ortho else None
        self.continuous = continuous
        head_outputs = num_outputs // 2 if continuous else num_outputs
        self.policy_body = _dense_stack(obs_dim, sizes, act, gain)
        self.policy_output = _head(sizes[-1], head_outputs, 0.01 if ortho else None)
        if continuous:
            self.log_std = nn.Parameter(torch.full((head_outputs,), float(model_config.init_log_std)))
        self.critic_body = _dense_stack(critic_dim, critic_sizes, act, gain)
        self.critic_output = _head(critic_sizes[-1], 1, 1.0 if ortho else None)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.policy_output(self.policy_body(obs))
        if self.continuous:
            logits = torch.cat([logits, self.log_std.expand_as(logits)], dim=-1)
        return logits, torch.zeros(obs.shape[0], dtype=logits.dtype, device=logits.device)

    def critic(self, critic_obs: torch.Tensor) -> torch.Tensor:
        return self.critic_output(self.critic_body(critic_obs)).squeeze(-1)

    def weight_names(self) -> dict[str, str]:
        names = {}
        for body, prefix in (("policy_body", "policy"), ("critic_body", "critic")):
            names.update(body_weight_names(getattr(self, body), body, prefix))
            names[f"{prefix}_output.weight"] = f"{prefix}/output/kernel"
            names[f"{prefix}_output.bias"] = f"{prefix}/output/bias"
        if self.continuous:
            names["log_std"] = "policy/log_std"
        return names


class MAPPOTorchPolicy(CentralisedCritic, PPOTorchPolicy):
    """PPO's torch policy whose value predictions come from the centralised critic."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.critic_setup(observation_space, config)
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> nn.Module:
        return MAPPOActorCritic(
            flat_dim(self.observation_space), self.num_outputs, isinstance(self.action_space, Box),
            self.config.model, self.critic_spec.dim, self.critic_hidden_sizes(),
        )  # fmt: skip

    def model_outputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        dist_inputs, _ = self.model(batch[SampleBatch.OBS])
        return dist_inputs, self.model.critic(batch[CRITIC_OBS])

    def critic_values(self, critic_obs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(critic_obs, dtype=np.float32))
        with torch.inference_mode():
            return self.model.critic(x.to(self.device)).cpu().numpy()
