"""TorchPolicy: the base class of every algorithm's torch policy.

It owns the model, the optimizer and the minibatch SGD loop; a subclass
supplies only ``loss()``. Weights leave as numpy under framework-neutral names
(kernels transposed to ``[in, out]``), so they load into any backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np
import torch

from rlgear.blocks.inference import POLICY_HEAD, NumpyActorCritic, fill_action_logp
from rlgear.blocks.lstm_inference import NumpyLSTMActorCritic
from rlgear.blocks.schedules import piecewise_linear
from rlgear.config.conv import conv_layers
from rlgear.plugins.backends.torch.distributions import distribution_class
from rlgear.plugins.backends.torch.models import (
    ActorCriticMLP,
    build_model,
    from_neutral_kernel,
    to_neutral_kernel,
)
from rlgear.plugins.backends.torch.optimizers import make_optimizer
from rlgear.policy import Policy, PolicyState, all_finite, flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete, MultiDiscrete, Space
from rlgear.timestep import TimeStep


def clip_gradients(params: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """The global L2 norm of the gradients; above ``max_norm``, scale them down to it.

    The rule of ``torch.nn.utils.clip_grad_norm_`` (scale by ``min(1, max_norm / (norm + 1e-6))``)
    in three foreach kernels: on small networks its per-call Python bookkeeping cost about as much
    as the arithmetic, once per minibatch.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


