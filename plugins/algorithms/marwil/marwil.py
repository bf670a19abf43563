"""The BC and MARWIL trainers: which minibatches each learner update takes.

BC learns on single transitions (``obs``, ``actions``); MARWIL needs each row's return-to-go,
which needs its whole episode, so it reads episodes and adds ``value_targets`` first
(:mod:`~rlgear.plugins.algorithms.marwil.returns`). The loss (Wang et al. 2018, eq. 8, with
RLlib's moving-average advantage norm) is in the backends' policy modules.
"""

from __future__ import annotations

from rlgear.plugins.algorithms.marwil.config import BCConfig, MARWILConfig
from rlgear.plugins.algorithms.marwil.returns import add_value_targets, state_value
from rlgear.plugins.families.offline import EpisodeBatches, OfflineTrainer
from rlgear.plugins.families.offline.batches import Batches

_POLICIES = {
    "tf": "rlgear.plugins.algorithms.marwil.tf_policy:MARWILTFPolicy",
    "torch": "rlgear.plugins.algorithms.marwil.torch_policy:MARWILTorchPolicy",
}


class BC(OfflineTrainer):
    name = "bc"
    description = "Behaviour cloning from a dataset (offline), discrete and continuous actions"
    config_class = BCConfig
    policies = _POLICIES
    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})


class MARWIL(OfflineTrainer):
    name = "marwil"
    description = "Advantage-weighted imitation from a dataset (offline; beta 0 is BC)"
    config_class = MARWILConfig
    policies = _POLICIES
    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})

    def make_batches(self) -> Batches:
        """Rows of whole episodes with their returns-to-go (bootstrapped with the current ``V`` at a
        truncation), shuffled in a buffer of ``episode_buffer_size`` rows."""
        training = self.config.training
        policy = self.learner.policy
        return EpisodeBatches(
            self.data,
            self.observations,
            add_value_targets(training.gamma, lambda obs: state_value(policy, obs)),
            training.train_batch_size,
            self.data_rng,
            training.episode_buffer_size,
        )
