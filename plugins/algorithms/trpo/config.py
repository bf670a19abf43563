"""TRPO hyperparameters; the defaults are sb3-contrib's ``TRPO`` (they follow Schulman et al. 2015).

sb3-contrib 2.x ``TRPO.__init__``: ``learning_rate=1e-3``, ``n_steps=2048``, ``batch_size=128``,
``gae_lambda=0.95``, ``cg_max_steps=15``, ``cg_damping=0.1``, ``line_search_shrinking_factor=0.8``,
``line_search_max_iter=10``, ``n_critic_updates=10``, ``normalize_advantage=True``,
``target_kl=0.01``. The keys below say which of those each one is.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc


@dataclass
class TRPOConfig(TrainingConfig):
    lr: float = doc(
        "Learning rate of the value function's optimizer (the policy takes natural-gradient steps, "
        "which have no learning rate); sb3-contrib's learning_rate.",
        1e-3,
    )
    train_batch_size: int = doc(
        "Env steps per training step (all envs together): one policy step and the value epochs on them; "
        "sb3-contrib's n_steps x n_envs.",
        2048,
    )
    gae_lambda: float = doc("GAE lambda: 1 is Monte-Carlo, 0 one-step TD.", 0.95)
    max_kl: float = doc(
        "Trust region: the mean KL(pi_old || pi_new) over the batch a policy step may reach (delta in "
        "Schulman et al. 2015, eq. 12; sb3-contrib's target_kl).",
        0.01,
    )
    cg_iters: int = doc(
        "Conjugate-gradient iterations solving F x = g for the step direction (sb3-contrib's cg_max_steps).",
        15,
    )
    cg_damping: float = doc(
        "Damping added to the Fisher matrix, (F + damping I) x = g, which keeps CG stable where the "
        "sampled Fisher is nearly singular (sb3-contrib's cg_damping).",
        0.1,
    )
    line_search_max_iter: int = doc(
        "Backtracking steps tried before the policy step is given up and the old policy kept "
        "(sb3-contrib's line_search_max_iter).",
        10,
    )
    line_search_shrink: float = doc(
        "Each backtracking step multiplies the step by this (sb3-contrib's line_search_shrinking_factor).",
        0.8,
    )
    vf_num_sgd_iter: int = doc(
        "Epochs of minibatch steps fitting the value function on each train batch "
        "(sb3-contrib's n_critic_updates).",
        10,
    )
    vf_sgd_minibatch_size: int = doc("Rows per value-function minibatch (sb3-contrib's batch_size).", 128)
    normalize_advantages: bool = doc(
        "Normalize the advantages over each train batch (mean 0, std 1) before the policy step.", True
    )

    sub_sampling_factor: int = doc(
        "The policy step (surrogate, its gradient, the Fisher-vector products and the line search's KL) "
        "reads every k-th row of the train batch; the value fit reads all of them (sb3-contrib's "
        "sub_sampling_factor; Schulman et al. 2015 computed the Fisher-vector products on 10% of the "
        "data). With a conv net each CG iteration is a double backward pass over the rows, so 4-10 "
        "cuts the policy step on Atari frames about that much. 1: every row.",
        1,
    )

    def check(self, fail) -> None:
        if not 0 <= self.gae_lambda <= 1:
            raise fail("training.gae_lambda", f"expected a number in [0, 1], got {self.gae_lambda}")
        if not self.max_kl > 0:
            raise fail("training.max_kl", f"expected a positive number, got {self.max_kl}")
        if self.cg_damping < 0:
            raise fail("training.cg_damping", f"expected 0 or more, got {self.cg_damping}")
        if not 0 < self.line_search_shrink < 1:
            raise fail(
                "training.line_search_shrink", f"expected a number in (0, 1), got {self.line_search_shrink}"
            )
        for key in (
            "cg_iters",
            "line_search_max_iter",
            "vf_num_sgd_iter",
            "vf_sgd_minibatch_size",
            "sub_sampling_factor",
        ):
            if getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