class TorchPolicy(Policy):
    """Actor-critic acting + minibatch SGD on ``loss()``.

    Subclasses set ``loss_columns`` (the batch columns ``loss`` reads) and
    implement ``loss(batch) -> (loss, stats)``. The SGD loop reads
    ``training.num_sgd_iter`` (epochs, default 1) and
    ``training.sgd_minibatch_size`` (default: the whole batch) when the
    algorithm's config has them, and ``training.grad_clip``.
    """

    loss_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS, SampleBatch.ACTIONS)
    #: True when every batch row is already a whole sequence ``[N, T, ...]`` (IMPALA), not a row of
    #: padded ``max_seq_len`` sequences: minibatches then pick rows as for a feed-forward policy.
    rows_are_sequences: ClassVar[bool] = False

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.dist_class = distribution_class(action_space)  # TypeError for a space it cannot act in
        self.num_outputs = self.dist_class.required_inputs(action_space)
        self.recurrent = bool(getattr(config.model, "lstm", False))
        self.max_seq_len = int(config.model.max_seq_len) if self.recurrent else 0
        self.model = self.make_model()
        self._weight_names = self._neutral_names()
        training = config.training
        self.optimizer = make_optimizer(
            training.optimizer,
            self.model.parameters(),
            self._current_lr(),
            training.optimizer_epsilon,
            training.optimizer_kwargs,
            getattr(config, "fail", None),
        )
        self.rng = np.random.default_rng(config.seed)
        self.num_grad_updates = 0
        # Bumped whenever the weights change, so the numpy twin knows when to refresh.
        self.weights_version = 0
        self.fast_actor = self._make_fast_actor()
        self._action_dtype = np.int64 if isinstance(action_space, Discrete | MultiDiscrete) else np.float32

    def make_model(self) -> torch.nn.Module:
        """The network (override for another architecture): the catalog MLP or ``model.custom``."""
        return build_model(self.observation_space, self.action_space, self.num_outputs, self.config.model)

    # --- acting -------------------------------------------------------------
    def _make_fast_actor(self) -> NumpyActorCritic | None:
        model_config = self.config.model
        seed = None if self.config.seed is None else self.config.seed + 1
        twin_acts = isinstance(self.action_space, Discrete | Box)  # composite actions act in the framework
        if self.recurrent:
            return (
                NumpyLSTMActorCritic(
                    self.action_space, model_config, seed, conv_layers(self.observation_space, model_config)
                )
                if model_config.numpy_inference and twin_acts
                else None
            )
        if not (model_config.numpy_inference and isinstance(self.model, ActorCriticMLP) and twin_acts):
            return None
        conv = None if self.model.encoder is None else conv_layers(self.observation_space, model_config)
        return NumpyActorCritic(
            self.action_space, len(model_config.hidden_sizes), model_config.activation,
            bool(model_config.vf_share_layers), seed, conv,
        )  # fmt: skip

    def preprocess(self, observations: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(flatten_observations(self.observation_space, observations))

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        if not self.recurrent:
            return []
        cell = int(self.config.model.lstm_cell_size)
        return [np.zeros((batch_size, cell), np.float32), np.zeros((batch_size, cell), np.float32)]

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        """``action_logp`` of the rows the numpy twin acted on (it records the policy head instead)."""
        fill_action_logp(self.fast_actor, columns)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        if self.recurrent:
            return self._compute_recurrent_actions(timestep, state, explore)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            obs = flatten_observations(self.observation_space, timestep.observation)
            actions, head, values = fast.act_deferred(obs, explore, timestep.action_mask)
            if self.defer_extras:  # the sampler: log-probabilities per fragment (finish_fragment)
                return actions, state, {POLICY_HEAD: head, SampleBatch.VF_PREDS: values}
            logp = fast.logp(head, actions, timestep.action_mask)
            return actions, state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        mask = None if timestep.action_mask is None else torch.from_numpy(timestep.action_mask)
        with torch.inference_mode():
            dist_inputs, values = self.model(self.preprocess(timestep.observation))
            dist = self.dist_class(dist_inputs, mask)
            actions = dist.sample() if explore else dist.deterministic_sample()
            extras = {SampleBatch.ACTION_LOGP: dist.logp(actions).numpy()}
            if values is not None:
                extras[SampleBatch.VF_PREDS] = values.numpy()
        return actions.numpy().astype(self._action_dtype, copy=False), state, extras

    def _compute_recurrent_actions(
        self, timestep: TimeStep, state: list[np.ndarray] | None, explore: bool
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        n = np.shape(timestep.step_type)[0]
        if state is None:
            state = self.get_initial_state(n)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            obs = flatten_observations(self.observation_space, timestep.observation)
            actions, logp, values, new_state = fast.act(
                obs, state, explore, timestep.prev_action, timestep.reward, timestep.action_mask
            )
            return actions, new_state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        with torch.inference_mode():
            dist_inputs, values, new_state = self.recurrent_step(timestep, state)
            mask = timestep.action_mask
            dist = self.dist_class(dist_inputs, None if mask is None else torch.from_numpy(mask))
            actions = dist.sample() if explore else dist.deterministic_sample()
            extras = {
                SampleBatch.ACTION_LOGP: dist.logp(actions).numpy(),
                SampleBatch.VF_PREDS: values.numpy(),
            }
        return actions.numpy().astype(self._action_dtype, copy=False), [s.numpy() for s in new_state], extras

    def recurrent_step(
        self, timestep: TimeStep, state: list[np.ndarray]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """One step of the framework's LSTM model: ``(dist_inputs, values, new_state)`` (for acting and
        for tests comparing backends and the numpy twin); no gradient is recorded."""
        with torch.no_grad():
            return self.model(
                self.preprocess(timestep.observation),
                [torch.from_numpy(np.asarray(s, np.float32)) for s in state],
                torch.from_numpy(np.asarray(timestep.prev_action)),
                torch.from_numpy(np.asarray(timestep.reward, np.float32)),
                1,
            )

    def action_distribution_inputs(self, observations: np.ndarray) -> np.ndarray:
        """Logits (Discrete) or means and log stds (Box): for tests and cross-backend parity."""
        if self.recurrent:
            raise TypeError(
                "a recurrent policy's outputs depend on its state: use recurrent_step(timestep, state)"
            )
        with torch.inference_mode():
            dist_inputs, _ = self.model(self.preprocess(observations))
        return dist_inputs.numpy()

    # --- learning -----------------------------------------------------------
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The algorithm's loss on one minibatch of tensors; returns (loss, stats)."""
        raise TypeError(f"{type(self).__name__} must implement loss()")

    def action_distribution(self, dist_inputs: torch.Tensor, batch: dict[str, torch.Tensor]) -> Any:
        """The action distribution of ``dist_inputs``, masked by the batch's ``action_mask`` column
        when the env has masks (each row's mask is the one its action was chosen under)."""
        return self.dist_class(dist_inputs, batch.get(SampleBatch.ACTION_MASK))

    def model_outputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dist_inputs, values)`` for the rows of a minibatch, from the model in use.

        A recurrent model runs over the batch's padded sequences (``max_seq_len`` rows
        each) from the state-in of each sequence's first row; losses then weigh rows
        by ``batch["seq_mask"]`` (see :func:`masked_mean`).
        """
        if not self.recurrent:
            return self.model(batch[SampleBatch.OBS])
        length = self.max_seq_len
        dist_inputs, values, _ = self.model(
            batch[SampleBatch.OBS],
            [batch[SampleBatch.state_in(k)][::length] for k in range(2)],
            batch.get(SampleBatch.PREV_ACTIONS),
            batch.get(SampleBatch.REWARDS),
            length,
        )
        return dist_inputs, values

    def _current_lr(self) -> float:
        training = self.config.training
        if training.lr_schedule:
            return piecewise_linear(training.lr_schedule, self.global_timestep)
        return float(training.lr)

    def to_tensors(self, batch: SampleBatch, columns: Iterable[str]) -> dict[str, torch.Tensor]:
        tensors = {}
        for key in columns:
            if key not in batch:
                continue
            value = batch[key]
            if key == SampleBatch.OBS:
                tensors[key] = self.preprocess(value)
            else:
                tensors[key] = torch.from_numpy(np.ascontiguousarray(value))
        return tensors

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        training = self.config.training
        lr = self._current_lr()
        self.optimizer.lr = lr
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        n = len(batch)
        epochs = int(getattr(training, "num_sgd_iter", 1))
        minibatch = int(getattr(training, "sgd_minibatch_size", 0) or n)
        # Recurrent: shuffle whole sequences; a minibatch holds round(size / max_seq_len) of them (>= 1).
        padded = self.recurrent and not self.rows_are_sequences
        length = self.max_seq_len if padded else 1
        units = n // length
        per_minibatch = max(1, round(minibatch / length)) if padded else minibatch
        within = torch.arange(length)
        # Stats stay tensors until the end: one stack per stat, not a small op per stat per step.
        history: dict[str, list[torch.Tensor]] = {}
        params = self.optimizer.params
        for _ in range(epochs):
            order = torch.from_numpy(self.rng.permutation(units))
            for start in range(0, units, per_minibatch):
                idx = order[start : start + per_minibatch]
                if padded:
                    idx = (idx[:, None] * length + within).reshape(-1)
                loss, stats = self.loss({k: v[idx] for k, v in tensors.items()})
                self.optimizer.zero_grad()
                loss.backward()
                grad_norm = clip_gradients(params, training.grad_clip)
                # One check per step: the norm is NaN or infinite whenever any gradient is.
                if not bool(torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)):
                    self.optimizer.zero_grad()  # skipped: weights and optimizer state stay as they were
                    self.nonfinite.record(
                        False,
                        training.max_nonfinite_updates,
                        f" (last: loss {float(loss.detach()):g}, gradient norm {float(grad_norm):g})",
                    )
                    continue
                self.nonfinite.record(True, training.max_nonfinite_updates)
                self.optimizer.step()
                self.num_grad_updates += 1
                self.weights_version += 1
                stats = {**stats, "total_loss": loss.detach(), "grad_gnorm": grad_norm}
                for key, value in stats.items():
                    history.setdefault(key, []).append(value)
        out = {key: float(torch.stack(values).mean()) for key, values in history.items()}
        out["cur_lr"] = lr
        out["num_grad_updates"] = float(self.num_grad_updates)
        out["num_nonfinite_updates"] = float(self.nonfinite.total)
        return out

    # --- asynchronous gradients (A3C): computed on a worker, applied by the learner ---
    def compute_gradients(self, batch: SampleBatch) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Gradients of ``loss()`` on the whole batch, without changing the weights.

        Returned as numpy under the framework-neutral names and layout of
        :meth:`get_weights` (kernels ``[in, out]``), so they cross processes
        and backends like weights do. Not clipped: :meth:`apply_gradients`
        clips with ``training.grad_clip``, where the learner applies them. A
        parameter the loss does not reach gets a zero gradient.
        """
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        loss, stats = self.loss(tensors)
        self.optimizer.zero_grad()
        loss.backward()
        grads: dict[str, np.ndarray] = {}
        norms = []
        for name, param in self.model.named_parameters():
            # A parameter the loss does not reach (pg's value head without a baseline)
            # gets a zero gradient: apply_gradients expects every weight, as on TF.
            value = torch.zeros_like(param) if param.grad is None else param.grad.detach()
            norms.append(value.norm())
            value = self.to_neutral_layout(name, value.numpy())
            grads[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        self.optimizer.zero_grad()
        out = {key: float(value) for key, value in stats.items()}
        out["total_loss"] = float(loss.detach())
        out["grad_gnorm"] = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        return grads, out

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> None:
        """One optimizer step with ``grads`` from :meth:`compute_gradients` (clipped per ``grad_clip``).

        Every parameter's gradient must be present with the weight's shape;
        the check runs before anything changes.
        """
        converted = self._torch_layout(grads)  # names and shapes checked first
        finite = all_finite(grads)
        self.nonfinite.record(
            finite, self.config.training.max_nonfinite_updates, " (gradients from a worker)"
        )
        if not finite:
            return
        self.optimizer.lr = self._current_lr()
        self.optimizer.zero_grad()
        for name, param in self.model.named_parameters():
            param.grad = torch.from_numpy(
                np.array(converted[name], dtype=np.float32, order="C")
            )  # a copy: may be read-only
        grad_clip = self.config.training.grad_clip
        if grad_clip is not None:
            clip_gradients(self.optimizer.params, grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.num_grad_updates += 1
        self.weights_version += 1

    # --- weights and state --------------------------------------------------
    def _neutral_names(self) -> dict[str, str]:
        names = self.model.weight_names() if hasattr(self.model, "weight_names") else {}
        return {name: names.get(name, name) for name, _ in self.model.named_parameters()}

    def get_weights(self) -> dict[str, np.ndarray]:
        out = {}
        for name, param in self.model.named_parameters():
            value = self.to_neutral_layout(name, param.detach().numpy())
            out[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        return out

    def _is_kernel(self, name: str) -> bool:
        return name.endswith("weight") and self._weight_names[name].endswith("kernel")

    def to_neutral_layout(self, name: str, value: np.ndarray) -> np.ndarray:
        """Parameter ``name``'s array in the neutral layout: dense kernels ``[in, out]`` (torch stores
        ``[out, in]``), conv kernels ``[kh, kw, in, out]`` (torch: ``[out, in, kh, kw]``); others as is."""
        if self._is_kernel(name) and value.ndim in (2, 4):
            return to_neutral_kernel(value)
        return value

    def _torch_layout(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check every weight against the model (neutral layout), then convert; nothing is changed here."""
        missing = [n for n in self._weight_names.values() if n not in weights]
        if missing:
            raise ValueError(f"weights are missing {missing}; they do not fit this model")
        out = {}
        for name, param in self.model.named_parameters():
            neutral = self._weight_names[name]
            value = np.asarray(weights[neutral])
            # a zero-copy view of the parameter's shape, laid out as the neutral dict holds it
            expected = self.to_neutral_layout(name, np.broadcast_to(np.float32(0), tuple(param.shape))).shape
            if tuple(value.shape) != expected:
                raise ValueError(
                    f"weight '{neutral}' has shape {tuple(value.shape)}, the model expects {expected}"
                )
            out[name] = (
                from_neutral_kernel(value) if self._is_kernel(name) and value.ndim in (2, 4) else value
            )
        return out

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        converted = self._torch_layout(weights)  # all checks first: a bad dict changes nothing
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                param.copy_(torch.from_numpy(np.ascontiguousarray(converted[name], dtype=np.float32)))
        self.weights_version += 1

    def get_state(self) -> PolicyState:
        arrays = {f"weights/{k}": v for k, v in self.get_weights().items()}
        for key, value in self.optimizer.state_arrays().items():
            arrays[f"optimizer/{key}"] = value.detach().numpy().copy()
        meta = {
            "optimizer": self.optimizer.state_meta(),
            "global_timestep": self.global_timestep,
            "num_grad_updates": self.num_grad_updates,
            "num_nonfinite_updates": self.nonfinite.total,
            "rng": self.rng.bit_generator.state,
        }
        if self.fast_actor is not None:
            meta["twin_rng"] = self.fast_actor.rng_state()  # "acting_rng" is the target-network mixin's
        return PolicyState(arrays=arrays, meta=meta)

    def set_state(self, state: PolicyState) -> None:
        weights = {k.removeprefix("weights/"): v for k, v in state.arrays.items() if k.startswith("weights/")}
        self._torch_layout(weights)  # check before changing anything
        optimizer_meta = state.meta.get("optimizer")
        if optimizer_meta is not None and optimizer_meta.get("type") != self.optimizer.type_name:
            raise ValueError(
                f"optimizer state of {optimizer_meta.get('type')}, this policy uses {self.optimizer.type_name}"
            )
        self.set_weights(weights)
        if "optimizer" in state.meta:
            arrays = {
                k.removeprefix("optimizer/"): torch.from_numpy(np.array(v))
                for k, v in state.arrays.items()
                if k.startswith("optimizer/")
            }
            self.optimizer.load_state(arrays, state.meta["optimizer"])
        self.global_timestep = int(state.meta.get("global_timestep", 0))
        self.num_grad_updates = int(state.meta.get("num_grad_updates", 0))
        self.nonfinite.total = int(state.meta.get("num_nonfinite_updates", 0))
        if "rng" in state.meta:
            self.rng.bit_generator.state = state.meta["rng"]
        if self.fast_actor is not None:  # checkpoints before "twin_rng" kept it as "acting_rng"
            saved = state.meta.get("twin_rng", state.meta.get("acting_rng"))
            if saved is not None:
                self.fast_actor.set_rng_state(saved)
