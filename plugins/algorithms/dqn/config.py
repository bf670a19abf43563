"""DQN hyperparameters. Each extension is a switch, so Rainbow-style combinations are configs.

The sampling, replay and n-step keys are the shared :class:`rlgear.plugins.families.replay.config.ReplayConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlgear.config.schema import doc
from rlgear.plugins.families.replay.config import ReplayConfig


@dataclass
class DQNConfig(ReplayConfig):
    lr: float = doc("Learning rate (Adam).", 1e-3)
    gamma: float = doc("Discount factor.", 0.99)
    grad_clip: float | None = doc("Clip the global gradient norm to this value (null: off).", 10.0)

    # --- target network (Mnih et al. 2015) ----------------------------------------
    target_network_update_freq: int = doc("Env steps between target-network updates.", 500)
    tau: float = doc(
        "Target-network update: target <- tau * online + (1 - tau) * target. "
        "1.0 is the hard copy of Mnih et al. 2015; smaller values are Polyak averaging.",
        1.0,
    )

    # --- extensions (Hessel et al. 2018 name the combination Rainbow) ------------------
    double_q: bool = doc(
        "Double Q-learning (van Hasselt et al. 2016): the online network picks the next action, "
        "the target network values it.",
        True,
    )
    dueling: bool = doc(
        "Dueling heads (Wang et al. 2016): Q = V + A - mean(A) from value and advantage streams "
        "on the shared hidden layers.",
        True,
    )
    num_atoms: int = doc(
        "Distributional Q-learning, C51 (Bellemare et al. 2017): the number of atoms of each action's "
        "return distribution on the fixed support linspace(v_min, v_max, num_atoms), learned by "
        "cross-entropy to the projected n-step target (td_error_loss_fn and huber_delta are then "
        "unused). 1 is off: one Q-value per action.",
        1,
    )
    v_min: float = doc(
        "Lowest atom of the C51 support (num_atoms > 1); returns below it count as v_min.", -10.0
    )
    v_max: float = doc(
        "Highest atom of the C51 support (num_atoms > 1); returns above it count as v_max.", 10.0
    )
    noisy: bool = doc(
        "Noisy nets (Fortunato et al. 2018): every dense layer of the Q-network (not the conv trunk) is a "
        "factorised Gaussian noisy layer, with fresh noise at every acting and every training step. They "
        "replace epsilon-greedy exploration: with noisy on, epsilon is 0 (the epsilon_* keys are unused) "
        "and greedy evaluation acts on the mean weights.",
        False,
    )
    sigma0: float = doc(
        "Initial noise scale of the noisy layers: each sigma starts at sigma0 / sqrt(inputs) "
        "(Fortunato et al. 2018, factorised noise: 0.5).",
        0.5,
    )

    # --- exploration ------------------------------------------------------------------
    epsilon_initial: float = doc("Probability of a random action at the start.", 1.0)
    epsilon_final: float = doc("Probability of a random action after epsilon_timesteps.", 0.02)
    epsilon_timesteps: int = doc(
        "Env steps over which epsilon falls linearly from epsilon_initial to epsilon_final.", 10_000
    )

    # --- loss -----------------------------------------------------------------------------
    td_error_loss_fn: Literal["huber", "mse"] = doc(
        "Loss on the TD error: 'huber' (quadratic within huber_delta, linear outside, as in "
        "Mnih et al. 2015's error clipping) or 'mse' (0.5 x TD error squared).",
        "huber",
    )
    huber_delta: float = doc("Where the Huber loss turns from quadratic to linear.", 1.0)

    def check(self, fail) -> None:
        super().check(fail)
        if self.target_network_update_freq <= 0:
            raise fail(
                "training.target_network_update_freq",
                f"expected a positive integer, got {self.target_network_update_freq}",
            )
        if self.epsilon_timesteps < 0:
            raise fail("training.epsilon_timesteps", f"expected 0 or more, got {self.epsilon_timesteps}")
        if self.huber_delta <= 0:
            raise fail("training.huber_delta", f"expected a positive number, got {self.huber_delta}")
        for key in ("epsilon_initial", "epsilon_final"):
            if not 0 <= getattr(self, key) <= 1:
                raise fail(f"training.{key}", f"expected a number in [0, 1], got {getattr(self, key)}")
        if self.num_atoms < 1:
            raise fail(
                "training.num_atoms",
                f"expected 1 (off: one Q-value per action) or more atoms (C51 uses 51), got {self.num_atoms}",
            )
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            raise fail(
                "training.v_min",
                f"the C51 support needs v_min < v_max, got v_min {self.v_min} and v_max {self.v_max}",
            )
        if self.sigma0 <= 0:
            raise fail("training.sigma0", f"expected a positive number, got {self.sigma0}")
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1] (1.0 is a hard copy), got {self.tau}")
