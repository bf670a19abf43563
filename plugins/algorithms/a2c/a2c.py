"""A2C's postprocessing and training step, written once for every backend.

Synchronous advantage actor-critic: the A3C update of Mnih et al. 2016
(Algorithm S3) with the parallel actors stepped in lockstep, as in OpenAI
baselines and Stable-Baselines3. Per training step:
  1. run the policy in the envs for ``train_batch_size`` env steps (a few steps
     per env: n-step returns);
  2. compute advantages and value targets on the evaluator with GAE
     (``gae_lambda=1`` gives the paper's n-step return, bootstrapped from the
     value of the fragment's last row);
  3. take ONE gradient step on the whole batch: policy loss, value loss and
     entropy bonus together (no epochs, no minibatches: the batch is
     on-policy only for that step);
  4. send the new weights to the rollout workers.
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.a2c.config import A2CConfig
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import add_gae, trainable_rows
from rlgear.trainer import Trainer


class A2C(Trainer):
    name = "a2c"
    description = "Synchronous advantage actor-critic (n-step/GAE), discrete and continuous actions"
    config_class = A2CConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.a2c.tf_policy:A2CTFPolicy",
        "torch": "rlgear.plugins.algorithms.a2c.torch_policy:A2CTorchPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})
    recurrent = True
    relational = True  # the catalog actor-critic, whose encoder it is
    multi_agent = True

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        training = config.training
        return trainable_rows(add_gae(fragment, training.gamma, training.gae_lambda))
