"""CrossQ hyperparameters: SAC's actor and temperature keys, the batch-normalized critics' keys.

Defaults are Bhatt et al. 2024's ("CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity", ICLR 2024, appendix: hyperparameters) as
sb3-contrib's / sbx's ``CrossQ`` keep them: lr 1e-3, Adam beta1 0.5, policy delay 3, critics
2048 x 2048 wide (sb3-contrib defaults to 1024 x 1024 for speed), batch-norm momentum 0.01 in
torch's convention (the paper's and sbx's 0.99 is ``1 - momentum``), eps 0.001. There is no target
network, so SAC's ``tau`` is not a key (the class attribute below reads 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rlgear.config.schema import doc
from rlgear.plugins.families.replay.config import ActorCriticReplayConfig


def _paper_adam() -> dict[str, Any]:
    return {"betas": [0.5, 0.999]}


@dataclass
class CrossQConfig(ActorCriticReplayConfig):
    """CrossQ (Bhatt et al. 2024) on SAC's actor and temperature."""

    #: No target critics: nothing is Polyak-averaged (the shared base reads ``tau``).
    tau: ClassVar[float] = 1.0

    lr: float = doc("Learning rate (Adam) of the actor, the critics and the temperature (paper: 1e-3).", 1e-3)
    gamma: float = doc("Discount factor.", 0.99)
    optimizer_epsilon: float = doc("Epsilon of adam.", 1e-8)
    optimizer_kwargs: dict[str, Any] = doc(
        "Keyword arguments of the optimizer besides the learning rate: the paper's Adam betas "
        "(0.5, 0.999) by default (beta1 = 0.5, Bhatt et al. 2024's appendix).",
        factory=_paper_adam,
    )
    initial_alpha: float = doc("The entropy temperature alpha at the start.", 1.0)
    tune_alpha: bool = doc(
        "Tune alpha towards target_entropy as SAC does (on the delayed actor steps); false keeps "
        "initial_alpha fixed.",
        True,
    )
    target_entropy: float | None = doc(
        "The entropy alpha is tuned towards, in the squashed [-1, 1] action space (null: -|A|).", None
    )
    policy_delay: int = doc(
        "Update the actor and alpha every policy_delay-th gradient step; the critics learn every step "
        "(paper: 3).",
        3,
    )
    critic_hidden_sizes: list[int] = doc(
        "Hidden layer widths of each critic (the actor uses model.hidden_sizes): the paper's wide "
        "2048 x 2048 (sb3-contrib: 1024 x 1024).",
        factory=lambda: [2048, 2048],
    )
    batch_norm_momentum: float = doc(
        "Running statistics of the critics' batch normalization: running <- running + momentum x "
        "(batch - running) each gradient step (torch's convention; the paper's 0.99 is 1 - this).",
        0.01,
    )
    batch_norm_eps: float = doc("Added to the variance before its square root in batch normalization.", 1e-3)

    def check(self, fail) -> None:
        super().check(fail)
        if self.initial_alpha <= 0:
            raise fail("training.initial_alpha", f"expected a positive number, got {self.initial_alpha}")
        if self.policy_delay < 1:
            raise fail("training.policy_delay", f"expected a positive integer, got {self.policy_delay}")
        sizes = self.critic_hidden_sizes
        if not isinstance(sizes, list) or not sizes or not all(isinstance(s, int) and s > 0 for s in sizes):
            raise fail(
                "training.critic_hidden_sizes",
                f"expected a non-empty list of positive integers, got {sizes!r}",
            )
        if not 0 < self.batch_norm_momentum <= 1:
            raise fail(
                "training.batch_norm_momentum", f"expected a number in (0, 1], got {self.batch_norm_momentum}"
            )
        if self.batch_norm_eps <= 0:
            raise fail("training.batch_norm_eps", f"expected a positive number, got {self.batch_norm_eps}")
        if self.train_batch_size < 2:
            raise fail(
                "training.train_batch_size",
                f"expected 2 or more (batch normalization needs a variance), got {self.train_batch_size}",
            )


def refuse_data_parallel(config: Any) -> None:
    """Data-parallel learners would each normalize with their shard's batch statistics, not the whole
    minibatch's: a different algorithm, so ``learners.num_learners`` >= 2 is refused."""
    learners = getattr(config, "learners", None)
    if learners is not None and learners.num_learners >= 2:
        raise config.fail(
            "learners.num_learners",
            "crossq's batch-normalized critics need the whole minibatch in one learner (its batch "
            f"statistics): expected 0 or 1, got {learners.num_learners}",
        )
