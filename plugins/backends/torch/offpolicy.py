"""Torch pieces of the off-policy continuous actor-critics (SAC, TD3, DDPG): one base policy for all three.

* :class:`StackedMLP` - K critics of one shape evaluated as one network: kernels
  stacked ``[K, in, out]``, one batched matmul per layer (Fujimoto et al. 2018's
  twin critics without a Python loop over two modules).
* :class:`OffPolicyTorchPolicy` - what SAC, TD3 and DDPG share: the actor
  (``policy/...``) and stacked critics (``q/...``) in one module, target copies of
  some of them moved by Polyak averaging after every gradient step, one gradient
  step per :meth:`learn_on_batch` on the replayed minibatch, actions squashed by
  tanh and rescaled to the Box bounds, and acting through the numpy twin
  :class:`rlgear.blocks.squashed_inference.NumpyTanhActor`. A subclass gives
  the actor's output width, the loss and the exploration.

One optimizer steps all parameters on the sum of the critic, actor (and SAC's
temperature) losses. The actor's loss reads the critics through
:attr:`OffPolicyTorchPolicy.frozen_critic` (detached views of the same storage), so
each loss reaches only its own parameters and Adam, being per-parameter, makes
exactly the updates separate optimizers with the same settings would, in one
backward pass and one optimizer step. (Unlike Stable-Baselines3, the actor's loss
sees the critics from before this step's critic update, as in a joint update.)
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.blocks.squashed_inference import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    NumpyTanhActor,
    action_bounds,
    box_action_count,
)
from rlgear.export.signature import explore_refused
from rlgear.plugins.backends.torch.export_heads import SquashedActorHead
from rlgear.plugins.backends.torch.learning import clip_gradients
from rlgear.plugins.backends.torch.models import ACTIVATIONS
from rlgear.plugins.backends.torch.policy import TorchPolicy
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Space, flat_dim
from rlgear.timestep import TimeStep


class StackedMLP(nn.Module):
    """``members`` MLPs of the same shape as one module: every layer is one batched matmul.

    Parameters ``kernels.<i>`` ``[members, in, out]`` and ``biases.<i>`` ``[members, out]``;
    framework-neutral names ``<scope>/hidden_<i>/{kernel,bias}`` and ``<scope>/output/...``,
    each a stack of dense kernels ``[in, out]`` (the layout every backend uses, so no transpose).
    Initialised like ``torch.nn.Linear`` (uniform in +-1/sqrt(in)), member by member.
    """

    def __init__(self, members: int, in_dim: int, hidden_sizes: list[int], out_dim: int, activation: str):
        super().__init__()
        self.members = members
        self.activation = activation_module(activation)
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.kernels = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            self.kernels.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, fan_out).uniform_(-bound, bound)))

    def forward(self, x: torch.Tensor, params: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``[members, B, out]`` from inputs ``[B, in]`` (the same for every member) or ``[members, B, in]``.

        ``params`` (kernels then biases, as :meth:`parameter_list`) stands in for the module's own,
        e.g. detached views so that a loss reaches the inputs but not these weights.
        """
        kernels, biases = (self.kernels, self.biases) if params is None else _split(params)
        if x.dim() == 2:
            x = x.expand(self.members, *x.shape)
        last = len(kernels) - 1
        for i, (kernel, bias) in enumerate(zip(kernels, biases, strict=True)):
            x = torch.baddbmm(bias.unsqueeze(1), x, kernel)
            if i < last:
                x = self.activation(x)
        return x

    def parameter_list(self) -> list[torch.Tensor]:
        return [*self.kernels, *self.biases]

    def weight_names(self, scope: str) -> dict[str, str]:
        names = {}
        last = len(self.kernels) - 1
        for i in range(len(self.kernels)):
            layer = "output" if i == last else f"hidden_{i}"
            names[f"kernels.{i}"] = f"{scope}/{layer}/kernel"
            names[f"biases.{i}"] = f"{scope}/{layer}/bias"
        return names


