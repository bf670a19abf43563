"""ICM's framework-free part: its networks, intrinsic rewards and what it learns from.

The math (Pathak et al. 2017, "Curiosity-driven Exploration by Self-supervised Prediction", eqs.
2-7; the loss reductions of the authors' ``noreward-rl`` code and RLlib's ``Curiosity``):

- ``x = clip((obs - mean) / sqrt(var), -obs_clip, obs_clip)`` for ``s`` and ``s'`` (the running
  statistics of the observations, as ``rnd``), ``phi = feature(x)``, ``phi' = feature(x')``;
- inverse model ``logits = inverse([phi, phi'])``, ``L_I = mean_i CE(logits_i, a_i)``;
- forward model ``f = forward([phi, onehot(a)])``, ``L_F = mean_i 0.5 sum_k (f_ik - phi'_ik)^2``;
- loss ``(1 - beta) L_I + beta L_F`` (eq. 7), the gradient flowing into phi from both, as in the
  authors' code (the paper's text trains phi by the inverse loss; their code and RLlib's let the
  forward loss reach it too), plus ``0.5 mean_i (V_int(obs_i) - target_i)^2`` in value mode;
- intrinsic reward ``0.5 sum_k (f_k - phi'_k)^2`` of each transition (eq. 6 with eta folded into
  ``intrinsic_coeff``: the sampling side divides the reward by the running std of the
  non-episodic discounted intrinsic return, which would cancel any constant factor).
"""

from __future__ import annotations

import numpy as np

from rlgear import exploration as xp
from rlgear.errors import UnsupportedError
from rlgear.plugins.exploration.nets import INTRINSIC_VALUE, NetSpec, NumpyNetsModule
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Discrete

NETWORKS = ("feature", "inverse", "forward")


class ICMModuleBase(NumpyNetsModule):
    """ICM's networks; a backend subclass implements :meth:`loss_and_gradients` on ``inputs``:
    ``x`` and ``next_x`` (normalized observations ``[N, obs_dim]``), ``actions`` (``[N]`` int64) and,
    in value mode, ``obs`` and ``value_targets``."""

    def __init__(self, observation_space, action_space, options, seed):
        if not isinstance(action_space, Discrete):
            raise UnsupportedError(
                f"exploration.name: exploration 'icm' needs Discrete actions (its inverse model "
                f"classifies the action), got {action_space}"
            )
        self.num_actions = int(action_space.n)
        super().__init__(observation_space, action_space, options, seed)

    def network_specs(self) -> list[NetSpec]:
        o, features = self.options, self.options.feature_dim
        return [
            NetSpec("feature", self.obs_dim, list(o.feature_hidden_sizes), features),
            NetSpec("inverse", 2 * features, list(o.inverse_hidden_sizes), self.num_actions),
            NetSpec("forward", features + self.num_actions, list(o.forward_hidden_sizes), features),
            NetSpec(INTRINSIC_VALUE, self.obs_dim, list(o.value_hidden_sizes), 1, output_gain=0.01),
        ]

    def one_hot(self, actions: np.ndarray) -> np.ndarray:
        return np.eye(self.num_actions, dtype=np.float32)[np.asarray(actions, np.int64).reshape(-1)]

    def intrinsic_rewards(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        phi = self.run("feature", self.normalized(obs))
        phi_next = self.run("feature", self.normalized(next_obs))
        predicted = self.run("forward", np.concatenate([phi, self.one_hot(actions)], axis=1))
        return (0.5 * np.square(predicted - phi_next).sum(axis=1)).astype(np.float32)

    def learn(self, rows: SampleBatch) -> dict[str, float]:
        obs, next_obs = rows[SampleBatch.OBS], rows[xp.NEXT_OBS]
        self.obs_rms.update(self.flat(next_obs))
        self.reward_rms.update(np.asarray(rows[xp.INTRINSIC_RETURNS], np.float64))
        inputs = {
            "x": self.normalized(obs),
            "next_x": self.normalized(next_obs),
            "actions": np.asarray(rows[SampleBatch.ACTIONS], np.int64).reshape(-1),
        }
        if xp.INTRINSIC_VALUE_TARGETS in rows:
            inputs["obs"] = self.flat(obs)
            inputs["value_targets"] = np.asarray(rows[xp.INTRINSIC_VALUE_TARGETS], np.float32)
        return self.train_on(self.minibatches(inputs))
