"""What every V-trace learner's TF policy shares (IMPALA, APPO); the torch backend's twin, op for op.

The batch holds sequences ``[N, T+1, ...]`` (see :mod:`rlgear.plugins.families.vtrace.vtrace_trainer`);
the base class' minibatch gather takes whole sequences (rows are sequences), as the
torch base class does. The compiled learn step has a dynamic ``N`` and a static
``T+1`` (the unroll length, fixed by ``rollout_fragment_length``), so it is traced once
per run. :func:`vtrace` is the TF twin of :func:`rlgear.value_ops.vtrace` (tested against it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from rlgear.plugins.backends.tf.policy import TFPolicy
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType

_LAST = int(StepType.LAST)


def vtrace(
    log_rhos: tf.Tensor,
    rewards: tf.Tensor,
    values: tf.Tensor,
    step_types: tf.Tensor,
    discounts: tf.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(vs, pg_advantages)`` ``[T, B]`` from time-major ``[T+1, B]`` inputs; no gradient flows.

    Same layout and definition as :func:`rlgear.value_ops.vtrace`. The
    backward recursion is a ``tf.scan`` over reversed time, so it works eagerly
    and inside ``tf.function`` with any ``T`` and ``B``.
    """
    log_rhos, rewards, values, discounts = (
        tf.stop_gradient(x) for x in (log_rhos, rewards, values, discounts)
    )
    rhos = tf.exp(log_rhos[:-1])

    def clipped(threshold: float | None) -> tf.Tensor:
        return rhos if threshold is None else tf.minimum(rhos, threshold)

    is_last = tf.equal(step_types, _LAST)
    cs = lambda_ * clipped(clip_c_threshold)
    deltas = clipped(clip_rho_threshold) * (rewards[1:] + discounts[1:] * values[1:] - values[:-1])

    def backwards(vs_minus_v_next: tf.Tensor, step: tuple[tf.Tensor, ...]) -> tf.Tensor:
        delta, discount_next, c, last = step
        accumulated = delta + discount_next * c * vs_minus_v_next
        return tf.where(last, tf.zeros_like(accumulated), accumulated)

    # vs_minus_v[t] for t = T-1 .. 0; vs_minus_v[T] (the bootstrap row) is 0.
    vs_minus_v = tf.scan(
        backwards,
        (deltas, discounts[1:], cs, is_last[:-1]),
        initializer=tf.zeros_like(values[-1]),
        reverse=True,
    )
    vs = values[:-1] + vs_minus_v
    vs_next = tf.concat([vs[1:], values[-1:]], axis=0)
    pg_advantages = clipped(clip_pg_rho_threshold) * (rewards[1:] + discounts[1:] * vs_next - values[:-1])
    pg_advantages = tf.where(is_last[:-1], tf.zeros_like(pg_advantages), pg_advantages)
    return vs, pg_advantages


class Unroll(NamedTuple):
    """A network's outputs over sequences: ``dist`` per step (flat ``[N*(T+1)]``, sequence-major),
    the rest time-major ``[T+1, N]``."""

    dist: Any
    logp: tf.Tensor
    entropy: tf.Tensor
    values: tf.Tensor


