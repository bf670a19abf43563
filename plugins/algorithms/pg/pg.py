"""PG's postprocessing and training step, written once for every backend.

REINFORCE (Williams 1992), per training step:
  1. run the policy in the envs for ``train_batch_size`` env steps;
  2. on the rollout worker, compute the discounted return ``G_t`` of every step
     and the advantage: ``G_t - V(s_t)`` with a baseline, ``G_t`` without
     (:meth:`PG.postprocess`);
  3. take one gradient step on ``-log pi(a_t|s_t) * advantage`` (plus the value
     loss when there is a baseline), the backend's ``loss()``;
  4. send the new weights to the rollout workers.

Cut episodes. A fragment may end in the middle of an episode
(``batch_mode: truncate_episodes``), and an episode may end at a time limit
(LAST with discount 1). Both need a value of the state where the data stops.
With the baseline on (the default) that is the learned ``V``, exactly as the
truth table of ``rlgear.value_ops`` says, and either batch mode works. Without a
baseline there is no trained value: the value head's output would be arbitrary,
and training it only to bootstrap would make it a baseline in all but name. So
plain REINFORCE bootstraps from 0 and requires
``workers.batch_mode: complete_episodes`` (checked when the trainer is built),
which makes the returns the exact Monte-Carlo returns of the paper; an episode
that hits a time limit is then treated as if it ended there, as classical
REINFORCE implementations do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.pg.config import PGConfig
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import add_discounted_returns, trainable_rows
from rlgear.trainer import Trainer


def check_batch_mode(config: RunConfig) -> None:
    """Plain REINFORCE (no baseline) has no value to bootstrap a cut episode from."""
    if not config.training.use_baseline and config.workers.batch_mode != "complete_episodes":
        raise ConfigError(
            f"{config.source}: training.use_baseline: pg without a baseline needs whole episodes "
            f"(there is no value to bootstrap a cut episode from); set workers.batch_mode: "
            f"complete_episodes (it is {config.workers.batch_mode}) or training.use_baseline: true"
        )


class PG(Trainer):
    name = "pg"
    description = "REINFORCE policy gradient with an optional value baseline, discrete and continuous actions"
    config_class = PGConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.pg.tf_policy:PGTFPolicy",
        "torch": "rlgear.plugins.algorithms.pg.torch_policy:PGTorchPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})
    recurrent = True
    relational = True  # the catalog actor-critic, whose encoder it is
    multi_agent = True

    def setup(self, config: RunConfig) -> None:
        check_batch_mode(config)  # before any env or policy is built
        super().setup(config)

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        check_batch_mode(new_config)
        return super().reset_config(new_config)

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        """Add ``value_targets`` (discounted returns) and ``advantages``; keep the trainable rows.

        ``fragment`` is time-major ``[T+1, B]``: ``rewards[t]`` and
        ``discounts[t]`` arrive with step ``t``, and the last row only supplies
        the bootstrap value (with ``complete_episodes`` it is the episode's
        LAST step, whose value is used only after a time limit).
        """
        training = config.training
        values = None  # the learned baseline, vf_preds
        if (
            not training.use_baseline
        ):  # whole episodes only (check_batch_mode): the return of a LAST step is 0
            values = np.zeros(fragment[SampleBatch.REWARDS].shape, dtype=np.float32)
        return trainable_rows(add_discounted_returns(fragment, training.gamma, values))
