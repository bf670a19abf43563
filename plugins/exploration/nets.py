"""The framework-free part of exploration modules built from small MLPs (``rnd``, ``icm``).

Why the parameters live in numpy: the sampling side needs the intrinsic rewards (and in value
mode the intrinsic values) of every fragment, on every rollout worker; a numpy forward pass of a
few small MLPs costs less than a framework call per fragment (the same reason the policies act
through numpy twins, :mod:`rlgear.blocks.inference`). A backend subclass computes the loss and its
gradients (:meth:`NumpyNetsModule.loss_and_gradients`: torch autograd, ``tf.GradientTape``) and
the update is one Adam step here in float32, identical on both backends, so a checkpoint written
under one continues identically under the other. The networks learn on the CPU.

A subclass lists its networks (:meth:`NumpyNetsModule.network_specs`); this class builds them
(orthogonal kernels as CleanRL's ``layer_init``, zero biases), keeps the running statistics
(observation normalization, the intrinsic-return std the rewards are divided by), applies Adam and
round-trips weights and state with every name and shape checked before anything changes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from rlgear import exploration as xp
from rlgear.policy import PolicyState, flatten_observations
from rlgear.spaces import Space, flat_dim

ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8
#: The value head of value mode (ppo, a2c): its name is shared by every module that has one.
INTRINSIC_VALUE = "intrinsic_value"


class NetSpec(NamedTuple):
    """One MLP: its name (the weight-name prefix), input and output sizes, hidden layers (ReLU), the
    gain of its output kernel, and whether Adam trains it."""

    name: str
    inputs: int
    hidden: list[int]
    outputs: int
    output_gain: float = 1.0
    trainable: bool = True


def layer_names(network: str, num_hidden: int) -> list[str]:
    return [f"{network}/hidden_{i}" for i in range(num_hidden)] + [f"{network}/output"]


def orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """An orthogonal ``[rows, cols]`` kernel scaled by ``gain`` (Saxe et al. 2014; CleanRL's ``layer_init``)."""
    flat = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    kernel = q if rows >= cols else q.T
    return np.ascontiguousarray(gain * kernel[:rows, :cols], dtype=np.float32)


def mlp_forward(params: dict[str, np.ndarray], network: str, num_hidden: int, x: np.ndarray) -> np.ndarray:
    """ReLU MLP forward pass in numpy (float32)."""
    for name in layer_names(network, num_hidden)[:-1]:
        x = np.maximum(x @ params[f"{name}/kernel"] + params[f"{name}/bias"], 0.0)
    out = f"{network}/output"
    return x @ params[f"{out}/kernel"] + params[f"{out}/bias"]


class NumpyNetsModule(xp.ExplorationModule):
    """MLPs in numpy, running statistics, Adam, weights and state; see the module docstring.

    ``options`` needs ``lr``, ``obs_clip``, ``num_epochs`` and ``minibatch_size``."""

    def __init__(self, observation_space: Space, action_space: Space, options: Any, seed: int | None):
        super().__init__(observation_space, action_space, options, seed)
        self.obs_dim = int(flat_dim(observation_space))
        self.rng = np.random.default_rng(seed)  # minibatch order (and any sampling a subclass does)
        init = np.random.default_rng([0 if seed is None else int(seed), 7])
        self.specs = {spec.name: spec for spec in self.network_specs()}
        self.params: dict[str, np.ndarray] = {}
        for spec in self.specs.values():
            sizes = [spec.inputs, *spec.hidden, spec.outputs]
            names = layer_names(spec.name, len(spec.hidden))
            for i, name in enumerate(names):
                gain = np.sqrt(2.0) if i < len(names) - 1 else spec.output_gain
                self.params[f"{name}/kernel"] = orthogonal(init, sizes[i], sizes[i + 1], gain)
                self.params[f"{name}/bias"] = np.zeros(sizes[i + 1], np.float32)
        #: what Adam trains
        self.trainable = [k for k in self.params if self.specs[k.split("/", 1)[0]].trainable]
        self.adam_m = {k: np.zeros_like(self.params[k]) for k in self.trainable}
        self.adam_v = {k: np.zeros_like(self.params[k]) for k in self.trainable}
        self.adam_step = 0
        self.obs_rms = xp.RunningMeanStd((self.obs_dim,))
        self.reward_rms = xp.RunningMeanStd(())

    # --- what a subclass provides ---------------------------------------------------------------
    @abstractmethod
    def network_specs(self) -> list[NetSpec]:
        """The networks, in the order their parameters are initialised."""

    @abstractmethod
    def loss_and_gradients(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]
    ) -> tuple[float, dict[str, float], dict[str, np.ndarray]]:
        """``(loss, stats, {trainable name: gradient})`` on one minibatch of ``inputs`` (the backend's part)."""

    # --- acting side ----------------------------------------------------------------------------
    def flat(self, obs: np.ndarray) -> np.ndarray:
        return flatten_observations(self.observation_space, obs)

    def normalized(self, obs: np.ndarray) -> np.ndarray:
        """Observations normalized by the running mean and std, clipped to ``[-obs_clip, obs_clip]``."""
        clip = self.options.obs_clip
        std = np.sqrt(self.obs_rms.var).astype(np.float32)
        x = (self.flat(obs) - self.obs_rms.mean.astype(np.float32)) / np.maximum(std, 1e-8)
        return np.clip(x, -clip, clip).astype(np.float32)

    def forward(self, network: str, num_hidden: int, x: np.ndarray) -> np.ndarray:
        """``network``'s outputs for ``x`` (float32 numpy). A backend may run it in its framework:
        torch does, whose single intra-op thread (``TorchBackend.setup``) does not collapse on a
        busy machine as a multi-threaded BLAS under numpy can."""
        return mlp_forward(self.params, network, num_hidden, x)

    def run(self, network: str, x: np.ndarray) -> np.ndarray:
        return self.forward(network, len(self.specs[network].hidden), x)

    def reward_scale(self) -> float:
        return float(max(np.sqrt(self.reward_rms.var), 1e-8))

    def intrinsic_values(self, obs: np.ndarray) -> np.ndarray:
        return self.run(INTRINSIC_VALUE, self.flat(obs))[:, 0].astype(np.float32)

    # --- learning -------------------------------------------------------------------------------
    def minibatches(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        """``num_epochs`` shuffled passes of ``minibatch_size`` rows (all rows when there are fewer)."""
        num_rows = len(next(iter(inputs.values())))
        size = min(num_rows, self.options.minibatch_size)
        for _ in range(self.options.num_epochs):
            order = self.rng.permutation(num_rows)
            for start in range(0, num_rows - size + 1, size):
                picked = order[start : start + size]
                yield {k: v[picked] for k, v in inputs.items()}

    def train_on(self, batches: Iterator[dict[str, np.ndarray]]) -> dict[str, float]:
        """One Adam step per minibatch; the mean of the losses and stats."""
        totals: dict[str, float] = {}
        count = 0
        for batch in batches:
            loss, stats, grads = self.loss_and_gradients(self.params, batch)
            self.apply_adam(grads)
            for key, value in {"loss": loss, **stats}.items():
                totals[key] = totals.get(key, 0.0) + float(value)
            count += 1
        return {key: value / max(count, 1) for key, value in totals.items()}

    def apply_adam(self, grads: dict[str, np.ndarray]) -> None:
        """One Adam step (Kingma and Ba 2015, bias-corrected), float32, on the trainable parameters."""
        beta1, beta2 = ADAM_BETAS
        self.adam_step += 1
        lr = self.options.lr
        correction1 = 1.0 - beta1**self.adam_step
        correction2 = 1.0 - beta2**self.adam_step
        for name in self.trainable:
            grad = np.asarray(grads[name], np.float32)
            self.adam_m[name] = beta1 * self.adam_m[name] + (1 - beta1) * grad
            self.adam_v[name] = beta2 * self.adam_v[name] + (1 - beta2) * grad * grad
            step = (
                lr
                * (self.adam_m[name] / correction1)
                / (np.sqrt(self.adam_v[name] / correction2) + ADAM_EPSILON)
            )
            self.params[name] = (self.params[name] - step).astype(np.float32)

    # --- weights and state ----------------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        weights = {k: v.copy() for k, v in self.params.items()}
        weights.update(self.obs_rms.get("obs_rms"))
        weights.update(self.reward_rms.get("reward_rms"))
        return weights

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        for name, value in self.params.items():  # every check first: a bad dict changes nothing
            if name not in weights:
                raise ValueError(f"exploration weights are missing '{name}'; they do not fit this module")
            if np.shape(weights[name]) != value.shape:
                raise ValueError(
                    f"exploration weight '{name}' has shape {np.shape(weights[name])}, expected {value.shape}"
                )
        self.obs_rms.check(weights, "obs_rms")
        self.reward_rms.check(weights, "reward_rms")
        self.params = {name: np.array(weights[name], np.float32) for name in self.params}
        self.obs_rms.set(weights, "obs_rms")
        self.reward_rms.set(weights, "reward_rms")

    def get_state(self) -> PolicyState:
        arrays = {f"adam/m/{k}": v.copy() for k, v in self.adam_m.items()}
        arrays.update({f"adam/v/{k}": v.copy() for k, v in self.adam_v.items()})
        meta = {"adam_step": self.adam_step, "rng": self.rng.bit_generator.state}
        return PolicyState(arrays=arrays, meta=meta)

    def set_state(self, state: PolicyState) -> None:
        for kind, slots in (("m", self.adam_m), ("v", self.adam_v)):
            for name, value in slots.items():
                key = f"adam/{kind}/{name}"
                if key not in state.arrays or np.shape(state.arrays[key]) != value.shape:
                    raise ValueError(f"exploration state lacks '{key}' of shape {value.shape}")
        self.adam_m = {k: np.array(state.arrays[f"adam/m/{k}"], np.float32) for k in self.adam_m}
        self.adam_v = {k: np.array(state.arrays[f"adam/v/{k}"], np.float32) for k in self.adam_v}
        self.adam_step = int(state.meta.get("adam_step", 0))
        if "rng" in state.meta:
            self.rng.bit_generator.state = state.meta["rng"]
