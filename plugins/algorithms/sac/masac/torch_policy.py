"""MASAC on the torch backend: the shared squashed-Gaussian actor, the centralised twin critics, the losses.

Weights as SAC's (``policy/hidden_<i>/...``, ``policy/output/...`` with an agent's means then log
stds, ``q/...`` stacked ``[2, in, out]``, ``log_alpha``), with the actor's input an agent's
observation and one-hot index and the critics' input the state then the joint action
``[a_1, ..., a_n]`` (each in ``[-1, 1]``, absent agents' zeroed, an agent's padding columns zeroed
where agents act in Boxes of different widths).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.blocks.squashed_inference import LOG_STD_MAX, LOG_STD_MIN
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.sac.torch_policy import SACTorchPolicy
from rlgear.plugins.backends.torch.offpolicy import ActorCritics, StackedMLP, actor_mlp
from rlgear.plugins.backends.torch.team import TeamCriticTorch
from rlgear.plugins.families.replay.team import TeamActing, actor_input_dim, team_spaces
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


class MASACTorchPolicy(TeamActing, TeamCriticTorch, SACTorchPolicy):
    """SAC's policy on a grouped Box team (see the package docstring); acting in numpy (``team``).

    ``last_noise``: the step's standard-normal draws ``(actor's at s, target's at s')``, each ``[B, n, A]``.
    """

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.agent_actions = team_spaces(observation_space, action_space, "masac")
        super().__init__(observation_space, action_space, config)
        self.team_columns()

    def actor_outputs(self) -> int:
        """An agent's means then log stds: ``2 x A`` (the actor runs once per agent row)."""
        return 2 * self.agent_actions

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        sizes, activation, layout = list(model_config.hidden_sizes), model_config.activation, self.layout
        actor = actor_mlp(
            actor_input_dim(layout, self.config.training), sizes, self.actor_outputs(), activation
        )
        critic = StackedMLP(self.num_critics, layout.state_dim + self.num_actions, sizes, 1, activation)
        model = ActorCritics(actor, critic, self.initial_log_alpha())
        model.log_alpha.requires_grad_(bool(self.config.training.tune_alpha))  # before the optimizer exists
        return model

    @property
    def agent_target_entropy(self) -> torch.Tensor:
        """``[n]``: the entropy each agent's policy is tuned towards: ``training.target_entropy``, or
        minus the agent's own action columns (SAC's ``-|A|`` per agent)."""
        target = self.config.training.target_entropy
        own = self._own_columns_t.sum(dim=-1)
        return -own if target is None else torch.full_like(own, float(target))

    def export_head(self, explore: bool) -> Any:
        raise UnsupportedError(
            "rlgear export: masac acts for a team, one actor call per agent row, which the exported "
            "graphs do not carry; use rlgear.load on the checkpoint"
        )

    def greedy_actions(self, observations: Any) -> Any:
        """``[B, n, A]`` greedy team actions ``tanh(mean)`` through torch (for tests against the numpy twin)."""
        inputs = self.to_device_tensor(torch.from_numpy(self.agent_actor_inputs(observations)), pin=False)
        with torch.no_grad():
            squashed = torch.tanh(self.model.actor(inputs)[..., : self.agent_actions])
            return (self._low_t + (squashed + 1.0) * self._half_range_t).cpu().numpy()

    # --- learning -----------------------------------------------------------------------------
    def agent_sample(self, inputs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a [B, n, A], log pi(a_i | o_i) [B, n])`` per agent with ``a = tanh(mean + std * noise)``,
        over the agent's own columns only (padding columns: action 0, no log-probability); the tanh
        correction as SAC's (``SACTorchPolicy.squashed_sample``)."""
        out = self.model.actor(inputs)
        mean, log_std = out[..., : self.agent_actions], out[..., self.agent_actions :]
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        pre_tanh = mean + log_std.exp() * noise
        gaussian_logp = -0.5 * noise.square() - log_std - _HALF_LOG_2PI
        log_det = 2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))
        own = self._own_columns_t
        return torch.tanh(pre_tanh) * own, ((gaussian_logp - log_det) * own).sum(dim=-1)

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """SAC's three losses on the team (see the package docstring):

        * critics: ``0.5 sum_k mean (Q_k(s, a) - y)^2`` with ``y = r + discount (min_k Q'_k(s', a') -
          alpha sum_j log pi(a'_j | o'_j))``, ``a'_j`` sampled for the agents present at ``s'``;
        * actor: ``mean over rows and present agents i of alpha log pi(a_i | o_i) - min_k Q_k(s, a_1..a_i..a_n)``,
          ``a_i`` sampled, the other agents' actions as replayed;
        * temperature: ``-mean over rows and present agents of log alpha (log pi(a_i | o_i) + H_i)``.
        """
        inputs, state, present = self.split(batch[SB.OBS])
        next_inputs, next_state, next_present = self.split(batch[NEXT_OBS])
        rows, n = present.shape
        log_alpha = self.model.log_alpha
        alpha = log_alpha.detach().exp()
        noise = self.sample_noise((rows, n, self.agent_actions))
        next_noise = self.sample_noise((rows, n, self.agent_actions))
        self.last_noise = (noise, next_noise)  # the draws this step used (the loss tests read them)
        with torch.no_grad():
            next_actions, next_logp = self.agent_sample(next_inputs, next_noise)
            next_actions = next_actions * next_present.unsqueeze(-1)
            next_q = self.team_q_values(next_state, next_actions, "target").min(dim=0).values
            team_logp = (next_logp * next_present).sum(dim=-1)
            # rewards: the team's n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(next_q.dtype) + batch[SB.DISCOUNTS].to(next_q.dtype) * (
                next_q - alpha * team_logp
            )
        replayed = self.scaled_actions(batch[SB.ACTIONS].reshape(rows, n, -1)) * present.unsqueeze(-1)
        q_taken = self.team_q_values(state, replayed)
        critic_loss, td_errors = self.critic_loss(q_taken, targets, batch)

        actions, logp = self.agent_sample(inputs, noise)
        variant_state, joint = self.own_agent_variants(state, actions, replayed)
        q = self.team_q_values(variant_state, joint, "frozen").min(dim=0).values.view(rows, n)
        agents = present.sum().clamp(min=1.0)
        actor_loss = ((alpha * logp - q) * present).sum() / agents
        alpha_loss = -(log_alpha * ((logp.detach() + self.agent_target_entropy) * present).sum()) / agents
        alpha_loss = alpha_loss.squeeze()
        loss = critic_loss + actor_loss + (alpha_loss if log_alpha.requires_grad else 0.0)
        stats = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha.squeeze(),
            "entropy": -(logp.detach() * present).sum() / agents,
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.mean(),
        }
        return loss, stats, td_errors
