"""PQN hyperparameters; defaults are CleanRL's ``pqn.py`` (CartPole-v1) where it has one.

CleanRL ``cleanrl/pqn.py`` (vwxyzjn/cleanrl, commit 10334fa): 4 envs x 128 steps per rollout,
4 epochs of 4 minibatches, lr 2.5e-4 annealed linearly to 0 (here: ``lr_schedule``), gamma 0.99,
Q(lambda) with lambda 0.65, epsilon 1.0 -> 0.05 over half of the 500k env steps, gradient norm
clipped at 10, hidden layers 120 and 84 each followed by LayerNorm. CleanRL optimises with RAdam
(as the paper's purejaxql does); the built-in default here is Adam, which both backends have
(``training.optimizer: torch.optim.RAdam`` picks RAdam on torch).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc
from rlgear.plugins.families.onpolicy import SGDSchedule


@dataclass
class PQNConfig(TrainingConfig):
    lr: float = doc("Learning rate (CleanRL anneals it linearly to 0: set lr_schedule).", 2.5e-4)
    gamma: float = doc("Discount factor.", 0.99)
    train_batch_size: int = doc(
        "Env steps per training step (all envs together); CleanRL: 4 envs x 128 steps.", 512
    )
    sgd_minibatch_size: int = doc("Rows per SGD minibatch (CleanRL: 4 minibatches of the batch).", 128)
    num_sgd_iter: int = doc("Epochs over each train batch (CleanRL's update_epochs).", 4)
    q_lambda: float = doc(
        "lambda of the Q(lambda) targets: 0 is one-step Q-learning, 1 the Monte-Carlo return "
        "bootstrapped with max_a Q at truncations and at the rollout's end.",
        0.65,
    )
    grad_clip: float | None = doc("Clip the global gradient norm to this value (null: off).", 10.0)
    layer_norm: bool = doc(
        "LayerNorm (Ba et al. 2016) between every hidden dense layer and its activation: what lets "
        "PQN learn without a target network (Gallici et al. 2024, sec. 4). Not applied to a "
        "model.custom network.",
        True,
    )
    epsilon_initial: float = doc("Probability of a random action at the start.", 1.0)
    epsilon_final: float = doc("Probability of a random action after epsilon_timesteps.", 0.05)
    epsilon_timesteps: int = doc(
        "Env steps over which epsilon falls linearly from epsilon_initial to epsilon_final "
        "(CleanRL: half of its 500k steps).",
        250_000,
    )

    def sgd_schedule(self) -> SGDSchedule:
        """``num_sgd_iter`` epochs of ``sgd_minibatch_size``-row minibatches over each train batch."""
        return SGDSchedule(num_epochs=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size)

    def check(self, fail) -> None:
        if not 0 <= self.q_lambda <= 1:
            raise fail("training.q_lambda", f"expected a number in [0, 1], got {self.q_lambda}")
        for key in ("sgd_minibatch_size", "num_sgd_iter"):
            if getattr(self, key) <= 0:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        for key in ("epsilon_initial", "epsilon_final"):
            if not 0 <= getattr(self, key) <= 1:
                raise fail(f"training.{key}", f"expected a number in [0, 1], got {getattr(self, key)}")
        if self.epsilon_timesteps < 0:
            raise fail("training.epsilon_timesteps", f"expected 0 or more, got {self.epsilon_timesteps}")
