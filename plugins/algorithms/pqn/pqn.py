"""PQN's postprocessing and training step, written once for every backend.

Per training step (Gallici et al. 2024, Algorithm 1, as CleanRL's ``pqn.py``):
  1. act epsilon-greedily on the online Q-network in the vectorised envs for
     ``train_batch_size`` env steps, recording ``max_a Q(s, a)`` of every observation
     (``vf_preds``, as an actor-critic records its value);
  2. on the evaluator, turn each fragment into Q(lambda) targets (:func:`add_q_lambda_returns`);
  3. optimise ``0.5 (Q(s, a) - target)^2`` for ``num_sgd_iter`` epochs of minibatches;
  4. send the new weights to the rollout workers.

No replay buffer and no target network: the targets are computed once per rollout, from the
network that acted, and the LayerNorm of the Q-network keeps the bootstrapping stable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear import value_ops
from rlgear.config import RunConfig
from rlgear.plugins.algorithms.pqn.config import PQNConfig
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import trainable_rows
from rlgear.trainer import Trainer


def add_q_lambda_returns(fragment: SampleBatch, gamma: float, q_lambda: float) -> SampleBatch:
    """Add ``value_targets``, the Q(lambda) targets of every row, to a time-major fragment.

    ``R[t] = r[t+1] + gamma * d[t+1] * ((1 - lambda) max_a Q(s[t+1], a) + lambda R[t+1])``
    (:func:`rlgear.value_ops.lambda_return` with ``vf_preds = max_a Q``): nothing after a
    terminal, ``max_a Q`` of the last observation after a truncation and at the fragment's
    bootstrap row. The bootstrap row gets 0 (it is not trained on: :func:`trainable_rows`
    drops it, and the LAST rows).
    """
    returns = value_ops.lambda_return(
        rewards=fragment[SampleBatch.REWARDS],
        values=fragment[SampleBatch.VF_PREDS],
        step_types=fragment[SampleBatch.STEP_TYPES],
        discounts=fragment[SampleBatch.DISCOUNTS] * gamma,
        td_lambda=q_lambda,
    ).astype(np.float32)
    out = SampleBatch(fragment)
    out[SampleBatch.VALUE_TARGETS] = np.concatenate([returns, np.zeros_like(returns[:1])])
    return out


class PQN(Trainer):
    name = "pqn"
    description = (
        "Parallelised Q-Network: vectorised epsilon-greedy Q-learning with LayerNorm and Q(lambda) "
        "targets, no replay and no target network; discrete actions"
    )
    config_class = PQNConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.pqn.tf_policy:PQNTFPolicy",
        "torch": "rlgear.plugins.algorithms.pqn.torch_policy:PQNTorchPolicy",
    }
    action_spaces = frozenset({"discrete"})

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """LayerNorm goes into pqn's own Q-network: a ``model.custom`` network has to bring its own."""
        super().check_config(config)
        if config.training.layer_norm and config.model.custom:
            raise config.fail(
                "training.layer_norm",
                f"LayerNorm is added to pqn's own Q-network only; the custom model {config.model.custom} "
                "has to normalise its own hidden layers (set training.layer_norm: false)",
            )

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        training = config.training
        return trainable_rows(add_q_lambda_returns(fragment, training.gamma, training.q_lambda))

    def training_step(self) -> dict[str, float]:
        """The on-policy step (:meth:`Trainer.training_step`), epsilon set on every worker first."""
        self.set_global_timestep(self.timesteps_total)  # epsilon while acting
        stats = super().training_step()
        stats.update(
            self.learner_stats({f"{pid}/epsilon": p.epsilon() for pid, p in self.policy_map.items()})
        )
        return stats

    def set_global_timestep(self, timesteps: int) -> None:
        """The epsilon schedule of every worker's policies (and lr schedules) follows ``timesteps``."""
        self.workers.foreach_worker(
            lambda worker: [p.set_global_timestep(timesteps) for p in worker.policy_map.values()]
        )
        if self.config.learners.num_learners > 0:  # learner actors: their own copies
            self.learner.set_global_timestep(timesteps)
