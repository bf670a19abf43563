"""Self-play snapshots: every few iterations, copy the learning policy's weights into a frozen opponent.

The run has two policies: ``main`` learns (``multiagent.policies_to_train: [main]``) and
``snapshot`` plays with the weights ``main`` had at the last copy. Pass the hook in code
(``rlgear.train(config, hooks=[SelfPlaySnapshots(every=10)])``) or register it under the
``rlgear.hooks`` entry-point group.
"""

from __future__ import annotations

import rlgear


class SelfPlaySnapshots:
    def __init__(self, learner: str = "main", opponent: str = "snapshot", every: int = 10):
        self.learner, self.opponent, self.every = learner, opponent, every
        self.copies = 0

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        if result["training_iteration"] % self.every != 0:
            return
        policies = trainer.policy_map  # {policy id: Policy}
        policies[self.opponent].set_weights(policies[self.learner].get_weights())
        trainer.workers.sync_weights()  # remote workers act with the new snapshot too
        self.copies += 1
        result["custom_metrics/snapshots"] = self.copies