class VTraceTFPolicy(TFPolicy):
    """Base of a V-trace learner's policy: rows are whole sequences ``[N, T+1, ...]``."""

    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, SB.STEP_TYPES, SB.ACTION_LOGP)
    rows_are_sequences = True

    def to_tensors(self, batch: SB, columns: Any) -> dict[str, tf.Tensor]:
        """Sequences ``[N, T+1, ...]``: observations are flattened per step, then put back in shape."""
        tensors = super().to_tensors(batch, [c for c in columns if c != SB.OBS])
        obs = np.asarray(batch[SB.OBS])
        n, steps = obs.shape[:2]
        flat = self.preprocess(obs.reshape(n * steps, *obs.shape[2:]))
        tensors[SB.OBS] = tf.convert_to_tensor(flat.reshape(n, steps, -1))
        return tensors

    def unroll(self, batch: dict[str, tf.Tensor], model: Any = None) -> Unroll:
        """``model`` (default: the learner's) over every step of the batch's sequences."""
        model = self.model if model is None else model
        obs = batch[SB.OBS]
        n, steps = tf.shape(obs)[0], obs.shape[1]  # N is dynamic, T+1 static

        def time_major(x: tf.Tensor) -> tf.Tensor:  # [N*(T+1)] -> [T+1, N]
            return tf.transpose(tf.reshape(x, [n, steps]))

        if self.recurrent:  # along each whole sequence from its first state, zeroed at FIRST rows
            prev_actions = batch.get(SB.PREV_ACTIONS)
            dist_inputs, values, _ = model(
                tf.reshape(obs, [-1, obs.shape[-1]]),
                [batch[SB.state_in(0)], batch[SB.state_in(1)]],
                None if prev_actions is None else tf.reshape(prev_actions, [-1, *prev_actions.shape[2:]]),
                tf.reshape(batch[SB.REWARDS], [-1]),
                steps,
                tf.reshape(tf.equal(batch[SB.STEP_TYPES], int(StepType.FIRST)), [-1]),
            )
        else:
            dist_inputs, values = model(tf.reshape(obs, [-1, obs.shape[-1]]))
        mask = batch.get(SB.ACTION_MASK)  # [N, T+1, n]: each step's own mask
        dist = self.dist_class(dist_inputs, None if mask is None else tf.reshape(mask, [-1, mask.shape[-1]]))
        actions = batch[SB.ACTIONS]
        logp = time_major(dist.logp(tf.reshape(actions, [-1, *actions.shape[2:]])))
        return Unroll(dist, logp, time_major(dist.entropy()), time_major(values))

    @staticmethod
    def time_major(batch: dict[str, tf.Tensor], key: str) -> tf.Tensor:
        """Column ``key`` of the sequences, ``[N, T+1]`` -> ``[T+1, N]``."""
        return tf.transpose(batch[key])

    def vtrace_targets(
        self, batch: dict[str, tf.Tensor], log_rhos: tf.Tensor, values: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """V-trace ``(vs, pg_advantages)`` ``[T, N]`` with the run's ``gamma`` and ``vtrace_*`` keys.

        ``log_rhos`` and ``values`` are time-major ``[T+1, N]``; both are constants here.
        """
        training = self.config.training
        return vtrace(
            log_rhos=tf.stop_gradient(log_rhos),
            rewards=tf.cast(self.time_major(batch, SB.REWARDS), values.dtype),
            values=tf.stop_gradient(values),
            step_types=self.time_major(batch, SB.STEP_TYPES),
            discounts=tf.cast(self.time_major(batch, SB.DISCOUNTS), values.dtype) * training.gamma,
            clip_rho_threshold=training.vtrace_clip_rho_threshold,
            clip_pg_rho_threshold=training.vtrace_clip_pg_rho_threshold,
            clip_c_threshold=training.vtrace_clip_c_threshold,
            lambda_=training.vtrace_lambda,
        )

    def learned_steps(self, batch: dict[str, tf.Tensor], dtype: tf.DType) -> tf.Tensor:
        """``[T, N]``, 1 at the steps a loss learns: neither LAST (their action was ignored) nor the
        bootstrap row. Loss terms are sums over these divided by their count (:func:`mean_over`)."""
        return tf.cast(tf.not_equal(self.time_major(batch, SB.STEP_TYPES)[:-1], _LAST), dtype)


def mean_over(x: tf.Tensor, learned: tf.Tensor) -> tf.Tensor:
    """The mean of ``x`` ``[T, N]`` over the learned steps (0 when there is none)."""
    return tf.reduce_sum(x * learned) / tf.maximum(tf.reduce_sum(learned), 1.0)
