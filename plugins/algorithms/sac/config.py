"""SAC hyperparameters (defaults: Haarnoja et al. 2018 and Stable-Baselines3's SAC, one env)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.families.gsde import GSDEConfig
from rlgear.plugins.families.replay.config import ActorCriticReplayConfig


@dataclass
class SACConfig(GSDEConfig, ActorCriticReplayConfig):
    lr: float = doc("Learning rate (Adam) of the actor, the critics and the temperature.", 3e-4)
    gamma: float = doc("Discount factor.", 0.99)
    optimizer_epsilon: float = doc("Epsilon of adam.", 1e-8)
    tau: float = doc(
        "Polyak averaging of the target critics after every gradient step: "
        "target <- tau * online + (1 - tau) * target.",
        0.005,
    )
    initial_alpha: float = doc("The entropy temperature alpha at the start (Haarnoja et al. 2018).", 1.0)
    tune_alpha: bool = doc(
        "Tune alpha by gradient descent on -log(alpha) (log pi + target_entropy) (Haarnoja et al. 2018, "
        "eq. 18, in log alpha as Stable-Baselines3); false keeps initial_alpha fixed.",
        True,
    )
    target_entropy: float | None = doc(
        "The entropy alpha is tuned towards, in the squashed [-1, 1] action space (null: -|A|, the "
        "number of action dimensions, negated; Discrete actions: target_entropy_scale x log(n)).",
        None,
    )
    target_entropy_scale: float = doc(
        "Discrete actions only, with target_entropy null: the target is this fraction of the uniform "
        "policy's entropy log(n). 0.98 is Christodoulou 2019's (arXiv:1910.07207, sec. 4); CleanRL's "
        "sac_atari uses 0.89.",
        0.98,
    )

    log_std_init: float = doc(
        "With use_sde: the initial value of every entry of log_std (-3: Stable-Baselines3's SAC).", -3.0
    )
    use_sde_at_warmup: bool = doc(
        "With use_sde: act with gSDE's noise instead of uniform actions before learning_starts.", False
    )

    def check(self, fail) -> None:
        super().check(fail)
        self.check_sde(fail)
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1], got {self.tau}")
        if self.initial_alpha <= 0:
            raise fail("training.initial_alpha", f"expected a positive number, got {self.initial_alpha}")
        if not 0 < self.target_entropy_scale <= 1:
            raise fail(
                "training.target_entropy_scale",
                f"expected a number in (0, 1], got {self.target_entropy_scale}",
            )
