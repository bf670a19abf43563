"""IQN hyperparameters and the framework-free tau sampling both backends share.

Dabney et al. 2018b ("Implicit Quantile Networks for Distributional Reinforcement Learning", IQN)
keep QR-DQN's loss (the quantile Huber loss) and replace its ``N`` fixed fractions by fractions
``tau ~ U[0, 1]`` sampled afresh for every row and every step, fed to the network through a cosine
embedding. So the keys are QR-DQN's (double Q, dueling, n-step, prioritized replay, the epsilon
schedule, ``kappa``) with ``num_quantiles`` replaced by the three sample counts of the paper
(``N``, ``N'``, ``K``) and the embedding's cosine count ``n``. Noisy nets are refused: IQN's head
has no noisy layers here (Dabney et al. explore epsilon-greedily too).

The taus come from numpy generators of the policy (seeded from ``seed``, saved in its checkpoint,
the same stream on both backends), so a run and a resumed run draw the same taus, and a test can
predict them from a copy of the generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.dqn.qrdqn_config import QRDQNConfig
from rlgear.sample_batch import SampleBatch

#: Batch columns the policies add before a learning step: the online taus ``[B, N]``, the target
#: network's taus ``[B, N']`` and the taus of the next action's choice ``[B, K]``.
TAUS, TARGET_TAUS, NEXT_TAUS = "_iqn_taus", "_iqn_target_taus", "_iqn_next_taus"
TAU_COLUMNS = (TAUS, TARGET_TAUS, NEXT_TAUS)


@dataclass
class IQNConfig(QRDQNConfig):
    """QR-DQN's keys (see :class:`~rlgear.plugins.algorithms.dqn.qrdqn_config.QRDQNConfig`) with the
    fixed quantile count replaced by IQN's sample counts."""

    # Not a key: IQN samples its fractions (num_tau_samples and the two below) instead.
    num_quantiles: ClassVar[int] = 1

    num_tau_samples: int = doc(
        "N: online-network taus per row in the loss (Dabney et al. 2018b, Atari: 64).", 64
    )
    num_tau_prime_samples: int = doc(
        "N': target-network taus per row, the target distribution's samples (Dabney et al. 2018b: 64).",
        64,
    )
    num_quantile_samples: int = doc(
        "K: taus per row whose mean quantile value is Q(s, a), for acting and for choosing the next "
        "action of the target (Dabney et al. 2018b: 32).",
        32,
    )
    num_cosines: int = doc(
        "n: cosines cos(pi i tau), i = 0..n-1, of the tau embedding (Dabney et al. 2018b, eq. 4: 64).",
        64,
    )

    def check(self, fail) -> None:
        super().check(fail)
        for key in ("num_tau_samples", "num_tau_prime_samples", "num_quantile_samples", "num_cosines"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise fail(
                    f"training.{key}",
                    f"expected a positive integer (Dabney et al. 2018b: 64 or 32), got {value!r}",
                )
        if self.noisy:
            raise fail(
                "training.noisy",
                "iqn explores epsilon-greedily and its network has no noisy layers: expected false, got true",
            )


def draw_learning_taus(rng: np.random.Generator, rows: int, training: IQNConfig) -> dict[str, np.ndarray]:
    """Fresh ``U[0, 1)`` taus for one learning step of ``rows`` rows, float32, drawn in this order:
    the online taus ``[rows, N]``, the target taus ``[rows, N']``, the next-action taus ``[rows, K]``."""
    shapes = {
        TAUS: training.num_tau_samples,
        TARGET_TAUS: training.num_tau_prime_samples,
        NEXT_TAUS: training.num_quantile_samples,
    }
    return {key: rng.random((rows, width)).astype(np.float32) for key, width in shapes.items()}


def acting_taus(rng: np.random.Generator, rows: int, training: IQNConfig) -> np.ndarray:
    """``[rows, K]`` fresh taus for acting: each row's Q-values are its K quantile values' mean."""
    return rng.random((rows, training.num_quantile_samples)).astype(np.float32)


class TauSampling:
    """The tau generators and the learning steps' taus, the same on both backends. Mixed in before the
    backend policy (``class IQNTorchPolicy(TauSampling, QRDQNTorchPolicy)``):

    - ``tau_rng`` draws the learning taus, ``acting_tau_rng`` the acting ones; both are saved in the
      checkpoint meta, so a restored run draws the taus it would have drawn (``Policy.reseed`` already
      gives every numpy generator attribute a new stream);
    - :meth:`learn_on_batch` and :meth:`compute_td_errors` add fresh taus to the batch as columns
      (:data:`TAU_COLUMNS`), so they travel with their rows through shuffling and data-parallel shards
      and the loss reads them like any other column (inside TF's compiled step too).
    """

    tau_rng: np.random.Generator
    acting_tau_rng: np.random.Generator
    config: Any

    def make_tau_rngs(self, seed: int | None) -> None:
        self.tau_rng = np.random.default_rng(None if seed is None else [seed, 0x1A0])
        self.acting_tau_rng = np.random.default_rng(None if seed is None else [seed, 0x1A1])

    def with_taus(self, batch: SampleBatch) -> SampleBatch:
        """``batch`` with fresh learning taus (:func:`draw_learning_taus`) as columns."""
        rows = SampleBatch(batch)
        rows.update(draw_learning_taus(self.tau_rng, len(batch), self.config.training))
        return rows

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        return super().learn_on_batch(self.with_taus(batch))

    def compute_td_errors(self, batch: SampleBatch) -> np.ndarray:
        return super().compute_td_errors(self.with_taus(batch))

    def get_state(self):  # -> PolicyState
        state = super().get_state()
        state.meta["tau_rng"] = self.tau_rng.bit_generator.state
        state.meta["acting_tau_rng"] = self.acting_tau_rng.bit_generator.state
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        for name in ("tau_rng", "acting_tau_rng"):
            if name in state.meta:
                getattr(self, name).bit_generator.state = state.meta[name]
