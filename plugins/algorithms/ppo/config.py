"""PPO hyperparameters, with defaults that work for small control tasks."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc
from rlgear.plugins.families.gsde import GSDEConfig
from rlgear.plugins.families.onpolicy import SGDSchedule


@dataclass
class PPOConfig(GSDEConfig, TrainingConfig):
    lr: float = doc("Learning rate (Adam).", 3e-4)
    train_batch_size: int = doc("Env steps per training step (all envs together).", 2048)
    sgd_minibatch_size: int = doc("Rows per SGD minibatch.", 64)
    num_sgd_iter: int = doc("Epochs over each train batch.", 10)
    gae_lambda: float = doc("GAE lambda: 1 is Monte-Carlo, 0 one-step TD.", 0.95)
    clip_param: float = doc("Clip range of the probability ratio (epsilon in the paper).", 0.2)
    clip_param_schedule: list[list[float]] | None = doc(
        "Piecewise-linear clip range over timesteps_total, e.g. [[0, 0.2], [100000, 0]].", None
    )
    vf_clip_param: float | None = doc(
        "Clip value updates to this distance from the old prediction (null: no clipping).", None
    )
    vf_loss_coeff: float = doc("Weight of the value loss.", 0.5)
    entropy_coeff: float = doc("Weight of the entropy bonus.", 0.0)
    normalize_advantages: bool = doc("Normalize advantages per minibatch (mean 0, std 1).", True)
    grad_clip: float | None = doc("Clip the global gradient norm to this value.", 0.5)

    def sgd_schedule(self) -> SGDSchedule:
        """``num_sgd_iter`` epochs of ``sgd_minibatch_size``-row minibatches over each train batch."""
        return SGDSchedule(num_epochs=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size)

    def check(self, fail) -> None:
        self.check_sde(fail)
        if not 0 <= self.gae_lambda <= 1:
            raise fail("training.gae_lambda", f"expected a number in [0, 1], got {self.gae_lambda}")
        if self.clip_param <= 0:
            raise fail("training.clip_param", f"expected a positive number, got {self.clip_param}")
        for key in ("sgd_minibatch_size", "num_sgd_iter"):
            if getattr(self, key) <= 0:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
