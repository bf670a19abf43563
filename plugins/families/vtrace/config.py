"""The hyperparameters every V-trace learner shares (IMPALA, APPO): the learner batch, V-trace's clips.

IMPALA and APPO subclass :class:`VTraceConfig` (through their own config classes) and
are trained by :class:`rlgear.plugins.families.vtrace.vtrace_trainer.VTraceTrainer`, which reads
``train_batch_size`` and ``broadcast_interval``; their policies' losses read the
``vtrace_*`` keys and the loss weights. Defaults after the IMPALA paper and RLlib's IMPALA.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc


@dataclass
class VTraceConfig(TrainingConfig):
    lr: float = doc("Learning rate.", 5e-4)
    optimizer: str = doc(
        "Optimizer (the paper uses RMSprop; Adam is the robust choice for small problems). Any value of "
        "the common training.optimizer works (a built-in or a dotted path).",
        "adam",
    )
    train_batch_size: int = doc(
        "Env steps per learner update: arriving fragments are queued and batched until they "
        "hold this many env steps.",
        500,
    )
    vtrace_clip_rho_threshold: float | None = doc(
        "rho-bar: clips the importance weights of the V-trace value targets (null: no clipping).", 1.0
    )
    vtrace_clip_pg_rho_threshold: float | None = doc(
        "Clips the importance weights of the policy-gradient advantages (null: no clipping).", 1.0
    )
    vtrace_clip_c_threshold: float | None = doc(
        "c-bar: clips the trace-cutting coefficients (null: no clipping).", 1.0
    )
    vtrace_lambda: float = doc(
        "Extra trace discount lambda of V-trace (the paper's Remark 2; 1 is plain V-trace).", 1.0
    )
    vf_loss_coeff: float = doc("Weight of the value loss 0.5 * (V(x_t) - v_t)^2.", 0.5)
    entropy_coeff: float = doc("Weight of the entropy bonus.", 0.01)
    grad_clip: float | None = doc("Clip the global gradient norm to this value.", 40.0)
    num_sgd_iter: int = doc("Passes over each learner batch (1 in the paper: every sample is used once).", 1)
    broadcast_interval: int = doc(
        "Send the learner's weights to a worker that returned samples only after this many "
        "learner updates since its last weights (1: after every update). Larger values save "
        "bandwidth and raise the policy lag that V-trace corrects.",
        1,
    )

    def check(self, fail) -> None:
        for key in ("vtrace_clip_rho_threshold", "vtrace_clip_pg_rho_threshold", "vtrace_clip_c_threshold"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise fail(f"training.{key}", f"expected a positive number or null, got {value}")
        if not 0 <= self.vtrace_lambda <= 1:
            raise fail("training.vtrace_lambda", f"expected a number in [0, 1], got {self.vtrace_lambda}")
        for key in ("vf_loss_coeff", "entropy_coeff"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or more, got {getattr(self, key)}")
        for key in ("broadcast_interval", "num_sgd_iter", "train_batch_size"):
            if getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected 1 or more, got {getattr(self, key)}")
