"""What the torch policies of the centralised-critic team learners (``maddpg``, ``matd3``, ``masac``)
share: reading a grouped team observation, the joint action's scaling and the centralised critics.

A grouped team (:mod:`rlgear.sampling.agent_groups`) observes ``[n + 1, W]`` (each agent's row, its
presence flag first, then the state row) and acts in a Box ``[n, A]``, narrower agents' padding
columns pinned to ``[0, 0]``. The critics read the state row and the joint action flattened to
``n x A`` columns in ``[-1, 1]``, absent agents' actions and padding columns zeroed.
"""

from __future__ import annotations

from typing import Any

import torch

from rlgear.sampling.agent_groups import TeamLayout
from rlgear.spaces import Space


class TeamCriticTorch:
    """Mixed in before an off-policy torch policy (DDPG's, SAC's) whose ``__init__`` set ``layout``
    and ``agent_actions`` before calling it; :meth:`team_columns` finishes the set-up afterwards."""

    layout: TeamLayout
    agent_actions: int
    config: Any
    action_low: Any
    action_half_range: Any
    _low_t: torch.Tensor
    _half_range_t: torch.Tensor
    q_values: Any

    def team_columns(self) -> None:
        """After the base ``__init__``: acting works on the flat joint action ``[B, n x A]``; the
        losses on ``[B, n, A]`` (``_low_t``, ``_half_range_t``), with each agent's own columns marked."""
        self.action_low = self.action_low.reshape(-1)
        self.action_half_range = self.action_half_range.reshape(-1)
        self._obs_columns = torch.as_tensor(self.layout.obs_columns)
        self._state_columns = torch.as_tensor(self.layout.state_columns)
        # [n, A]: 1 on each agent's own action columns, 0 on the padding of a narrower agent
        own = self._half_range_t > 0
        self._own_columns_t = own.to(torch.float32)
        self._scale_t = torch.where(own, self._half_range_t, torch.ones_like(self._half_range_t))

    def on_device(self, device: torch.device) -> None:
        super().on_device(device)  # type: ignore[misc]
        self._own_columns_t = self._own_columns_t.to(device)
        self._scale_t = self._scale_t.to(device)

    def action_count(self, action_space: Space) -> int:
        """The joint action's width ``n x A`` (the critics' action input)."""
        return self.layout.n_agents * self.agent_actions

    def scaled_actions(self, env_actions: torch.Tensor) -> torch.Tensor:
        """Replayed team actions ``[B, n, A]`` in ``[-1, 1]``, padding columns zero (not 0 / 0)."""
        scaled = (env_actions.to(torch.float32) - self._low_t) / self._scale_t - 1.0
        return scaled * self._own_columns_t

    def split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actor inputs [B, n, in], state [B, s], presence [B, n])`` of team observations (flat or not);
        the actor's input is an agent's observation, then (``agent_id``) its one-hot index."""
        n = self.layout.n_agents
        team = obs.reshape(obs.shape[0], n + 1, -1)
        agents = team[:, :n, 1:].index_select(-1, self._obs_columns.to(obs.device))
        if self.config.training.agent_id:
            agents = torch.cat([agents, torch.eye(n, device=obs.device).expand(obs.shape[0], n, n)], dim=-1)
        state = team[:, n, 1:].index_select(-1, self._state_columns.to(obs.device))
        return agents, state, team[:, :n, 0]

    def team_q_values(self, state: torch.Tensor, joint: torch.Tensor, which: str = "online") -> torch.Tensor:
        """``[K, B]`` (or ``[K, B, outputs]``): the centralised critics on the state and the joint action
        ``[B, n, A]``."""
        return self.q_values(state, joint.flatten(1), which)

    def own_agent_variants(
        self, state: torch.Tensor, own: torch.Tensor, replayed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(state, joint)`` as ``[B * n]`` rows: variant ``a`` of a row is its joint action with agent
        ``a``'s replaced by ``own[:, a]`` and every other agent's kept as replayed (MADDPG's actor
        gradient, Lowe et al. 2017, eq. 5), so all n variants take one critic call."""
        rows, n = replayed.shape[:2]
        mask = torch.eye(n, device=own.device).view(1, n, n, 1)
        joint = mask * own.unsqueeze(1) + (1.0 - mask) * replayed.unsqueeze(1)  # [B, a, j, A]
        variant_state = state.unsqueeze(1).expand(rows, n, state.shape[-1]).reshape(rows * n, -1)
        return variant_state, joint.reshape(rows * n, n, -1)
