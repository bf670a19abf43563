"""RND's framework-free part: its networks, intrinsic rewards and what it learns from.

The parameters, running statistics, Adam and weights are :class:`~rlgear.plugins.exploration.nets.NumpyNetsModule`'s
(shared with ``icm``); the backends compute the loss and its gradients
(:meth:`RNDModuleBase.loss_and_gradients`: torch autograd, ``tf.GradientTape``).

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

import numpy as np

from rlgear import exploration as xp
from rlgear.plugins.exploration.nets import INTRINSIC_VALUE, NetSpec, NumpyNetsModule, layer_names
from rlgear.sample_batch import SampleBatch

__all__ = ["RNDModuleBase", "layer_names"]


class RNDModuleBase(NumpyNetsModule):
    """RND's networks; a backend subclass implements :meth:`loss_and_gradients` on ``inputs``:
    ``x`` (normalized next observations ``[N, obs_dim]``), ``mask`` (``[N]``, 0/1) and, in value
    mode, ``obs`` (``[N, obs_dim]``) and ``value_targets`` (``[N]``)."""

    def network_specs(self) -> list[NetSpec]:
        options = self.options
        return [
            NetSpec("predictor", self.obs_dim, list(options.hidden_sizes), options.output_dim),
            NetSpec("target", self.obs_dim, list(options.hidden_sizes), options.output_dim, trainable=False),
            NetSpec(INTRINSIC_VALUE, self.obs_dim, list(options.value_hidden_sizes), 1, output_gain=0.01),
        ]

    def features(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.run("predictor", x), self.run("target", x)

    def intrinsic_rewards(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        predicted, target = self.features(self.normalized(next_obs))
        return (0.5 * np.square(predicted - target).sum(axis=1)).astype(np.float32)

    def learn(self, rows: SampleBatch) -> dict[str, float]:
        next_obs = rows[xp.NEXT_OBS]
        self.obs_rms.update(self.flat(next_obs))
        self.reward_rms.update(np.asarray(rows[xp.INTRINSIC_RETURNS], np.float64))
        inputs = {"x": self.normalized(next_obs)}
        if xp.INTRINSIC_VALUE_TARGETS in rows:
            inputs["obs"] = self.flat(rows[SampleBatch.OBS])
            inputs["value_targets"] = np.asarray(rows[xp.INTRINSIC_VALUE_TARGETS], np.float32)
        return self.train_on(self.masked(self.minibatches(inputs)))

    def masked(self, batches):
        """Each row of a minibatch trains the predictor with probability ``update_proportion``."""
        for batch in batches:
            size = len(batch["x"])
            batch["mask"] = (self.rng.random(size) < self.options.update_proportion).astype(np.float32)
            yield batch
