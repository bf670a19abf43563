"""Discrete CQL hyperparameters: DQN's loss keys, the offline loop's keys and the penalty's weight.

The Q-network and its TD loss are DQN's (:class:`~rlgear.plugins.algorithms.dqn.torch_policy.
DQNTorchPolicy`), so the keys that shape them carry DQN's names and meaning, and a discrete CQL
checkpoint's weights load into ``dqn``. DQN's keys that mean nothing offline are fixed here rather
than offered: no exploration (evaluation is greedy), no noisy layers, one atom (the penalty is
defined on Q-values, not on C51's distributions), no replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from rlgear.config.schema import doc
from rlgear.plugins.families.offline import OfflineTrainingConfig


@dataclass
class DiscreteCQLConfig(OfflineTrainingConfig):
    """Conservative Q-learning for discrete actions (Kumar et al. 2020, eq. 4 with the CQL(H)
    regulariser): DQN's TD loss plus ``min_q_weight * mean(logsumexp_a Q(s, a) - Q(s, a_data))``."""

    # Fixed: what the DQN policy reads but an offline run has no use for (see the module docstring).
    num_atoms: ClassVar[int] = 1
    v_min: ClassVar[float] = -10.0
    v_max: ClassVar[float] = 10.0
    noisy: ClassVar[bool] = False
    sigma0: ClassVar[float] = 0.5
    epsilon_initial: ClassVar[float] = 0.0
    epsilon_final: ClassVar[float] = 0.0
    epsilon_timesteps: ClassVar[int] = 0

    lr: float = doc("Learning rate (Adam).", 1e-3)
    grad_clip: float | None = doc("Clip the global gradient norm to this value (null: off).", 10.0)
    min_q_weight: float = doc(
        "Weight of the conservative penalty mean(logsumexp_a Q(s, a) - Q(s, a_data)) (Kumar et al. "
        "2020's alpha; d3rlpy's DiscreteCQL uses 1.0). 0 is offline DQN.",
        1.0,
    )
    target_network_update_freq: int = doc(
        "Gradient steps between target-network updates (offline there are no env steps to count).", 500
    )
    tau: float = doc("Target-network update: target <- tau * online + (1 - tau) * target (1.0: a copy).", 1.0)
    double_q: bool = doc(
        "Double Q-learning (van Hasselt et al. 2016): the online network picks the next action, "
        "the target network values it.",
        True,
    )
    dueling: bool = doc(
        "Dueling heads (Wang et al. 2016): Q = V + A - mean(A); as dqn's key, so the weights load into dqn.",
        True,
    )
    td_error_loss_fn: Literal["huber", "mse"] = doc(
        "Loss on the TD error: 'huber' (quadratic within huber_delta, linear outside) or 'mse' "
        "(0.5 x TD error squared).",
        "huber",
    )
    huber_delta: float = doc("Where the Huber loss turns from quadratic to linear.", 1.0)

    def check(self, fail) -> None:
        super().check(fail)
        if self.min_q_weight < 0:
            raise fail("training.min_q_weight", f"expected 0 or more, got {self.min_q_weight}")
        if self.target_network_update_freq < 1:
            raise fail(
                "training.target_network_update_freq",
                f"expected a positive integer, got {self.target_network_update_freq}",
            )
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1] (1.0 is a hard copy), got {self.tau}")
        if self.huber_delta <= 0:
            raise fail("training.huber_delta", f"expected a positive number, got {self.huber_delta}")
