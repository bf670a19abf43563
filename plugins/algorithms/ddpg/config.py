"""DDPG's hyperparameters, and TD3's: the same keys, TD3's switches on by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlgear.config.schema import doc
from rlgear.plugins.families.replay.config import ActorCriticReplayConfig


@dataclass
class DDPGConfig(ActorCriticReplayConfig):
    lr: float = doc("Learning rate (Adam) of the actor and the critics.", 1e-3)
    gamma: float = doc("Discount factor.", 0.99)
    optimizer_epsilon: float = doc("Epsilon of adam.", 1e-8)
    tau: float = doc(
        "Polyak averaging of the target actor and critics after each actor update: "
        "target <- tau * online + (1 - tau) * target.",
        0.005,
    )

    # --- TD3's switches (Fujimoto et al. 2018) ---------------------------------------------------
    twin_q: bool = doc("Two critics; the target takes the smaller of their values (clipped double Q).", False)
    policy_delay: int = doc(
        "Update the actor and the target networks every policy_delay-th gradient step (the critics "
        "every step).",
        1,
    )
    target_noise: float = doc(
        "Target policy smoothing: standard deviation of the Gaussian noise added to the target "
        "actor's action (in the actor's [-1, 1] units; 0: off).",
        0.0,
    )
    target_noise_clip: float = doc("The target policy noise is clipped to +- this.", 0.5)

    # --- exploration -----------------------------------------------------------------------------
    exploration_noise: Literal["gaussian", "ornstein_uhlenbeck"] = doc(
        "Noise added to the actor's action while exploring: independent Gaussian, or the "
        "Ornstein-Uhlenbeck process of Lillicrap et al. 2016 (per env, restarted at each episode).",
        "gaussian",
    )
    exploration_noise_scale: float = doc(
        "Standard deviation of the exploration noise (Gaussian), or the OU process's sigma, in the "
        "actor's [-1, 1] units (half the Box's range is 1).",
        0.1,
    )
    ou_theta: float = doc("Ornstein-Uhlenbeck mean reversion rate theta.", 0.15)
    ou_dt: float = doc("Ornstein-Uhlenbeck time step dt.", 1e-2)

    def check(self, fail) -> None:
        super().check(fail)
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1], got {self.tau}")
        if self.policy_delay < 1:
            raise fail("training.policy_delay", f"expected a positive integer, got {self.policy_delay}")
        for key in ("target_noise", "target_noise_clip", "exploration_noise_scale", "ou_theta"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or more, got {getattr(self, key)}")
        if self.ou_dt <= 0:
            raise fail("training.ou_dt", f"expected a positive number, got {self.ou_dt}")


@dataclass
class TD3Config(DDPGConfig):
    """TD3 (Fujimoto et al. 2018): DDPG's keys with its three changes on."""

    twin_q: bool = doc("Two critics; the target takes the smaller of their values (clipped double Q).", True)
    policy_delay: int = doc(
        "Update the actor and the target networks every policy_delay-th gradient step (the critics "
        "every step).",
        2,
    )
    target_noise: float = doc(
        "Target policy smoothing: standard deviation of the Gaussian noise added to the target "
        "actor's action (in the actor's [-1, 1] units; 0: off).",
        0.2,
    )
