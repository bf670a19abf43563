"""QMIX and VDN on the torch backend: the shared GRU agent network, the mixers and the TD loss.

Weight names (both backends): ``agent/fc``, ``agent/gru/{kernel,recurrent_kernel,bias,recurrent_bias}``
(gates r, z, n), ``agent/output``; QMIX's mixer ``mixer/hyper_w1/{hidden,output}``,
``mixer/hyper_b1``, ``mixer/hyper_w2/{hidden,output}``, ``mixer/value/{hidden,output}`` (with
``hypernet_layers: 1`` the hypernetworks have an ``output`` layer only); VDN has no mixer weights.
Kernels ``[in, out]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.blocks.target_network import TargetNetworkState
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.qmix import episodes
from rlgear.plugins.algorithms.qmix.acting import TeamActing, input_dim, team_spaces
from rlgear.plugins.algorithms.qmix.learning_batch import LearningBatch
from rlgear.plugins.backends.torch import TargetModel, TorchPolicy
from rlgear.spaces import Space


class AgentNetwork(nn.Module):
    """PyMARL's RNNAgent: ``fc -> ReLU -> GRUCell -> fc``, shared by every agent."""

    def __init__(self, in_dim: int, hidden: int, num_actions: int):
        super().__init__()
        self.fc = nn.Linear(in_dim, hidden)
        self.gru_input = nn.Linear(hidden, 3 * hidden)
        self.gru_hidden = nn.Linear(hidden, 3 * hidden)
        self.output = nn.Linear(hidden, num_actions)
        self.hidden_size = hidden

    def unroll(self, inputs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, L, n, actions]`` of inputs ``[B, L, n, in]``, the GRU from zeros at step 0.

        The GRU is torch's own (``torch.gru``, what ``nn.GRU`` runs) on the two ``Linear`` layers'
        weights: the same equations as a ``GRUCell`` stepped in Python (gates r, z, n;
        ``n = tanh(W_in x + b_in + r (W_hn h + b_hn))``), with the time loop in C++. On a CPU that
        halves the cost of the agent network's forward and backward pass over PyMARL's 25-step
        episodes, most of QMIX's learning time.
        """
        x = torch.relu(self.fc(inputs))
        batch, length, agents = x.shape[:3]
        steps = x.transpose(0, 1).reshape(length, batch * agents, self.hidden_size)  # [L, B n, hidden]
        weights = [self.gru_input.weight, self.gru_hidden.weight, self.gru_input.bias, self.gru_hidden.bias]
        initial = steps.new_zeros((1, batch * agents, self.hidden_size))
        hidden, _ = torch.gru(steps, initial, weights, True, 1, 0.0, self.training, False, False)
        return self.output(hidden.reshape(length, batch, agents, self.hidden_size).transpose(0, 1))


def _hypernet(state_dim: int, out_dim: int, layers: int, embed: int) -> nn.Sequential:
    if layers == 1:
        return nn.Sequential(nn.Linear(state_dim, out_dim))
    return nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, out_dim))


class QMixer(nn.Module):
    """Rashid et al. 2018: ``Q_tot = elu(q @ |W1(s)| + b1(s)) @ |W2(s)| + V(s)``, monotonic in each q."""

    def __init__(self, n_agents: int, state_dim: int, training: Any):
        super().__init__()
        self.n_agents, self.embed = n_agents, training.mixing_embed_dim
        layers, hyper = training.hypernet_layers, training.hypernet_embed
        self.hyper_w1 = _hypernet(state_dim, self.embed * n_agents, layers, hyper)
        self.hyper_b1 = nn.Linear(state_dim, self.embed)
        self.hyper_w2 = _hypernet(state_dim, self.embed, layers, hyper)
        self.value = nn.Sequential(nn.Linear(state_dim, self.embed), nn.ReLU(), nn.Linear(self.embed, 1))

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        w1 = torch.abs(self.hyper_w1(state)).unflatten(-1, (self.n_agents, self.embed))
        hidden = nn.functional.elu((q.unsqueeze(-2) @ w1).squeeze(-2) + self.hyper_b1(state))
        w2 = torch.abs(self.hyper_w2(state))
        return (hidden * w2).sum(-1) + self.value(state).squeeze(-1)


class TeamModel(nn.Module):
    """The agent network and the mixer (None for VDN's sum)."""

    def __init__(self, agent: AgentNetwork, mixer: QMixer | None):
        super().__init__()
        self.agent, self.mixer = agent, mixer

    def mix(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return q.sum(-1) if self.mixer is None else self.mixer(q, state)

    def weight_names(self) -> dict[str, str]:
        names = {}
        for module, scope in (("fc", "fc"), ("output", "output")):
            names[f"agent.{module}.weight"] = f"agent/{scope}/kernel"
            names[f"agent.{module}.bias"] = f"agent/{scope}/bias"
        names["agent.gru_input.weight"] = "agent/gru/kernel"
        names["agent.gru_input.bias"] = "agent/gru/bias"
        names["agent.gru_hidden.weight"] = "agent/gru/recurrent_kernel"
        names["agent.gru_hidden.bias"] = "agent/gru/recurrent_bias"
        if self.mixer is not None:
            names["mixer.hyper_b1.weight"] = "mixer/hyper_b1/kernel"
            names["mixer.hyper_b1.bias"] = "mixer/hyper_b1/bias"
            for part in ("hyper_w1", "hyper_w2", "value"):
                layers = [i for i, m in enumerate(getattr(self.mixer, part)) if isinstance(m, nn.Linear)]
                scopes = ["output"] if len(layers) == 1 else ["hidden", "output"]
                for index, scope in zip(layers, scopes, strict=True):
                    names[f"mixer.{part}.{index}.weight"] = f"mixer/{part}/{scope}/kernel"
                    names[f"mixer.{part}.{index}.bias"] = f"mixer/{part}/{scope}/bias"
        return names


def one_hot_last_actions(actions: torch.Tensor, num_actions: int) -> torch.Tensor:
    """``[B, L, n, actions]``: each agent's previous action one-hot, zeros at step 0."""
    one_hot = nn.functional.one_hot(actions, num_actions).to(torch.float32)
    return torch.cat([torch.zeros_like(one_hot[:, :1]), one_hot[:, :-1]], dim=1)


class QMixTorchPolicy(LearningBatch, TargetNetworkState, TeamActing, TargetModel, TorchPolicy):
    """Acting: the numpy agent network (:mod:`~rlgear.plugins.algorithms.qmix.acting`); learning: one
    gradient step per replayed minibatch of episodes on the mixed TD loss (see :meth:`loss`)."""

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True
    loss_columns = episodes.COLUMNS
    rows_are_sequences = True  # a row is a whole episode

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.num_actions = team_spaces(observation_space, action_space)
        super().__init__(observation_space, action_space, config)
        self.recurrent = True  # the sampler keeps each slot's GRU state, reset at FIRST
        self.acting_rng = np.random.default_rng(None if config.seed is None else config.seed + 1)
        self.make_target_model()
        self._obs_columns = torch.as_tensor(self.layout.obs_columns)
        self._state_columns = torch.as_tensor(self.layout.state_columns)

    def make_model(self) -> nn.Module:
        training = self.config.training
        agent = AgentNetwork(
            input_dim(self.layout, self.num_actions, training), training.rnn_hidden_dim, self.num_actions
        )
        mixer = (
            QMixer(self.layout.n_agents, self.layout.state_dim, training)
            if training.mixer == "qmix"
            else None
        )
        return TeamModel(agent, mixer)

    def learner_columns(self, loss_columns: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(loss_columns)

    def export_head(self, explore: bool) -> Any:
        raise UnsupportedError(
            "rlgear export: qmix/vdn act for a team with a recurrent agent network per agent, which the "
            "exported graphs do not carry; use rlgear.load on the checkpoint"
        )

    # --- learning -----------------------------------------------------------------
    def agent_q_values(self, model: TeamModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[B, L, n, actions]`` of every step of the minibatch's episodes."""
        training = self.config.training
        obs = batch[episodes.OBS]
        n = self.layout.n_agents
        parts = [obs[:, :, :n, 1:].index_select(-1, self._obs_columns.to(obs.device))]
        if training.obs_last_action:
            parts.append(one_hot_last_actions(batch[episodes.ACTIONS].long(), self.num_actions))
        if training.obs_agent_id:
            parts.append(torch.eye(n, device=obs.device).expand(*obs.shape[:2], n, n))
        return model.agent.unroll(torch.cat(parts, dim=-1))

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``masked mean over filled steps of (Q_tot(s_t, a_t) - y_t)^2``, with
        ``y_t = r_t + gamma * discount_{t+1} * Q_tot'(s_{t+1}, a'_{t+1})`` from the target networks, where
        ``a'`` is the online network's best allowed action per agent (``double_q``) or the target's;
        absent agents add nothing to either side."""
        training = self.config.training
        obs = batch[episodes.OBS]
        n = self.layout.n_agents
        present = obs[:, :, :n, 0]
        state = obs[:, :, n, 1:].index_select(-1, self._state_columns.to(obs.device))
        actions = batch[episodes.ACTIONS].long()
        allowed = batch[episodes.ACTION_MASK].bool()
        q = self.agent_q_values(self.model, batch)
        with torch.no_grad():
            target_q = self.agent_q_values(self.target_model, batch)
            allowed_next = allowed[:, 1:]
            if training.double_q:
                best = q.detach()[:, 1:].masked_fill(~allowed_next, -torch.inf).argmax(-1, keepdim=True)
                q_next = target_q[:, 1:].gather(-1, best).squeeze(-1)
            else:
                q_next = target_q[:, 1:].masked_fill(~allowed_next, -torch.inf).amax(-1)
            q_next = q_next * present[:, 1:]
            q_tot_next = self.target_model.mix(q_next, state[:, 1:])
            targets = (
                batch[episodes.REWARDS][:, :-1]
                + training.gamma * batch[episodes.DISCOUNTS][:, :-1] * q_tot_next
            )
        q_taken = q[:, :-1].gather(-1, actions[:, :-1].unsqueeze(-1)).squeeze(-1) * present[:, :-1]
        q_tot = self.model.mix(q_taken, state[:, :-1])
        filled = batch[episodes.FILLED][:, :-1]
        td_errors = (q_tot - targets) * filled
        count = filled.sum().clamp(min=1.0)
        loss = (td_errors**2).sum() / count
        return loss, {
            "mean_q_tot": (q_tot.detach() * filled).sum() / count,
            "mean_target": (targets * filled).sum() / count,
            "mean_td_error": td_errors.detach().abs().sum() / count,
        }
