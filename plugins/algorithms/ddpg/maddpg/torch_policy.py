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
from rlgear.plugins.algorithms.ddpg.torch_policy import DDPGTorchPolicy
from rlgear.plugins.backends.torch.offpolicy import ActorCritics, StackedMLP, actor_mlp
from rlgear.plugins.backends.torch.team import TeamCriticTorch
from rlgear.plugins.families.replay.team import TeamActing, actor_input_dim, team_spaces
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class MADDPGTorchPolicy(TeamActing, TeamCriticTorch, DDPGTorchPolicy):
    """DDPG's policy on a grouped Box team (see the package docstring); acting in numpy (``team``)."""

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.agent_actions = team_spaces(observation_space, action_space)
        super().__init__(observation_space, action_space, config)
        self.team_columns()

    def team_actor(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """``tanh(mu(o_a))`` of actor inputs ``[B, n, in]``, each agent's padding columns zero."""
        return torch.tanh(model.actor(inputs)) * self._own_columns_t

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
            variant_state, joint = self.own_agent_variants(state, mu, replayed)
            q = self.team_q_values(variant_state, joint, "frozen")[0].view(rows, n)
            actor_loss = -(q * present).sum() / present.sum().clamp(min=1.0)
            loss = loss + actor_loss
            stats["actor_loss"] = actor_loss.detach()
        return loss, stats, td_errors
