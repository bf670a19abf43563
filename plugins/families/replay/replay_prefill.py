"""The replay buffer pre-filled from datasets (``offline.input`` on a replay algorithm).

With ``offline.input`` set, a replay run (dqn, sac, td3, ddpg ...) starts with the datasets'
transitions in its replay buffer, as the online samples would have put them there: observations
preprocessed and filtered by the run's own rollout worker, ``n_step`` returns over each recorded
episode (truncated episodes bootstrap, terminated ones do not), the same columns. Together with
``checkpoint.init_from`` this is how an offline ``cql`` / ``discrete_cql`` run continues online
as ``sac`` / ``dqn`` with the data it learned from (docs/offline-algorithms.md#offline-to-online).

Episodes are read whole, in an order drawn from the run's seed, until the buffer is full (a
dataset larger than ``training.buffer_size`` fills it with a random subset of its episodes).
Recorded episodes get negative ``eps_id`` values, so no id collides with a sampled episode's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import n_step_transitions
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType

logger = logging.getLogger(__name__)

#: Columns a prefilled row can have; a replay buffer holding any other column can't be prefilled.
DERIVABLE = {
    SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, SB.STEP_TYPES, SB.PREV_ACTIONS, SB.EPS_ID, SB.T,
    SB.NEXT_OBS, SB.ACTION_MASK, SB.NEXT_ACTION_MASK,
}  # fmt: skip


def episode_fragment(episode: Any, collector: Any, index: int) -> SB:
    """One recorded episode of ``T`` actions as a time-major ``[T+1, 1]`` fragment in the sampler's
    layout (ALF: row 0 FIRST with reward 0, the reward of action ``t`` on row ``t+1``, the final row
    LAST with discount 0 when the episode terminated), observations as the policy sees them."""
    steps = len(episode.actions)
    preprocessor = collector.preprocessor
    features = np.asarray(preprocessor.transform(episode.observations), dtype=np.float32)
    if collector.obs_filter is not None:
        features = collector.obs_filter.apply(features)
    actions = np.asarray(episode.actions)
    step_types = np.full(steps + 1, StepType.MID, dtype=np.int32)
    step_types[0] = StepType.FIRST
    ended = bool(episode.terminations[-1] or episode.truncations[-1]) if steps else False
    if ended:
        step_types[-1] = StepType.LAST
    discounts = np.ones(steps + 1, dtype=np.float32)
    if ended and bool(episode.terminations[-1]):
        discounts[-1] = 0.0
    rewards = np.zeros(steps + 1, dtype=np.float32)
    rewards[1:] = episode.rewards
    padded_actions = np.concatenate([actions, np.zeros_like(actions[:1])])  # the LAST row's is ignored
    prev_actions = np.concatenate([np.zeros_like(actions[:1]), actions])
    columns = {
        SB.OBS: features,
        SB.ACTIONS: padded_actions,
        SB.REWARDS: rewards,
        SB.DISCOUNTS: discounts,
        SB.STEP_TYPES: step_types,
        SB.PREV_ACTIONS: prev_actions,
        SB.EPS_ID: np.full(steps + 1, -1 - index, dtype=np.int64),
        SB.T: np.arange(steps + 1, dtype=np.int64),
    }
    mask = preprocessor.action_mask(episode.observations)
    if mask is not None:
        columns[SB.ACTION_MASK] = np.asarray(mask, dtype=bool)
    return SB({key: value[:, None] for key, value in columns.items()})  # [T+1, B=1, ...]


def prefill_rows(
    data: Any, collector: Any, n_step: int, gamma: float, capacity: int, seed: Any
) -> Iterator[SB]:
    """Replay rows of whole recorded episodes, in an order drawn from ``seed``, until ``capacity``
    rows have been given (the last episode's rows are cut to fit)."""
    rng = np.random.default_rng(None if seed is None else [seed, 0x9F1])
    given = 0
    for index, episode in enumerate(data.episodes(rng=rng)):
        if len(episode.actions) == 0:
            continue
        rows = n_step_transitions(episode_fragment(episode, collector, index), n_step, gamma)
        rows = rows.slice(0, min(len(rows), capacity - given))
        given += len(rows)
        yield rows
        if given >= capacity:
            return


def fit_filter(data: Any, collector: Any, capacity: int) -> int:
    """Give a fresh observation filter the statistics of the observations that go into the buffer
    (their first ``capacity`` rows' worth of episodes), as sampling them would have."""
    counted = 0
    for episode in data.episodes():
        features = np.asarray(collector.preprocessor.transform(episode.observations), dtype=np.float32)
        collector.obs_filter(features)
        counted += len(features)
        if counted >= capacity:
            break
    return counted


def open_for(trainer: Any) -> Any:
    """The datasets of ``offline.input``, checked against ``trainer``'s env and policies when the run
    starts (a dataset of another env fails before any env step)."""
    from rlgear.offline.dataset import open_datasets  # the reader (and minari) only when a run reads

    config = trainer.config
    if len(trainer.replay_buffers) != 1:
        raise config.fail(
            "offline.input",
            "pre-filling replay from a dataset needs a single-policy run (a Minari dataset holds one "
            f"agent's episodes); this run has policies {', '.join(trainer.replay_buffers)}",
        )
    worker = trainer.workers.local_worker
    return open_datasets(
        config.offline.input, "offline.input", worker.observation_space, worker.action_space, config.env.name
    )


def prefill(trainer: Any, data: Any) -> int:
    """Fill ``trainer``'s replay buffer from ``data`` (:func:`open_for`); returns the rows added.

    Called after the run's first sampled rows are in the buffer: they fix its columns, which the
    recorded rows then take (a column a dataset can't give is a clear error, not a broken buffer)."""
    config = trainer.config
    worker = trainer.workers.local_worker
    (pid,) = trainer.replay_buffers
    buffer = trainer.replay_buffers[pid]
    collector = worker.collectors[pid]
    training = trainer.policy_map[pid].config.training
    capacity = buffer.capacity - len(buffer)
    if collector.obs_filter is not None and config.checkpoint.init_from is None:
        fit_filter(data, collector, capacity)
        state = collector.obs_filter.get_state()
        trainer.workers.foreach_worker(lambda w, s=state, p=pid: w.obs_filters[p].set_state(s))
    added = 0
    for rows in prefill_rows(data, collector, training.n_step, training.gamma, capacity, config.seed):
        buffer.add(_fit_columns(rows, buffer, config))
        added += len(rows)
    logger.info(
        "offline.input: replay buffer pre-filled with %d transitions of %d recorded episodes",
        added,
        data.total_episodes,
    )
    return added


def _fit_columns(rows: SB, buffer: Any, config: Any) -> SB:
    """``rows`` with exactly the buffer's columns and dtypes (a column the data can't give, or a
    dtype that would lose information, is an error naming ``offline.input``)."""
    stored = buffer.columns
    missing = sorted(set(stored) - set(rows))
    if missing:
        raise config.fail(
            "offline.input",
            f"this run's replay rows hold {', '.join(missing)}, which a dataset does not record; "
            "pre-filling replay is not possible for this algorithm and model",
        )
    out = {}
    for key, dtype in stored.items():
        value = np.asarray(rows[key])
        if not np.can_cast(value.dtype, dtype, casting="same_kind"):
            raise config.fail(
                "offline.input",
                f"the dataset's '{key}' are {value.dtype}, this run's replay stores {dtype}",
            )
        out[key] = value.astype(dtype, copy=False)
    return SB(out)
