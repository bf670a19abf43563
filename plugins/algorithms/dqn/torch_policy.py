"""DQN on the torch backend: the Q-network, epsilon-greedy acting, the target network and the TD loss."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlgear.execution.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS, WEIGHTS
from rlgear.execution.schedules import piecewise_linear
from rlgear.execution.target_network import TargetNetworkState
from rlgear.plugins.backends.torch import ConvEncoder, TorchPolicy, build_model, conv_encoder
from rlgear.plugins.backends.torch.models import ACTIVATIONS, orthogonal_
from rlgear.policy import epsilon_greedy_actions
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep

# Row positions within the batch given to learn_on_batch, so the loss can report
# TD errors in the batch's order whatever order the SGD loop feeds rows in.
_ROW = "_row"


def _linear(in_dim: int, out_dim: int, gain: float | None) -> nn.Linear:
    linear = nn.Linear(in_dim, out_dim)
    if gain is not None:
        orthogonal_(linear.weight, gain)
        nn.init.zeros_(linear.bias)
    return linear


class QNetwork(nn.Module):
    """An MLP from observations to one Q-value per action.

    With ``dueling`` the last hidden layer feeds a state-value stream ``V`` and
    an advantage stream ``A``, combined as ``Q = V + A - mean(A)`` (Wang et al.
    2016, eq. 9: subtracting the mean makes V and A identifiable).

    ``forward`` follows the backend's model contract, ``(dist_inputs, values)``,
    with the Q-values as ``dist_inputs`` and no separate value output, so a
    ``model.custom`` network can stand in for it.

    Image observations go through the conv trunk first (``model.conv_filters``,
    as in Mnih et al. 2015).

    Framework-neutral weight names: ``q/conv_<i>/{kernel,bias}`` (images only),
    ``q/hidden_<i>/{kernel,bias}``, then ``q/output/...`` or, dueling,
    ``q/value/...`` and ``q/advantage/...``; kernels are ``[in, out]`` (conv:
    ``[kh, kw, in, out]``).
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        dueling: bool,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init
        self.encoder = encoder
        layers: list[nn.Module] = []
        in_dim = obs_dim if encoder is None else encoder.output_dim
        for size in model_config.hidden_sizes:
            layers += [
                _linear(in_dim, size, math.sqrt(2) if ortho else None),
                ACTIVATIONS[model_config.activation](),
            ]
            in_dim = size
        self.hidden = nn.Sequential(*layers)
        self.dueling = dueling
        if dueling:
            self.value = _linear(in_dim, 1, 1.0 if ortho else None)
            self.advantage = _linear(in_dim, num_actions, 1.0 if ortho else None)
        else:
            self.output = _linear(in_dim, num_actions, 1.0 if ortho else None)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.encoder is not None:
            obs = self.encoder(obs)
        features = self.hidden(obs)
        if not self.dueling:
            return self.output(features), None
        advantages = self.advantage(features)
        return self.value(features) + advantages - advantages.mean(dim=-1, keepdim=True), None

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("q", "encoder")
        linears = [i for i, module in enumerate(self.hidden) if isinstance(module, nn.Linear)]
        for index, position in enumerate(linears):
            names[f"hidden.{position}.weight"] = f"q/hidden_{index}/kernel"
            names[f"hidden.{position}.bias"] = f"q/hidden_{index}/bias"
        for head in ("value", "advantage") if self.dueling else ("output",):
            names[f"{head}.weight"] = f"q/{head}/kernel"
            names[f"{head}.bias"] = f"q/{head}/bias"
        return names