def _split(params: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    half = len(params) // 2
    return params[:half], params[half:]


def activation_module(name: str) -> nn.Module:
    """The activation after a dense layer; ReLU in place.

    Why in place: the layer before it (a matmul) does not keep its output for its gradient and
    ReLU's gradient reads its own output, so overwriting is safe and saves one tensor per layer,
    about 2% of a TQC gradient step on 400x300 critics. Only ReLU, the common case and the one
    measured; the others stay out of place.
    """
    return nn.ReLU(inplace=True) if name == "relu" else ACTIVATIONS[name]()


def actor_mlp(in_dim: int, hidden_sizes: list[int], out_dim: int, activation: str) -> nn.Sequential:
    """The actor body and output layer as ``nn.Linear`` layers (torch's default init)."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [nn.Linear(in_dim, size), activation_module(activation)]
        in_dim = size
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def actor_weight_names(actor: nn.Sequential, scope: str = "policy") -> dict[str, str]:
    linears = [i for i, module in enumerate(actor) if isinstance(module, nn.Linear)]
    names = {}
    for index, position in enumerate(linears):
        layer = "output" if index == len(linears) - 1 else f"hidden_{index}"
        names[f"{position}.weight"] = f"{scope}/{layer}/kernel"
        names[f"{position}.bias"] = f"{scope}/{layer}/bias"
    return names


class ActorCritics(nn.Module):
    """The actor, the stacked critics and (SAC) the log temperature, as one module for one optimizer."""

    def __init__(self, actor: nn.Sequential, critic: StackedMLP, log_alpha: float | None = None):
        super().__init__()
        self.actor = actor
        self.critic = critic
        self.log_alpha = None if log_alpha is None else nn.Parameter(torch.tensor([float(log_alpha)]))

    def weight_names(self) -> dict[str, str]:
        names = {f"actor.{k}": v for k, v in actor_weight_names(self.actor).items()}
        names.update({f"critic.{k}": v for k, v in self.critic.weight_names("q").items()})
        if self.log_alpha is not None:
            names["log_alpha"] = "log_alpha"
        return names


class OffPolicyTorchPolicy(TorchPolicy):
    """Base of SAC's, TD3's and DDPG's torch policies (see the module docstring).

    A subclass sets :attr:`num_critics`, :attr:`target_parts` (which of ``actor`` and
    ``critic`` have target copies), :attr:`gaussian_actor` and :attr:`initial_log_alpha`
    (None: no temperature), and implements ``loss(batch) -> (loss, stats)`` and
    :meth:`exploration`. After :meth:`learn_on_batch`, :attr:`td_errors` holds
    ``|TD error|`` per row (mean over the critics) for prioritized replay.

    Actions: the actor's tanh output ``u`` in ``[-1, 1]`` maps to the env's Box as
    ``low + (u + 1) (high - low) / 2``; replayed actions are mapped back before the
    critics see them, so the critics and the losses work in ``[-1, 1]``.
    """

    loss_columns: ClassVar[tuple[str, ...]] = (
        SampleBatch.OBS,
        SampleBatch.ACTIONS,
        SampleBatch.REWARDS,
        SampleBatch.DISCOUNTS,
        NEXT_OBS,
        WEIGHTS,
    )
    num_critics: ClassVar[int] = 2
    target_parts: ClassVar[tuple[str, ...]] = ("critic",)
    gaussian_actor: ClassVar[bool] = False

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_actions = self.action_count(action_space)
        super().__init__(observation_space, action_space, config)
        low, high = action_bounds(action_space)
        self.action_low, self.action_half_range = low, (high - low) / 2
        self._low_t = torch.from_numpy(low)
        self._half_range_t = torch.from_numpy(self.action_half_range.copy())
        self.target_model = nn.ModuleDict(
            {part: copy.deepcopy(getattr(self.model, part)) for part in self.target_parts}
        ).requires_grad_(False)
        self._target_pairs = (
            [p for _, p in self.target_model.named_parameters()],
            [dict(self.model.named_parameters())[name] for name, _ in self.target_model.named_parameters()],
        )
        # Views of the critics' storage without autograd: the actor's loss reads the critics through
        # them, so its gradient reaches the actor only (made once; optimizer steps are in place).
        self.frozen_critic = [p.detach() for p in self.model.critic.parameter_list()]
        seed = config.seed
        self.actor_twin = NumpyTanhActor(
            len(config.model.hidden_sizes), config.model.activation, self.gaussian_actor,
            None if seed is None else seed + 1,
        )  # fmt: skip
        self.acting_rng = self.actor_twin.rng
        #: the learner's noise (SAC's reparameterised samples, TD3's target smoothing)
        self.noise_generator = torch.Generator().manual_seed(0 if seed is None else seed + 2)
        self.td_errors = np.zeros(0, dtype=np.float32)

    # --- the networks -----------------------------------------------------------------------
    def action_count(self, action_space: Space) -> int:
        """The actor's action width; raises for a space the policy cannot act in (here: anything but a
        bounded one-dimensional Box; discrete SAC's policy overrides it for Discrete)."""
        return box_action_count(type(self).__name__, action_space)

    def actor_outputs(self) -> int:
        """Width of the actor's output layer: 2 x actions (means, log stds) when Gaussian, else actions."""
        return 2 * self.num_actions if self.gaussian_actor else self.num_actions

    def critic_outputs(self) -> int:
        """Width of each critic's output layer: 1 (a Q-value); TQC's critics output quantiles."""
        return 1

    def initial_log_alpha(self) -> float | None:
        """The log temperature's initial value, or None for a policy without one (TD3, DDPG)."""
        return None

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim = flat_dim(self.observation_space)
        sizes = list(model_config.hidden_sizes)
        actor = actor_mlp(obs_dim, sizes, self.actor_outputs(), model_config.activation)
        critic = StackedMLP(
            self.num_critics,
            obs_dim + self.num_actions,
            sizes,
            self.critic_outputs(),
            model_config.activation,
        )
        return ActorCritics(actor, critic, self.initial_log_alpha())

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor, which: str = "online") -> torch.Tensor:
        """``[num_critics, B]`` Q-values of ``actions`` (in ``[-1, 1]``): ``online``, ``frozen`` (the
        online weights without gradient to them) or ``target``."""
        inputs = torch.cat([obs, actions], dim=-1)
        if which == "target":
            return self.target_model["critic"](inputs).squeeze(-1)
        params = self.frozen_critic if which == "frozen" else None
        return self.model.critic(inputs, params).squeeze(-1)

    def scaled_actions(self, env_actions: torch.Tensor) -> torch.Tensor:
        """Env actions (within the Box) mapped to the actor's ``[-1, 1]``."""
        return (env_actions.to(torch.float32) - self._low_t) / self._half_range_t - 1.0

    # --- acting -------------------------------------------------------------------------------
    def exploration(self, squashed: np.ndarray, timestep: TimeStep) -> np.ndarray:
        """Exploring actions in ``[-1, 1]`` from the actor's ``squashed`` output (SAC: already sampled)."""
        return squashed

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """Box actions: uniform before ``learning_starts`` env steps (as Stable-Baselines3), else the
        actor's (exploring, or greedy ``tanh(mean)``) rescaled from ``[-1, 1]`` to the bounds."""
        twin = self.actor_twin
        if twin.version != self.weights_version:
            twin.load(self.get_weights(), self.weights_version)
        obs = self.flat_observations(timestep.observation)
        if explore and self.global_timestep < self.config.training.learning_starts:
            squashed = self.acting_rng.uniform(-1.0, 1.0, (obs.shape[0], self.num_actions))
        else:
            squashed = twin.act(obs, explore)
            if explore:
                squashed = self.exploration(squashed, timestep)
        actions = self.action_low + (squashed + 1.0) * self.action_half_range
        return actions.astype(np.float32, copy=False), state, {}

    def export_head(self, explore: bool) -> SquashedActorHead:
        """The acting part of an exported graph: the actor, squashed and rescaled to the bounds. Only a
        Gaussian actor (SAC) samples; TD3's and DDPG's exploration noise is the trainer's, not the
        actor's, so their ``--explore`` is refused."""
        if explore and not self.gaussian_actor:
            raise explore_refused(
                f"{self.config.algorithm}'s exploration noise is added outside its actor "
                "(training.exploration_noise), so an exported graph cannot carry it"
            )
        return SquashedActorHead(
            self.model.actor, self.action_space, self.gaussian_actor, explore, LOG_STD_MIN, LOG_STD_MAX
        )

    def flat_observations(self, observations: Any) -> np.ndarray:
        return self.preprocess(observations).numpy()  # preprocess makes CPU tensors

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """``tanh(mean)`` rescaled to the bounds, through the framework (for tests against the twin)."""
        with torch.no_grad():
            obs = self.to_device_tensor(self.preprocess(observations), pin=False)
            out = self.model.actor(obs)[:, : self.num_actions]
            return (self._low_t + (torch.tanh(out) + 1.0) * self._half_range_t).cpu().numpy()

    # --- learning -----------------------------------------------------------------------------
    def host_tensors(self, batch: SampleBatch, columns) -> dict[str, torch.Tensor]:
        tensors = super().host_tensors(batch, [c for c in columns if c != NEXT_OBS])
        if NEXT_OBS in columns and NEXT_OBS in batch:  # flattened (one-hot) like obs
            tensors[NEXT_OBS] = self.preprocess(batch[NEXT_OBS])
        return tensors

    def update_actor_now(self) -> bool:
        """Whether this gradient step updates the actor and the targets (TD3 delays them)."""
        return True

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One gradient step on the replayed minibatch, then the Polyak update of the targets.

        With data-parallel learners each takes its shard of the minibatch's rows; the gradients,
        loss and stats are all-reduced and :attr:`td_errors` gathered, so every learner steps as
        one learner on the whole minibatch would (the noise too: each draws the whole minibatch's
        and keeps its rows', :meth:`sample_noise`).
        """
        training = self.config.training
        self.optimizer.lr = lr = self._current_lr()
        group = self.data_parallel
        rows, share = self.data_parallel_shard({}, np.arange(len(batch)))
        shard = batch if group is None else batch.select(rows)
        tensors = self.to_tensors(shard, self.learner_columns(self.loss_columns))
        update_actor = self.update_actor_now()
        self._noise_rows = None if group is None else (rows, len(batch))
        if group is not None and group.own is not None:  # own rows: rows offset.. of the union's noise
            offset, count, total = group.own
            self._noise_rows = (np.arange(offset, offset + count), total)
        try:
            with contextlib.nullcontext() if group is None else group.active():
                loss, stats, td_errors = self.loss(tensors, update_actor)
        finally:
            self._noise_rows = None
        self.optimizer.zero_grad()
        loss.backward()
        if group is None:
            self.td_errors = td_errors.detach().cpu().numpy()
        elif group.own is not None:  # own rows: their TD errors are this learner's alone
            loss, stats = group.all_reduce_step(self.optimizer.params, loss, stats, share)
            self.td_errors = td_errors.detach().cpu().numpy()
        else:
            loss, stats = group.all_reduce_step(self.optimizer.params, loss, stats, share)
            full = np.zeros(len(batch), dtype=np.float32)
            if share > 0:  # a learner with an empty shard ran the loss on borrowed rows: they don't count
                full[rows] = td_errors.detach().cpu().numpy()
            self.td_errors = group.all_reduce_numpy(full)
        grad_norm = clip_gradients(self.optimizer.params, training.grad_clip)
        if not bool(torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)):
            self.optimizer.zero_grad()  # skipped: weights and optimizer state stay as they were
            self.nonfinite.record(
                False,
                training.max_nonfinite_updates,
                f" (last: loss {float(loss.detach()):g}, gradient norm {float(grad_norm):g})",
            )
            self.td_errors = np.full(len(batch), np.nan, dtype=np.float32)
        else:
            self.nonfinite.record(True, training.max_nonfinite_updates)
            self.optimizer.step()
            self.num_grad_updates += 1
            self.weights_version += 1
            if update_actor:
                self.update_target(training.tau)
        out = {key: float(value) for key, value in stats.items()}
        out.update(
            total_loss=float(loss.detach()),
            grad_gnorm=float(grad_norm),
            cur_lr=lr,
            num_grad_updates=float(self.num_grad_updates),
            num_nonfinite_updates=float(self.nonfinite.total),
        )
        return out

    def compute_td_errors(self, batch: SampleBatch) -> np.ndarray:
        """``|TD error|`` per row of ``batch`` (mean over the critics) under the current networks,
        without learning: Ape-X's initial priorities, computed by the rollout worker (Horgan et al.
        2018). The critic part of :meth:`loss`, run without gradients."""
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        with torch.no_grad():
            _, _, td_errors = self.loss(tensors, False)
        return td_errors.cpu().numpy().astype(np.float32)

    def critic_loss(
        self, q_taken: torch.Tensor, targets: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``0.5 x sum over critics of mean((Q_k - target)^2)`` (rows weighted by prioritized replay's
        importance weights), and ``|TD error|`` per row, averaged over the critics."""
        td = q_taken - targets  # [K, B]
        per_row = 0.5 * td.square().sum(dim=0)
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * batch[WEIGHTS].to(per_row.dtype)
        return per_row.mean(), td.detach().abs().mean(dim=0)

    def sample_noise(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Standard normal noise of ``shape`` (rows first) from the learner's generator, on
        :attr:`device`. Drawn on the CPU whatever the device: the same numbers on every device for a
        seed, and a generator state that checkpoints the same way. A data-parallel learner draws the
        whole minibatch's rows and keeps its shard's, so the update matches one learner's."""
        shard = getattr(self, "_noise_rows", None)
        if shard is None:
            noise = torch.randn(shape, generator=self.noise_generator)
        else:
            rows, total = shard
            noise = torch.randn((total, *shape[1:]), generator=self.noise_generator)[torch.from_numpy(rows)]
        return self.to_device_tensor(noise, pin=False)

    def on_device(self, device: torch.device) -> None:
        """The target copies, the critics' detached views and the action bounds follow the model."""
        super().on_device(device)
        self.target_model.to(device)
        self._target_pairs = (
            [p for _, p in self.target_model.named_parameters()],
            [dict(self.model.named_parameters())[name] for name, _ in self.target_model.named_parameters()],
        )
        self.frozen_critic = [p.detach() for p in self.model.critic.parameter_list()]
        self._low_t = self._low_t.to(device)
        self._half_range_t = self._half_range_t.to(device)

    # --- the target networks (TargetNetworkState's contract) -------------------------------------
    def update_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target`` for :attr:`target_parts`; ``tau=1`` copies."""
        targets, online = self._target_pairs
        if not targets:  # no target copies (CrossQ): torch's _foreach ops refuse empty lists
            return
        with torch.no_grad():
            if tau >= 1.0:
                torch._foreach_copy_(targets, online)
            else:
                torch._foreach_lerp_(targets, online, tau)

    def get_target_weights(self) -> dict[str, np.ndarray]:
        """The target copies' weights, named and laid out like :meth:`get_weights`."""
        out = {}
        for name, param in self.target_model.named_parameters():
            value = self.to_neutral_layout(name, param.detach().cpu().numpy())
            out[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        return out

    def check_target_weights(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Raise, naming the weight, if ``weights`` do not fit the target copies; returns them in torch
        layout (changes nothing)."""
        converted = {}
        for name, param in self.target_model.named_parameters():
            neutral = self._weight_names[name]
            if neutral not in weights:
                raise ValueError(f"target weights are missing '{neutral}'")
            value = np.asarray(weights[neutral])
            expected = self.to_neutral_layout(name, np.broadcast_to(np.float32(0), tuple(param.shape))).shape
            if value.shape != expected:
                raise ValueError(f"target weight '{neutral}' has shape {value.shape}, expected {expected}")
            converted[name] = self.to_neutral_layout(name, value)  # the transpose is its own inverse
        return converted

    def set_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        converted = self.check_target_weights(weights)
        with torch.no_grad():
            for name, param in self.target_model.named_parameters():
                param.copy_(torch.from_numpy(np.ascontiguousarray(converted[name], dtype=np.float32)))

    # --- checkpoints: the learner's noise generator rides with the policy state -------------------
    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.arrays["noise_generator"] = self.noise_generator.get_state().numpy().copy()
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if "noise_generator" in state.arrays:
            self.noise_generator.set_state(torch.from_numpy(np.array(state.arrays["noise_generator"])))

    def reseed(self, seed: int) -> None:
        super().reseed(seed)  # a new acting_rng among them: the twin draws from it
        self.actor_twin.rng = self.acting_rng
        self.noise_generator.manual_seed(int(np.random.SeedSequence([seed, 2]).generate_state(1)[0]))
