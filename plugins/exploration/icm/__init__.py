"""ICM, the Intrinsic Curiosity Module (Pathak et al. 2017), as the ``icm`` exploration plugin.

``exploration: {name: icm}``: a feature network phi, an inverse model that predicts the action
from ``(phi(s), phi(s'))`` and a forward model that predicts ``phi(s')`` from ``(phi(s), a)``; the
forward model's error is the intrinsic reward (high where the agent cannot yet predict what its
actions do). With ppo, a2c and trpo the intrinsic returns are non-episodic with their own value
head (value mode, as ``rnd``); with dqn, qrdqn, iqn, impala and appo the normalized intrinsic
reward is added to the env's reward (reward mode). Discrete actions. The math is in :mod:`.common`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.exploration import ExplorationConfig, Fail
from rlgear.config.schema import doc
from rlgear.exploration import Exploration
from rlgear.plugins.exploration import BUILT_IN_ALGORITHMS


@dataclass
class ICMConfig(ExplorationConfig):
    """ICM's options. Defaults: Pathak et al. 2017 (beta 0.2, 288 features) and RLlib's
    ``Curiosity`` exploration (lr 1e-3, 256-unit hidden layers, which RLlib also uses for MLP
    observations; the paper's feature net is a conv net on frames)."""

    feature_dim: int = doc("Size of the learned feature space phi(s) (paper: 288).", 288)
    feature_hidden_sizes: list[int] = doc("Hidden layers of the feature MLP (ReLU).", factory=lambda: [256])
    inverse_hidden_sizes: list[int] = doc("Hidden layers of the inverse model (ReLU).", factory=lambda: [256])
    forward_hidden_sizes: list[int] = doc("Hidden layers of the forward model (ReLU).", factory=lambda: [256])
    value_hidden_sizes: list[int] = doc(
        "Hidden layers of the intrinsic value MLP (value mode: ppo, a2c, trpo).", factory=lambda: [64, 64]
    )
    beta: float = doc(
        "Weight of the forward loss against the inverse loss: (1 - beta) L_inverse + beta L_forward "
        "(Pathak et al. 2017, eq. 7).",
        0.2,
    )
    lr: float = doc("Adam learning rate of the ICM networks and the intrinsic value head.", 1e-3)
    num_epochs: int = doc("Passes over each training step's fresh rows.", 1)
    minibatch_size: int = doc(
        "Rows per gradient step (a training step with fewer rows takes one step on all of them).", 256
    )
    obs_clip: float = doc("Normalized observations are clipped to [-obs_clip, obs_clip].", 5.0)

    def check(self, fail: Fail) -> None:
        super().check(fail)
        for key in (
            "feature_hidden_sizes",
            "inverse_hidden_sizes",
            "forward_hidden_sizes",
            "value_hidden_sizes",
        ):
            sizes = getattr(self, key)
            if not sizes or any(size <= 0 for size in sizes):
                raise fail(
                    f"exploration.{key}", f"expected a non-empty list of positive integers, got {sizes}"
                )
        for key in ("feature_dim", "num_epochs", "minibatch_size"):
            if getattr(self, key) <= 0:
                raise fail(f"exploration.{key}", f"expected a positive integer, got {getattr(self, key)}")
        for key in ("lr", "obs_clip"):
            if getattr(self, key) <= 0:
                raise fail(f"exploration.{key}", f"expected a positive number, got {getattr(self, key)}")
        if not 0.0 <= self.beta <= 1.0:
            raise fail("exploration.beta", f"expected a number in [0, 1], got {self.beta}")


class ICM(Exploration):
    name = "icm"
    description = "Intrinsic Curiosity Module (Pathak et al. 2017): novelty as a forward model's error in learned features"
    config_class = ICMConfig
    modules = {
        "torch": "rlgear.plugins.exploration.icm.torch_module:ICMTorchModule",
        "tf": "rlgear.plugins.exploration.icm.tf_module:ICMTFModule",
    }
    algorithms = dict(BUILT_IN_ALGORITHMS)
