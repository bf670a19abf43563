"""RND's framework-free part: parameters, running statistics, acting-side forward passes, Adam.

Why the parameters live in numpy: the sampling side needs the intrinsic rewards (and in value
mode the intrinsic values) of every fragment, on every rollout worker; a numpy forward pass of
three small MLPs costs less than a framework call per fragment (the same reason the policies act
through numpy twins, :mod:`rlgear.blocks.inference`). The backends compute the loss and its
gradients (:meth:`RNDModuleBase.loss_and_gradients`: torch autograd, ``tf.GradientTape``) and
the update is one Adam step here in float32, identical on both backends, so a checkpoint written
under one continues identically under the other. The networks are small MLPs: they learn on the
CPU (``to_device`` keeps them there).

The math (Burda et al. 2018, "Exploration by Random Network Distillation"; defaults as CleanRL's
``ppo_rnd_envpool.py``):

- ``x = clip((next_obs - mean) / sqrt(var), -obs_clip, obs_clip)``, the running mean and variance
  of the observations (:class:`~rlgear.exploration.RunningMeanStd`, updated on the learner);
- intrinsic reward ``0.5 * sum_k (predictor(x)_k - target(x)_k)^2`` (the SUM over features, halved,
  as CleanRL's ``ppo_rnd_envpool.py``); the sampling side divides it by the running std of the
  non-episodic discounted intrinsic return (``reward_rms``);
- predictor loss ``sum_i m_i mean_k (predictor(x_i)_k - target(x_i)_k)^2 / max(1, sum_i m_i)``
  with ``m_i ~ Bernoulli(update_proportion)`` (CleanRL's ``update_proportion``: each row trains
  the predictor with probability 0.25), the target fixed;
- intrinsic value loss ``0.5 * mean_i (V_int(obs_i) - target_i)^2`` (value mode only).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear import exploration as xp
from rlgear.policy import PolicyState, flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Space, flat_dim

#: The three networks, in the order their parameters are listed.
NETWORKS = ("predictor", "target", "intrinsic_value")
ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8


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


class RNDModuleBase(xp.ExplorationModule):
    """RND's networks; a backend subclass implements :meth:`loss_and_gradients`."""

    def __init__(self, observation_space: Space, action_space: Space, options: Any, seed: int | None):
        super().__init__(observation_space, action_space, options, seed)
        self.obs_dim = int(flat_dim(observation_space))
        self.rng = np.random.default_rng(seed)  # predictor-update masks and minibatch order
        init = np.random.default_rng([0 if seed is None else int(seed), 7])
        self.hidden = {
            "predictor": list(options.hidden_sizes),
            "target": list(options.hidden_sizes),
            "intrinsic_value": list(options.value_hidden_sizes),
        }
        outputs = {"predictor": options.output_dim, "target": options.output_dim, "intrinsic_value": 1}
        self.params: dict[str, np.ndarray] = {}
        for network in NETWORKS:
            sizes = [self.obs_dim, *self.hidden[network], outputs[network]]
            names = layer_names(network, len(self.hidden[network]))
            for i, name in enumerate(names):
                gain = np.sqrt(2.0) if i < len(names) - 1 else (0.01 if network == "intrinsic_value" else 1.0)
                self.params[f"{name}/kernel"] = orthogonal(init, sizes[i], sizes[i + 1], gain)
                self.params[f"{name}/bias"] = np.zeros(sizes[i + 1], np.float32)
        #: what Adam trains (the target network stays as initialised)
        self.trainable = [k for k in self.params if not k.startswith("target/")]
        self.adam_m = {k: np.zeros_like(self.params[k]) for k in self.trainable}
        self.adam_v = {k: np.zeros_like(self.params[k]) for k in self.trainable}
        self.adam_step = 0
        self.obs_rms = xp.RunningMeanStd((self.obs_dim,))
        self.reward_rms = xp.RunningMeanStd(())

    # --- the backend's part -------------------------------------------------------------------
    def loss_and_gradients(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]
    ) -> tuple[float, dict[str, float], dict[str, np.ndarray]]:
        """``(loss, stats, {trainable name: gradient})`` of the loss in the module docstring on
        ``inputs``: ``x`` (normalized next observations ``[N, obs_dim]``), ``mask`` (``[N]``,
        0/1) and, in value mode, ``obs`` (``[N, obs_dim]``) and ``value_targets`` (``[N]``)."""
        raise NotImplementedError

    # --- acting side ----------------------------------------------------------------------------
    def flat(self, obs: np.ndarray) -> np.ndarray:
        return flatten_observations(self.observation_space, obs)

    def normalized(self, next_obs: np.ndarray) -> np.ndarray:
        clip = self.options.obs_clip
        std = np.sqrt(self.obs_rms.var).astype(np.float32)
        x = (self.flat(next_obs) - self.obs_rms.mean.astype(np.float32)) / np.maximum(std, 1e-8)
        return np.clip(x, -clip, clip).astype(np.float32)

    def forward(self, network: str, num_hidden: int, x: np.ndarray) -> np.ndarray:
        """``network``'s outputs for ``x`` (float32 numpy). A backend may run it in its framework:
        torch does, whose single intra-op thread (``TorchBackend.setup``) does not collapse on a
        busy machine as a multi-threaded BLAS under numpy can."""
        return mlp_forward(self.params, network, num_hidden, x)

    def features(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hidden = len(self.options.hidden_sizes)
        return self.forward("predictor", hidden, x), self.forward("target", hidden, x)

    def intrinsic_rewards(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        predicted, target = self.features(self.normalized(next_obs))
        return (0.5 * np.square(predicted - target).sum(axis=1)).astype(np.float32)

    def reward_scale(self) -> float:
        return float(max(np.sqrt(self.reward_rms.var), 1e-8))

    def intrinsic_values(self, obs: np.ndarray) -> np.ndarray:
        hidden = len(self.options.value_hidden_sizes)
        return self.forward("intrinsic_value", hidden, self.flat(obs))[:, 0].astype(np.float32)

    # --- learning -------------------------------------------------------------------------------
    def learn(self, rows: SampleBatch) -> dict[str, float]:
        options = self.options
        next_obs = rows[xp.NEXT_OBS]
        self.obs_rms.update(self.flat(next_obs))
        self.reward_rms.update(np.asarray(rows[xp.INTRINSIC_RETURNS], np.float64))
        inputs = {"x": self.normalized(next_obs)}
        value_mode = xp.INTRINSIC_VALUE_TARGETS in rows
        if value_mode:
            inputs["obs"] = self.flat(rows[SampleBatch.OBS])
            inputs["value_targets"] = np.asarray(rows[xp.INTRINSIC_VALUE_TARGETS], np.float32)
        num_rows = len(rows)
        size = min(num_rows, options.minibatch_size)
        totals: dict[str, float] = {}
        count = 0
        for _ in range(options.num_epochs):
            order = self.rng.permutation(num_rows)
            for start in range(0, num_rows - size + 1, size):
                picked = order[start : start + size]
                batch = {k: v[picked] for k, v in inputs.items()}
                batch["mask"] = (self.rng.random(size) < options.update_proportion).astype(np.float32)
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
