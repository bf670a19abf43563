"""MADDPG and MATD3 on the torch backend: the shared decentralised actor, the centralised critic, the losses.

Weights as DDPG's (``policy/hidden_<i>/...``, ``policy/output/...``, ``q/...`` stacked ``[K, in, out]``),
with the actor's input an agent's observation and one-hot index and the critics' input the state
then the joint action ``[a_1, ..., a_n]`` (each in ``[-1, 1]``, absent agents' zeroed, and an
agent's padding columns zeroed where agents act in Boxes of different widths).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.ddpg.maddpg.team import TeamActing, actor_input_dim, team_spaces
from rlgear.plugins.algorithms.ddpg.torch_policy import DDPGTorchPolicy
from rlgear.plugins.backends.torch.offpolicy import ActorCritics, StackedMLP, actor_mlp
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class MADDPGTorchPolicy(TeamActing, DDPGTorchPolicy):
    """DDPG's policy on a grouped Box team (see the package docstring); acting in numpy (``team``)."""

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.agent_actions = team_spaces(observation_space, action_space)
        super().__init__(observation_space, action_space, config)
        # acting works on the flat joint action [B, n x A]; the losses on [B, n, A] (self._low_t)
        self.action_low = self.action_low.reshape(-1)
        self.action_half_range = self.action_half_range.reshape(-1)
        self._obs_columns = torch.as_tensor(self.layout.obs_columns)
        self._state_columns = torch.as_tensor(self.layout.state_columns)
        # [n, A]: 1 on each agent's own action columns, 0 on the padding of a narrower agent
        own = self._half_range_t > 0
        self._own_columns_t = own.to(torch.float32)
        self._scale_t = torch.where(own, self._half_range_t, torch.ones_like(self._half_range_t))

    def on_device(self, device: torch.device) -> None:
        super().on_device(device)
        self._own_columns_t = self._own_columns_t.to(device)
        self._scale_t = self._scale_t.to(device)

    def scaled_actions(self, env_actions: torch.Tensor) -> torch.Tensor:
        """Replayed team actions ``[B, n, A]`` in ``[-1, 1]``, padding columns zero (not 0 / 0)."""
        scaled = (env_actions.to(torch.float32) - self._low_t) / self._scale_t - 1.0
        return scaled * self._own_columns_t

    def team_actor(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """``tanh(mu(o_a))`` of actor inputs ``[B, n, in]``, each agent's padding columns zero."""
        return torch.tanh(model.actor(inputs)) * self._own_columns_t

    def action_count(self, action_space: Space) -> int:
        """The joint action's width ``n x A`` (the critics' action input and the exploration noise's)."""
        return self.layout.n_agents * self.agent_actions

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        sizes, activation = list(model_config.hidden_sizes), model_config.activation
        layout = self.layout
        actor = actor_mlp(
            actor_input_dim(layout, self.config.training), sizes, self.agent_actions, activation
        )
        critic = StackedMLP(self.num_critics, layout.state_dim + self.num_actions, sizes, 1, activation)
        return ActorCritics(actor, critic, None)

    def export_head(self, explore: bool) -> Any:
        raise UnsupportedError(
            "rlgear export: maddpg acts for a team, one actor call per agent row, which the exported "
            "graphs do not carry; use rlgear.load on the checkpoint"
        )

    def greedy_actions(self, observations: Any) -> Any:
        """``[B, n, A]`` greedy team actions through torch (for tests against the numpy twin)."""
        inputs = self.to_device_tensor(torch.from_numpy(self.agent_actor_inputs(observations)), pin=False)
        with torch.no_grad():
            squashed = torch.tanh(self.model.actor(inputs))
            return (self._low_t + (squashed + 1.0) * self._half_range_t).cpu().numpy()

    # --- learning -----------------------------------------------------------------------------
    def split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actor inputs [B, n, in], state [B, s], presence [B, n])`` of team observations (flat or not)."""
        n = self.layout.n_agents
        team = obs.reshape(obs.shape[0], n + 1, -1)
        agents = team[:, :n, 1:].index_select(-1, self._obs_columns.to(obs.device))
        if self.config.training.agent_id:
            agents = torch.cat([agents, torch.eye(n, device=obs.device).expand(obs.shape[0], n, n)], dim=-1)
        state = team[:, n, 1:].index_select(-1, self._state_columns.to(obs.device))
        return agents, state, team[:, :n, 0]

    def team_q_values(self, state: torch.Tensor, joint: torch.Tensor, which: str = "online") -> torch.Tensor:
        """``[K, B]``: the centralised critics on the state and the joint action ``[B, n, A]``."""
        return self.q_values(state, joint.flatten(1), which)

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """The critic's TD loss on the joint action (DDPG's, absent agents' actions zeroed), plus the
        actor's: ``-mean over rows and present agents a of Q_1(s, a_1..mu(o_a)..a_n)``, the other
        agents' actions as replayed (Lowe et al. 2017, eq. 5 with a shared reward)."""
        inputs, state, present = self.split(batch[SB.OBS])
        next_inputs, next_state, next_present = self.split(batch[NEXT_OBS])
        rows, n = present.shape
        with torch.no_grad():
            next_actions = self.target_actions(next_inputs) * self._own_columns_t * next_present.unsqueeze(-1)
            next_q = self.team_q_values(next_state, next_actions, "target").min(dim=0).values
            # rewards: the team's n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(next_q.dtype) + batch[SB.DISCOUNTS].to(next_q.dtype) * next_q
        replayed = self.scaled_actions(batch[SB.ACTIONS].reshape(rows, n, -1)) * present.unsqueeze(-1)
        q_taken = self.team_q_values(state, replayed)
        loss, td_errors = self.critic_loss(q_taken, targets, batch)
        stats = {
            "critic_loss": loss.detach(),
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.mean(),
        }
        if update_actor:
            mu = self.team_actor(self.model, inputs)  # [B, n, A]
            # variant a of each row: agent a's action is mu(o_a), every other agent's the replayed one;
            # all n variants as one critic call on [B * n] rows
            own = torch.eye(n, device=mu.device).view(1, n, n, 1)
            joint = own * mu.unsqueeze(1) + (1.0 - own) * replayed.unsqueeze(1)  # [B, a, j, A]
            variant_state = state.unsqueeze(1).expand(rows, n, state.shape[-1]).reshape(rows * n, -1)
            q = self.team_q_values(variant_state, joint.reshape(rows * n, n, -1), "frozen")[0].view(rows, n)
            actor_loss = -(q * present).sum() / present.sum().clamp(min=1.0)
            loss = loss + actor_loss
            stats["actor_loss"] = actor_loss.detach()
        return loss, stats, td_errors
