"""simple_pg hyperparameters.

Every field carries a help text (``doc``): rlgear builds its config reference
from it, so a user of your plugin never has to read your source to know what a
key does. ``gamma``, ``optimizer``, ``grad_clip``,
``lr_schedule`` ... come from :class:`rlgear.config.TrainingConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc
from rlgear.plugins.families.onpolicy import SGDSchedule


@dataclass
class SimplePGConfig(TrainingConfig):
    lr: float = doc("Learning rate (Adam) of the policy and the value baseline.", 1e-3)
    train_batch_size: int = doc(
        "Env steps per training step (all envs together); one gradient step is taken on them.", 1000
    )
    vf_loss_coeff: float = doc("Weight of the value-baseline loss in the total loss.", 0.5)

    def sgd_schedule(self) -> SGDSchedule:
        # How the policy's learn_on_batch goes over a batch (the on-policy SGD family's loop):
        # one gradient step on the whole batch, as REINFORCE takes. PPO's is
        # SGDSchedule(num_epochs=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size).
        return SGDSchedule()

    def check(self, fail) -> None:
        # Called by rlgear after type checking; `fail(key path, message)` builds an
        # error that names the config file (or the --set override) and the key.
        if self.lr <= 0:
            raise fail("training.lr", f"expected a positive number, got {self.lr}")
        if self.vf_loss_coeff < 0:
            raise fail("training.vf_loss_coeff", f"expected 0 or more, got {self.vf_loss_coeff}")
