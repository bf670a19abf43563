"""DQN on the torch backend: the Q-network, epsilon-greedy acting, the target network and the TD loss."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlgear.blocks.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS, WEIGHTS
from rlgear.blocks.schedules import piecewise_linear
from rlgear.blocks.target_network import TargetNetworkState
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.dqn.rainbow import NoiseRngState, atom_support, resample_noise, zero_noise
from rlgear.plugins.backends.torch import ConvEncoder, TargetModel, TorchPolicy, build_model, conv_encoder
from rlgear.plugins.backends.torch.export_heads import QValueHead
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


class NoisyLinear(nn.Module):
    """A factorised Gaussian noisy linear layer (Fortunato et al. 2018, sec. 3.2)::

        y = x @ (kernel_mu + kernel_sigma * outer(noise_in, noise_out)) + bias_mu + bias_sigma * noise_out

    The noise is set from outside (:meth:`set_noise`, drawn by ``rainbow.resample_noise``) and is
    not a weight. Kernels are stored ``[in, out]``, the neutral layout, so they need no transposing.
    Initialised as the paper's factorised case: mu uniform in ``±1/sqrt(in)``, sigma ``sigma0/sqrt(in)``.
    """

    def __init__(self, in_dim: int, out_dim: int, sigma0: float):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        bound = 1.0 / math.sqrt(in_dim)
        self.kernel_mu = nn.Parameter(torch.empty(in_dim, out_dim).uniform_(-bound, bound))
        self.kernel_sigma = nn.Parameter(torch.full((in_dim, out_dim), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_dim).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_dim,), sigma0 * bound))
        self.register_buffer("noise_in", torch.zeros(in_dim), persistent=False)
        self.register_buffer("noise_out", torch.zeros(out_dim), persistent=False)

    def set_noise(self, noise_in: np.ndarray, noise_out: np.ndarray) -> None:
        self.noise_in.copy_(torch.from_numpy(noise_in))
        self.noise_out.copy_(torch.from_numpy(noise_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x @ (mu + sigma * outer(e_in, e_out)) = x @ mu + ((x * e_in) @ sigma) * e_out: no [in, out] noise
        noise = ((x * self.noise_in) @ self.kernel_sigma) * self.noise_out
        return x @ self.kernel_mu + noise + self.bias_mu + self.bias_sigma * self.noise_out

    def weight_names(self, prefix: str) -> dict[str, str]:
        return {name: f"{prefix}/{name}" for name in ("kernel_mu", "kernel_sigma", "bias_mu", "bias_sigma")}


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

    With ``num_atoms`` > 1 (C51, Bellemare et al. 2017) each action has ``num_atoms``
    logits of its return distribution, flat ``[B, actions * num_atoms]`` (action-major);
    dueling then combines the streams per atom, ``V_i + A_ai - mean_a A_ai`` (Hessel et
    al. 2018, sec. 3). With ``noisy``, every dense layer is a :class:`NoisyLinear`
    (Fortunato et al. 2018), listed in :meth:`noisy_layers`.

    Framework-neutral weight names: ``q/conv_<i>/{kernel,bias}`` (images only),
    ``q/hidden_<i>/{kernel,bias}``, then ``q/output/...`` or, dueling,
    ``q/value/...`` and ``q/advantage/...``; kernels are ``[in, out]`` (conv:
    ``[kh, kw, in, out]``). Noisy layers have ``{kernel,bias}_{mu,sigma}`` instead of
    ``{kernel,bias}``.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        dueling: bool,
        encoder: ConvEncoder | None = None,
        num_atoms: int = 1,
        noisy: bool = False,
        sigma0: float = 0.5,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init

        def dense(in_dim: int, out_dim: int, gain: float | None) -> nn.Module:
            return NoisyLinear(in_dim, out_dim, sigma0) if noisy else _linear(in_dim, out_dim, gain)

        self.encoder = encoder
        layers: list[nn.Module] = []
        in_dim = obs_dim if encoder is None else encoder.output_dim
        for size in model_config.hidden_sizes:
            layers += [
                dense(in_dim, size, math.sqrt(2) if ortho else None),
                ACTIVATIONS[model_config.activation](),
            ]
            in_dim = size
        self.hidden = nn.Sequential(*layers)
        self.dueling = dueling
        self.num_actions, self.num_atoms = num_actions, num_atoms
        if dueling:
            self.value = dense(in_dim, num_atoms, 1.0 if ortho else None)
            self.advantage = dense(in_dim, num_actions * num_atoms, 1.0 if ortho else None)
        else:
            self.output = dense(in_dim, num_actions * num_atoms, 1.0 if ortho else None)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.encoder is not None:
            obs = self.encoder(obs)
        features = self.hidden(obs)
        if not self.dueling:
            return self.output(features), None
        shape = (-1, self.num_actions, self.num_atoms)  # per atom: the mean runs over actions
        advantages = self.advantage(features).reshape(shape)
        values = self.value(features).reshape(-1, 1, self.num_atoms)
        q = values + advantages - advantages.mean(dim=1, keepdim=True)
        return q.reshape(-1, self.num_actions * self.num_atoms), None

    def noisy_layers(self) -> list[NoisyLinear]:
        """The noisy layers in a fixed order (hidden layers, then the heads), the order noise is drawn in."""
        heads = [self.value, self.advantage] if self.dueling else [self.output]
        return [m for m in [*self.hidden, *heads] if isinstance(m, NoisyLinear)]

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("q", "encoder")
        layers = [i for i, module in enumerate(self.hidden) if isinstance(module, nn.Linear | NoisyLinear)]
        prefixes = {f"hidden.{position}": f"q/hidden_{index}" for index, position in enumerate(layers)}
        prefixes.update(
            {head: f"q/{head}" for head in (("value", "advantage") if self.dueling else ("output",))}
        )
        for module_name, prefix in prefixes.items():
            module = self.get_submodule(module_name)
            if isinstance(module, NoisyLinear):
                names.update({f"{module_name}.{k}": v for k, v in module.weight_names(prefix).items()})
            else:
                names[f"{module_name}.weight"] = f"{prefix}/kernel"
                names[f"{module_name}.bias"] = f"{prefix}/bias"
        return names


def project_onto_support(
    rewards: torch.Tensor, discounts: torch.Tensor, next_probs: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """The C51 projection (Bellemare et al. 2017, Algorithm 1) of ``r + discount * z`` onto ``support``.

    ``rewards`` ``[B]`` are n-step sums and ``discounts`` ``[B]`` are ``gamma**k``, 0 after a
    terminal (no bootstrap: all mass lands on the atoms around ``r``) and ``gamma**k`` after a
    truncation (bootstrap). Atom ``j`` of ``next_probs`` ``[B, atoms]`` moves to
    ``clip(r + discount z_j, v_min, v_max)`` and splits between the two nearest atoms in
    proportion to closeness, written as ``sum_j clip(1 - |Tz_j - z_i| / dz, 0, 1) p_j`` (as Dopamine).
    """
    delta = (support[-1] - support[0]) / (len(support) - 1)
    moved = (rewards[:, None] + discounts[:, None] * support).clamp(support[0], support[-1])  # [B, j]
    closeness = (1 - (moved[:, None, :] - support[None, :, None]).abs() / delta).clamp(min=0)  # [B, i, j]
    return (closeness * next_probs[:, None, :]).sum(dim=-1)


class _QValues(nn.Module):
    """The flat input -> ``[B, actions]`` Q-values (C51: each return distribution's mean), for export."""

    def __init__(self, model: nn.Module, support: torch.Tensor, num_atoms: int):
        super().__init__()
        self.model, self.num_atoms = model, num_atoms
        self.register_buffer("support", support.detach().to("cpu").clone())

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        outputs = self.model(flat)[0]
        if self.num_atoms == 1:
            return outputs
        logits = outputs.reshape(outputs.shape[0], -1, self.num_atoms)
        return torch.softmax(logits, dim=-1) @ self.support


class DQNTorchPolicy(NoiseRngState, TargetNetworkState, TargetModel, TorchPolicy):
    """Epsilon-greedy acting on a Q-network, learning from replayed n-step transitions.

    Beyond the TorchPolicy contract it keeps a target network (the backend's
    :class:`TargetModel`: updated by :meth:`update_target`, saved in :meth:`get_state`
    under ``target/``) and,
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
        self.make_target_model()
        self.acting_rng = np.random.default_rng(None if config.seed is None else config.seed + 1)
        training = config.training
        self.num_atoms = int(training.num_atoms)
        self.support = torch.from_numpy(atom_support(self.num_atoms, training.v_min, training.v_max))
        #: Draws the noisy layers' noise (the same stream on every backend).
        self.noise_rng = np.random.default_rng(None if config.seed is None else [config.seed, 0x4E])
        #: |TD error| per row of the last learn_on_batch() batch, before that update.
        self.td_errors = np.zeros(0, dtype=np.float32)

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        training = self.config.training
        if model_config.custom:  # its dist_inputs are read as the Q-values (C51: the atoms' logits)
            return build_model(
                self.observation_space, self.action_space, self.num_outputs * training.num_atoms, model_config
            )
        return QNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            training.dueling,
            conv_encoder(self.observation_space, model_config),
            num_atoms=training.num_atoms,
            noisy=training.noisy,
            sigma0=training.sigma0,
        )

    # --- Rainbow: distributions and noise ---------------------------------------------
    def atom_logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """The model's flat outputs as C51 logits ``[B, actions, num_atoms]``."""
        return outputs.reshape(outputs.shape[0], -1, self.num_atoms)

    def q_values(self, outputs: torch.Tensor) -> torch.Tensor:
        """``[B, actions]``: the outputs themselves, or with C51 each distribution's mean ``sum_i p_i z_i``."""
        if self.num_atoms == 1:
            return outputs
        return torch.softmax(self.atom_logits(outputs), dim=-1) @ self.support

    def export_head(self, explore: bool) -> QValueHead:
        """The acting part of an exported graph: greedy on the Q-values, noisy layers at their mean
        weights (on a copy: the live network keeps its noise)."""
        if explore:
            raise explore_refused(
                "dqn explores epsilon-greedily on a schedule of env steps (or with the noise of its noisy "
                "layers), which an exported graph does not carry"
            )
        model = copy.deepcopy(self.model)
        if self.config.training.noisy:
            zero_noise(model.noisy_layers())
        return QValueHead(_QValues(model, self.support, self.num_atoms), self.action_space.n)

    def set_noise(self, explore: bool) -> None:
        """Noisy nets: fresh noise for acting (``explore``), none (the mean weights) for greedy acting."""
        if not self.config.training.noisy:
            return
        if explore:
            resample_noise(self.model.noisy_layers(), self.noise_rng)
        else:
            zero_noise(self.model.noisy_layers())

    # --- acting -------------------------------------------------------------------
    def epsilon(self) -> float:
        """The probability of a random action at ``global_timestep`` (linear decay)."""
        training = self.config.training
        if training.noisy:  # noisy nets explore instead (Fortunato et al. 2018)
            return 0.0
        if self.global_timestep >= training.epsilon_timesteps:
            return float(training.epsilon_final)
        points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
        return piecewise_linear(points, self.global_timestep)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        self.set_noise(explore)
        with torch.inference_mode():  # DQN has no numpy twin: the Q-network acts on its device
            obs = self.to_device_tensor(self.preprocess(timestep.observation), pin=False)
            q_values = self.q_values(self.model(obs)[0]).cpu().numpy()
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(q_values, epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, {}

    # --- learning -----------------------------------------------------------------
    def on_device(self, device: torch.device) -> None:
        super().on_device(device)  # the target network (TargetModel)
        self.support = self.support.to(device)

    def host_tensors(self, batch: SB, columns) -> dict[str, torch.Tensor]:
        tensors = super().host_tensors(batch, [c for c in columns if c != NEXT_OBS])
        if NEXT_OBS in columns and NEXT_OBS in batch:  # flattened (one-hot) like obs
            tensors[NEXT_OBS] = self.preprocess(batch[NEXT_OBS])
        return tensors

    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """One gradient step on ``batch`` (DQN's config has one SGD epoch of one minibatch).

        Afterwards :attr:`td_errors` holds ``|TD error|`` of every row of
        ``batch`` (C51: its cross-entropy, Rainbow's priority), in its order, from the
        forward pass before the update.
        """
        self.td_errors = np.zeros(len(batch), dtype=np.float32)
        if self.config.training.noisy:  # fresh noise per training step, independent for the target
            resample_noise(self.model.noisy_layers(), self.noise_rng)
            resample_noise(self.target_model.noisy_layers(), self.noise_rng)
        rows = SB(batch)
        rows[_ROW] = np.arange(len(batch))
        stats = super().learn_on_batch(rows)
        group = self.data_parallel
        if group is not None and group.own is None:  # each learner filled its shard's rows: gather them
            own = self.td_errors if self.last_shard_share > 0 else np.zeros_like(self.td_errors)
            self.td_errors = group.all_reduce_numpy(own)
        return stats

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
        if self.num_atoms > 1:
            return self.distributional_loss(batch)
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
        self.td_errors[batch[_ROW].cpu().numpy()] = abs_td.cpu().numpy()
        return loss, {
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": abs_td.mean(),
        }

    def distributional_loss(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """C51 (Bellemare et al. 2017, Algorithm 1) on n-step rows: cross-entropy of the taken action's
        distribution to the target distribution projected onto the support."""
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        online, _ = self.model(torch.cat([obs, next_obs]))
        logits = self.atom_logits(online[: len(obs)])
        actions = batch[SB.ACTIONS].long()
        rows = torch.arange(len(obs), device=obs.device)
        log_probs = torch.log_softmax(logits[rows, actions], dim=-1)  # [B, atoms]
        with torch.no_grad():
            next_probs = torch.softmax(self.atom_logits(self.target_model(next_obs)[0]), dim=-1)
            # Double Q: the online network's expected Q picks the next action; else the target's.
            chooser = self.q_values(online[len(obs) :]) if training.double_q else next_probs @ self.support
            next_mask = batch.get(NEXT_ACTION_MASK)
            if next_mask is not None:
                chooser = chooser.masked_fill(~next_mask, float("-inf"))
            next_actions = chooser.argmax(dim=1)
            target_probs = project_onto_support(
                batch[SB.REWARDS].float(),
                batch[SB.DISCOUNTS].float(),
                next_probs[rows, next_actions],
                self.support,
            )
        cross_entropy = -(target_probs * log_probs).sum(dim=-1)
        per_row = cross_entropy
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * batch[WEIGHTS].to(per_row.dtype)
        loss = per_row.mean()
        cross_entropy = cross_entropy.detach()
        self.td_errors[batch[_ROW].cpu().numpy()] = cross_entropy.cpu().numpy()  # Rainbow's priority
        q_taken = (log_probs.detach().exp() @ self.support).mean()
        return loss, {
            "mean_q": q_taken,
            "mean_target_q": (target_probs @ self.support).mean(),
            "mean_cross_entropy": cross_entropy.mean(),
        }
