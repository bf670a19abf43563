"""IQN on the torch backend: the implicit quantile network and QR-DQN's quantile Huber loss on sampled taus.

Dabney et al. 2018b. The network maps a state and a fraction ``tau`` to the return's
``tau``-quantile per action, ``Z_tau(s, a)``::

    psi(s)       the trunk: conv layers (images) and model.hidden_sizes[:-1], d features
    phi(tau)_j = ReLU(sum_{i=0}^{n-1} cos(pi i tau) w_ij + b_j)          (eq. 4, n = num_cosines)
    Z_tau(s, .) = output(act(hidden(psi(s) * phi(tau))))               (Hadamard product, then the head)

The head (one hidden layer of ``model.hidden_sizes[-1]`` units, then a linear layer to the actions)
is Dopamine's ``ImplicitQuantileNetwork`` layout (conv trunk, cosine embedding to the trunk's width,
product, a 512-unit layer, the output): with the default ``conv_filters`` and ``hidden_sizes: [512]``
it is that network. Dueling splits the head's last layer into ``V`` and ``A`` per tau,
``Z = V + A - mean_a A``. The paper's embedding sums ``i = 0..n-1`` (Dopamine's uses ``1..n``; the
``i = 0`` cosine is a constant, which the bias absorbs).

The loss per replayed (n-step) row, with ``tau_i`` (N online taus), ``tau'_j`` (N' target taus) and
``a* = argmax_a mean_k Z_{tau''_k}(s', a)`` over K taus (the online network's with ``double_q``, as
Dopamine's ``double_dqn``, else the target network's)::

    u_ij     = r + discount * Z'_{tau'_j}(s', a*) - Z_{tau_i}(s, a)
    row loss = sum_i mean_j |tau_i - 1{u_ij < 0}| L_kappa(u_ij) / kappa

QR-DQN's ``quantile_huber_loss`` with per-row taus: the sum over the N online taus and the mean over
the N' target samples is Dopamine's reduction. The row loss (before the importance weight) is the
prioritized-replay priority, as QR-DQN's. Acting is greedy (epsilon-greedily while exploring) on the
mean of K sampled quantile values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.blocks.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS
from rlgear.errors import RLGearError
from rlgear.plugins.algorithms.dqn.iqn_config import (
    NEXT_TAUS,
    TARGET_TAUS,
    TAU_COLUMNS,
    TAUS,
    TauSampling,
    acting_taus,
)
from rlgear.plugins.algorithms.dqn.qrdqn_config import quantile_midpoints
from rlgear.plugins.algorithms.dqn.qrdqn_torch_policy import QRDQNTorchPolicy
from rlgear.plugins.algorithms.dqn.torch_policy import _linear
from rlgear.plugins.backends.torch import ConvEncoder, conv_encoder
from rlgear.plugins.backends.torch.export_heads import QValueHead
from rlgear.plugins.backends.torch.models import ACTIVATIONS
from rlgear.policy import epsilon_greedy_actions
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space, flat_dim
from rlgear.timestep import TimeStep


class IQNNetwork(nn.Module):
    """``Z_tau(s, a)`` for a batch of states and ``[B, M]`` taus per state (module docstring).

    Framework-neutral weight names: ``q/conv_<i>/...`` (images), ``q/hidden_<i>/...`` for the trunk's
    layers and then the head's hidden layer (the last index), ``q/tau_embedding/{kernel,bias}``
    (``[num_cosines, d]``), then ``q/output/...`` or, dueling, ``q/value/...`` and ``q/advantage/...``.
    ``forward(obs)`` (the backend's model contract) gives the mean quantile values at K fixed evenly
    spaced taus ``(2k + 1) / (2K)``: a deterministic Q for what reads the model's outputs (a
    checkpoint's ``action_distribution_inputs``); acting and learning call :meth:`quantile_values`
    with sampled taus.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        dueling: bool,
        encoder: ConvEncoder | None,
        num_cosines: int,
        fixed_taus: int,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init
        hidden_gain, head_gain = (math.sqrt(2), 1.0) if ortho else (None, None)
        self.encoder = encoder
        in_dim = obs_dim if encoder is None else encoder.output_dim
        *trunk, head = model_config.hidden_sizes
        layers: list[nn.Module] = []
        for size in trunk:
            layers += [_linear(in_dim, size, hidden_gain), ACTIVATIONS[model_config.activation]()]
            in_dim = size
        self.hidden = nn.Sequential(*layers)
        self.tau_embedding = _linear(num_cosines, in_dim, hidden_gain)
        self.head = _linear(in_dim, head, hidden_gain)
        self.head_activation = ACTIVATIONS[model_config.activation]()
        self.dueling, self.num_actions = dueling, num_actions
        if dueling:
            self.value = _linear(head, 1, head_gain)
            self.advantage = _linear(head, num_actions, head_gain)
        else:
            self.output = _linear(head, num_actions, head_gain)
        self.register_buffer(
            "frequencies", math.pi * torch.arange(num_cosines, dtype=torch.float32), persistent=False
        )
        self.register_buffer("fixed_taus", torch.from_numpy(quantile_midpoints(fixed_taus)), persistent=False)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """``psi(s)``, ``[B, d]``."""
        return self.hidden(obs if self.encoder is None else self.encoder(obs))

    def embed(self, taus: torch.Tensor) -> torch.Tensor:
        """``phi(tau)``, ``[B, M, d]`` for taus ``[B, M]`` (eq. 4)."""
        return torch.relu(self.tau_embedding(torch.cos(taus[..., None] * self.frequencies)))

    def quantile_values(self, obs: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """``[B, M, actions]``: ``Z_tau(s, a)`` at each row's ``M`` taus."""
        hidden = self.head_activation(self.head(self.features(obs)[:, None, :] * self.embed(taus)))
        if not self.dueling:
            return self.output(hidden)
        advantages = self.advantage(hidden)
        return self.value(hidden) + advantages - advantages.mean(dim=-1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, None]:
        taus = self.fixed_taus.expand(obs.shape[0], -1)
        return self.quantile_values(obs, taus).mean(dim=1), None

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("q", "encoder")
        layers = [i for i, module in enumerate(self.hidden) if isinstance(module, nn.Linear)]
        prefixes = {f"hidden.{position}": f"q/hidden_{index}" for index, position in enumerate(layers)}
        prefixes["head"] = f"q/hidden_{len(layers)}"
        prefixes["tau_embedding"] = "q/tau_embedding"
        prefixes.update({h: f"q/{h}" for h in (("value", "advantage") if self.dueling else ("output",))})
        for module_name, prefix in prefixes.items():
            names[f"{module_name}.weight"] = f"{prefix}/kernel"
            names[f"{module_name}.bias"] = f"{prefix}/bias"
        return names


class IQNTorchPolicy(TauSampling, QRDQNTorchPolicy):
    """QR-DQN's policy (target network, epsilon schedule, priorities, checkpoints) on an
    :class:`IQNNetwork`, with taus drawn from the policy's own generators."""

    loss_columns = (*QRDQNTorchPolicy.loss_columns, *TAU_COLUMNS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.make_tau_rngs(config.seed)
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> nn.Module:
        training = self.config.training
        return IQNNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            self.config.model,
            training.dueling,
            conv_encoder(self.observation_space, self.config.model),
            training.num_cosines,
            training.num_quantile_samples,
        )

    def export_head(self, explore: bool) -> QValueHead:
        """Refused: IQN's Q-values are means over taus sampled at every step, and an exported graph
        carries no generator; a graph at fixed taus would act otherwise than this policy (and fail
        ``rlgear export --check``), so there is none."""
        raise RLGearError(
            "iqn: acting averages the quantile values at taus sampled afresh at every step, which an "
            "exported graph cannot draw; iqn checkpoints are not exported (act with rlgear.run.agent)"
        )

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        obs = self.preprocess(timestep.observation)
        taus = acting_taus(self.acting_tau_rng, len(obs), self.config.training)
        with torch.inference_mode():
            z = self.model.quantile_values(
                self.to_device_tensor(obs, pin=False),
                self.to_device_tensor(torch.from_numpy(taus), pin=False),
            )
            q_values = z.mean(dim=1).cpu().numpy()
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(q_values, epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, {}

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        obs, next_obs, taus = batch[SB.OBS], batch[NEXT_OBS], batch[TAUS]
        rows = torch.arange(len(obs), device=obs.device)
        z = self.model.quantile_values(obs, taus)  # [B, N, actions]
        taken = z[rows, :, batch[SB.ACTIONS].long()]  # [B, N]
        with torch.no_grad():
            # a*: greedy on the mean over K taus, of the online network (double Q) or the target's
            chooser_net = self.model if training.double_q else self.target_model
            chooser = chooser_net.quantile_values(next_obs, batch[NEXT_TAUS]).mean(dim=1)
            next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs
            if next_mask is not None:
                chooser = chooser.masked_fill(~next_mask, float("-inf"))
            next_actions = chooser.argmax(dim=1)
            next_z = self.target_model.quantile_values(next_obs, batch[TARGET_TAUS])  # [B, N', actions]
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            rewards = batch[SB.REWARDS].to(taken.dtype)[:, None]
            discounts = batch[SB.DISCOUNTS].to(taken.dtype)[:, None]
            targets = rewards + discounts * next_z[rows, :, next_actions]  # [B, N']
        return self.weighted_quantile_loss(taken, targets, taus, batch)