class DQNTorchPolicy(TargetNetworkState, TorchPolicy):
    """Epsilon-greedy acting on a Q-network, learning from replayed n-step transitions.

    Beyond the TorchPolicy contract it keeps a target network (updated by
    :meth:`update_target`, saved in :meth:`get_state` under ``target/``) and,
    after every :meth:`learn_on_batch`, the per-row TD errors in
    :attr:`td_errors` for prioritized replay.
    """

    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS, NEXT_ACTION_MASK, WEIGHTS, _ROW)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete):
            raise TypeError(f"DQN needs discrete actions, got {action_space!r}")
        super().__init__(observation_space, action_space, config)  # builds make_model()'s Q-network
        # (the numpy acting twin mirrors the actor-critic MLP only, so fast_actor is None here)

        # The target network starts as a copy of the online one (Mnih et al. 2015).
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.acting_rng = np.random.default_rng(None if config.seed is None else config.seed + 1)
        #: |TD error| per row of the last learn_on_batch() batch, before that update.
        self.td_errors = np.zeros(0, dtype=np.float32)

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        if model_config.custom:  # its dist_inputs are read as the Q-values
            return build_model(self.observation_space, self.action_space, self.num_outputs, model_config)
        return QNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            self.config.training.dueling,
            conv_encoder(self.observation_space, model_config),
        )

    # --- acting -------------------------------------------------------------------
    def epsilon(self) -> float:
        """The probability of a random action at ``global_timestep`` (linear decay)."""
        training = self.config.training
        if self.global_timestep >= training.epsilon_timesteps:
            return float(training.epsilon_final)
        points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
        return piecewise_linear(points, self.global_timestep)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        with torch.inference_mode():
            q_values, _ = self.model(self.preprocess(timestep.observation))
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(q_values.numpy(), epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, {}

    # --- learning -----------------------------------------------------------------
    def to_tensors(self, batch: SB, columns) -> dict[str, torch.Tensor]:
        tensors = super().to_tensors(batch, [c for c in columns if c != NEXT_OBS])
        if NEXT_OBS in columns and NEXT_OBS in batch:  # flattened (one-hot) like obs
            tensors[NEXT_OBS] = self.preprocess(batch[NEXT_OBS])
        return tensors

    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """One gradient step on ``batch`` (DQN's config has one SGD epoch of one minibatch).

        Afterwards :attr:`td_errors` holds ``|TD error|`` of every row of
        ``batch``, in its order, from the forward pass before the update.
        """
        self.td_errors = np.zeros(len(batch), dtype=np.float32)
        rows = SB(batch)
        rows[_ROW] = np.arange(len(batch))
        return super().learn_on_batch(rows)

    def compute_td_errors(self, batch: SB) -> np.ndarray:
        """``|TD error|`` of every row of ``batch`` under the current networks, without learning.

        Ape-X's rollout workers give their fragments these initial priorities before sending them
        to replay (Horgan et al. 2018); the same :meth:`loss`, run without gradients.
        """
        self.td_errors = np.zeros(len(batch), dtype=np.float32)
        rows = SB(batch)
        rows[_ROW] = np.arange(len(batch))
        with torch.no_grad():
            self.loss(self.to_tensors(rows, self.learner_columns(self.loss_columns)))
        return self.td_errors.copy()

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        if training.double_q:  # one online pass over obs and next_obs: it also picks the next action
            q_both, _ = self.model(torch.cat([obs, next_obs]))
            q_values, next_q_online = q_both[: len(obs)], q_both[len(obs) :].detach()
        else:
            q_values, _ = self.model(obs)
        q_taken = q_values.gather(1, batch[SB.ACTIONS].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q_target, _ = self.target_model(next_obs)
            next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs: the max is over those
            if next_mask is not None:
                next_q_target = next_q_target.masked_fill(~next_mask, float("-inf"))
            if training.double_q:  # van Hasselt et al. 2016: the online network selects, the target evaluates
                if next_mask is not None:
                    next_q_online = next_q_online.masked_fill(~next_mask, float("-inf"))
                next_actions = next_q_online.argmax(dim=1, keepdim=True)
                next_q = next_q_target.gather(1, next_actions).squeeze(1)
            else:
                next_q = next_q_target.max(dim=1).values
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(q_taken.dtype) + batch[SB.DISCOUNTS].to(q_taken.dtype) * next_q
        if training.td_error_loss_fn == "huber":  # quadratic near 0, linear beyond huber_delta
            per_row = F.huber_loss(q_taken, targets, reduction="none", delta=training.huber_delta)
        else:
            per_row = 0.5 * F.mse_loss(q_taken, targets, reduction="none")
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * batch[WEIGHTS].to(per_row.dtype)
        loss = per_row.mean()

        td_errors = q_taken.detach() - targets
        abs_td = td_errors.abs()
        self.td_errors[batch[_ROW].numpy()] = abs_td.numpy()
        return loss, {
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": abs_td.mean(),
        }

    # --- the target network ---------------------------------------------------------
    def update_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target``; ``tau=1`` copies (exactly)."""
        with torch.no_grad():
            for target, online in zip(self.target_model.parameters(), self.model.parameters(), strict=True):
                if tau >= 1.0:
                    target.copy_(online)
                else:
                    target.lerp_(online, tau)

    def get_target_weights(self) -> dict[str, np.ndarray]:
        """The target network's weights, named and laid out like :meth:`get_weights`."""
        out = {}
        for name, param in self.target_model.named_parameters():
            value = self.to_neutral_layout(name, param.detach().numpy())
            out[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        return out

    def set_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        converted = self._torch_layout(weights)  # checks every weight before changing any
        with torch.no_grad():
            for name, param in self.target_model.named_parameters():
                param.copy_(torch.from_numpy(np.ascontiguousarray(converted[name], dtype=np.float32)))

    # --- weights and state -------------------------------------------------------------
    def check_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Raise, naming the weight, if ``weights`` do not fit the target network (changes nothing)."""
        self._torch_layout(weights)
