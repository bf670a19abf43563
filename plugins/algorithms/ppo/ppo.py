"""PPO's postprocessing, written once for every backend; the training step is the base Trainer's.

Per training step (Schulman et al. 2017, Algorithm 1):
  1. run the policy in the envs for ``train_batch_size`` env steps;
  2. compute GAE advantages and value targets on the evaluator (value_ops);
  3. optimise the clipped surrogate for ``num_sgd_iter`` epochs of minibatches;
  4. send the new weights to the rollout workers.
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.ppo.config import PPOConfig
from rlgear.plugins.families.gsde import check_sde_action_space
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import add_gae, trainable_rows
from rlgear.trainer import Trainer


class PPO(Trainer):
    name = "ppo"
    description = "Proximal Policy Optimization (clipped surrogate, GAE), discrete and continuous actions"
    config_class = PPOConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.ppo.tf_policy:PPOTFPolicy",
        "torch": "rlgear.plugins.algorithms.ppo.torch_policy:PPOTorchPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})
    recurrent = True
    relational = True  # the catalog actor-critic, whose encoder it is
    multi_agent = True

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """As the base trainer's; ``training.use_sde`` also needs Box actions."""
        super().check_spaces(config, observation_space, action_space)
        check_sde_action_space(config, action_space)

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        training = config.training
        return trainable_rows(add_gae(fragment, training.gamma, training.gae_lambda))
