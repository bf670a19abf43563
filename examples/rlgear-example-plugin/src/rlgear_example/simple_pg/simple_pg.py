"""simple_pg's postprocessing and training step, written once for every backend.

REINFORCE with a baseline (Williams 1992; Sutton & Barto 2018, section 13.4),
per training step:
  1. run the policy in the envs for ``train_batch_size`` env steps;
  2. on the rollout worker, compute the discounted return ``G_t`` of every step
     and the advantage ``G_t - V(s_t)`` (:meth:`SimplePG.postprocess`);
  3. take one gradient step on ``-log pi(a_t|s_t) * advantage`` plus the value
     loss ``(V(s_t) - G_t)^2`` (the backend's ``loss()``, ``torch_policy.py``);
  4. send the new weights to the rollout workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.config import RunConfig
from rlgear.distributed.rollout_ops import synchronous_parallel_sample
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import trainable_rows
from rlgear.trainer import Trainer
from rlgear.value_ops import discounted_return
from rlgear_example.simple_pg.config import SimplePGConfig


class SimplePG(Trainer):
    name = "simple_pg"
    description = "REINFORCE with a learned value baseline (example plugin), discrete actions"
    config_class = SimplePGConfig
    # A string, not a class: torch is imported only when a run uses this backend.
    policies = {"torch": "rlgear_example.simple_pg.torch_policy:SimplePGTorchPolicy"}
    action_spaces = frozenset({"discrete"})

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        """Add ``value_targets`` (discounted returns) and ``advantages``, then keep the trainable rows.

        ``fragment`` is time-major ``[T+1, B]`` with ALF's layout: ``rewards[t]``
        and ``discounts[t]`` arrive with step ``t``. Its last row is the
        bootstrap row (with ``batch_mode: truncate_episodes``, an episode still
        running at the fragment's end continues from the value of that row; with
        ``complete_episodes`` the last row is the episode's LAST step). A
        terminated episode adds nothing after its LAST step (discount 0); a
        truncated one bootstraps from the value of its last observation
        (discount 1). ``discounted_return`` handles all of it, given discounts
        already multiplied by gamma.
        """
        values = fragment[SampleBatch.VF_PREDS]
        returns = discounted_return(
            rewards=fragment[SampleBatch.REWARDS],
            values=values,
            step_types=fragment[SampleBatch.STEP_TYPES],
            discounts=fragment[SampleBatch.DISCOUNTS] * config.training.gamma,
        ).astype(np.float32)  # [T, B]: one row fewer than the fragment
        # The bootstrap row is not trained on (trainable_rows drops it); pad it with zeros.
        pad = np.zeros_like(returns[:1])
        out = SampleBatch(fragment)
        out[SampleBatch.VALUE_TARGETS] = np.concatenate([returns, pad])
        out[SampleBatch.ADVANTAGES] = np.concatenate([returns - values[:-1], pad]).astype(np.float32)
        return trainable_rows(out)

    def training_step(self) -> dict[str, float]:
        batch, steps = synchronous_parallel_sample(self.workers, self.config.training.train_batch_size)
        self.policy.set_global_timestep(self.timesteps_total + steps)  # for lr_schedule
        stats = self.policy.learn_on_batch(batch)
        self.workers.sync_weights()
        return stats
