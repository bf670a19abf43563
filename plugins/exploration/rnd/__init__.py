"""RND, Random Network Distillation (Burda et al. 2018), as the ``rnd`` exploration plugin.

``exploration: {name: rnd}``: a fixed random target network and a predictor trained to match it on
the observations the agent reaches; the predictor's error is the intrinsic reward (high where the
agent has rarely been). With ppo, a2c and trpo the intrinsic returns are non-episodic with their
own value head (value mode, Burda sec. 2.3); with dqn, qrdqn, iqn, impala and appo the normalized
intrinsic reward is added to the env's reward (reward mode). The math is in :mod:`.common`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.exploration import ExplorationConfig, Fail
from rlgear.config.schema import doc
from rlgear.exploration import Exploration
from rlgear.plugins.exploration import BUILT_IN_ALGORITHMS


@dataclass
class RNDConfig(ExplorationConfig):
    """RND's options. Defaults: CleanRL's ``ppo_rnd_envpool.py`` (lr 1e-4, update_proportion 0.25,
    4 epochs, observation clip 5) and Burda et al. 2018 table 5; the MLP sizes are ours (both use
    conv nets on Atari frames, with 512 output features)."""

    hidden_sizes: list[int] = doc(
        "Hidden layers of the target and predictor MLPs (ReLU).", factory=lambda: [128, 128]
    )
    output_dim: int = doc("Output features of the target and predictor networks.", 128)
    value_hidden_sizes: list[int] = doc(
        "Hidden layers of the intrinsic value MLP (value mode: ppo, a2c, trpo).", factory=lambda: [64, 64]
    )
    lr: float = doc("Adam learning rate of the predictor and the intrinsic value head.", 1e-4)
    update_proportion: float = doc(
        "Probability that a row trains the predictor (CleanRL's update_proportion; slows the decay "
        "of the intrinsic reward when many envs run).",
        0.25,
    )
    num_epochs: int = doc("Passes over each training step's fresh rows.", 4)
    minibatch_size: int = doc(
        "Rows per gradient step (a training step with fewer rows takes one step on all of them).", 256
    )
    obs_clip: float = doc("Normalized observations are clipped to [-obs_clip, obs_clip].", 5.0)

    def check(self, fail: Fail) -> None:
        super().check(fail)
        for key in ("hidden_sizes", "value_hidden_sizes"):
            sizes = getattr(self, key)
            if not sizes or any(size <= 0 for size in sizes):
                raise fail(
                    f"exploration.{key}", f"expected a non-empty list of positive integers, got {sizes}"
                )
        for key in ("output_dim", "num_epochs", "minibatch_size"):
            if getattr(self, key) <= 0:
                raise fail(f"exploration.{key}", f"expected a positive integer, got {getattr(self, key)}")
        for key in ("lr", "obs_clip"):
            if getattr(self, key) <= 0:
                raise fail(f"exploration.{key}", f"expected a positive number, got {getattr(self, key)}")
        if not 0.0 < self.update_proportion <= 1.0:
            raise fail(
                "exploration.update_proportion", f"expected a number in (0, 1], got {self.update_proportion}"
            )


class RND(Exploration):
    name = "rnd"
    description = (
        "Random Network Distillation (Burda et al. 2018): novelty as the error of a predictor of a random net"
    )
    config_class = RNDConfig
    modules = {
        "torch": "rlgear.plugins.exploration.rnd.torch_module:RNDTorchModule",
        "tf": "rlgear.plugins.exploration.rnd.tf_module:RNDTFModule",
    }
    algorithms = dict(BUILT_IN_ALGORITHMS)
