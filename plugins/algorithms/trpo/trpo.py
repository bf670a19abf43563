"""TRPO's postprocessing and checks, written once for every backend; the training step is the base Trainer's.

Trust Region Policy Optimization (Schulman et al. 2015, practical algorithm of section 6), per
training step:
  1. run the policy in the envs for ``train_batch_size`` env steps;
  2. compute GAE advantages and value targets on the evaluator (as ppo; GAE: Schulman et al. 2016,
     which the TRPO + GAE setup of sb3-contrib uses);
  3. one natural-gradient step of the policy within the KL trust region ``max_kl`` (conjugate
     gradient on Fisher-vector products, then a backtracking line search:
     :mod:`~rlgear.plugins.algorithms.trpo.natural_gradient`);
  4. fit the value function separately by epochs of minibatch steps
     (:mod:`~rlgear.plugins.algorithms.trpo.learning`);
  5. send the new weights to the rollout workers.
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.trpo.config import TRPOConfig
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import add_gae, trainable_rows
from rlgear.trainer import Trainer


class TRPO(Trainer):
    name = "trpo"
    description = "Trust Region Policy Optimization (natural gradient, KL line search, GAE), discrete and continuous actions"
    config_class = TRPOConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.trpo.tf_policy:TRPOTFPolicy",
        "torch": "rlgear.plugins.algorithms.trpo.torch_policy:TRPOTorchPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous"})

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Separate policy and value nets; one learner (the policy step is not data-parallel)."""
        super().check_config(config)
        if config.model.vf_share_layers:
            raise config.fail(
                "model.vf_share_layers",
                "expected false: trpo fits the value function separately, and shared layers would let a "
                "value step move the policy out of its trust region",
            )
        if config.learners.num_learners >= 2:
            raise config.fail(
                "learners.num_learners",
                f"expected 0 or 1: trpo's natural-gradient step is not data-parallel, got "
                f"{config.learners.num_learners}",
            )

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        training = config.training
        return trainable_rows(add_gae(fragment, training.gamma, training.gae_lambda))
