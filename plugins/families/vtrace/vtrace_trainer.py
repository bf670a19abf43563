"""VTraceTrainer: the asynchronous learner every V-trace algorithm shares (IMPALA, APPO).

Espeholt et al. 2018 (arXiv:1802.01561): actors sample with whatever weights
they last received; the learner consumes fragments as they arrive, never
waiting for the slowest actor, and corrects for the policy lag with V-trace.
Per training step:
  1. take every sample request that has finished (async sampling keeps
     ``workers.max_requests_in_flight_per_worker`` requests queued on each
     remote worker and re-issues one as soon as one returns);
  2. queue the fragments; while the queue holds ``train_batch_size`` env
     steps, take one learner update on them (V-trace targets are computed in
     the loss, from the learner's current values and log-probabilities), then
     :meth:`VTraceTrainer.after_learner_update` (APPO's target network);
  3. send the new weights to each worker that returned samples, once it is
     ``broadcast_interval`` learner updates behind.

Fragments stay sequences: postprocessing turns a ``[T+1, B]`` time-major
fragment into ``B`` rows of ``T+1`` steps (``[B, T+1, ...]``, the last step is
the bootstrap), because V-trace runs along time inside the loss.

On a multi-agent env each agent's stream is compacted at the fragment cut
(:mod:`rlgear.sampling.sampler`), so it may hold fewer than ``T+1`` rows (an
agent that joined late or finished early). Such a stream is padded at its end to
``T+1`` rows (:func:`pad_agent_stream`), so the learner still gets one fixed
length and V-trace runs along one agent's stream only.

An algorithm subclasses :class:`VTraceTrainer` with its name, config (a
:class:`rlgear.plugins.families.vtrace.config.VTraceConfig`) and policies, whose ``loss`` reads the
sequences this trainer makes.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from rlgear.config import RunConfig
from rlgear.distributed.async_ops import AsyncSampler
from rlgear.distributed.rollout_ops import learn_per_policy
from rlgear.errors import ConfigError
from rlgear.exploration import COLUMN_PREFIX
from rlgear.sample_batch import MultiAgentBatch, SampleBatch, concat_any
from rlgear.sampling.sequences import makes_own_sequences
from rlgear.timestep import StepType
from rlgear.trainer import Trainer

_LAST = int(StepType.LAST)

#: Columns the learner needs; everything else the evaluator records is dropped before the queue.
SEQUENCE_COLUMNS = (
    SampleBatch.OBS,
    SampleBatch.ACTIONS,
    SampleBatch.REWARDS,
    SampleBatch.DISCOUNTS,
    SampleBatch.STEP_TYPES,
    SampleBatch.ACTION_LOGP,
)


def pad_agent_stream(fragment: SampleBatch, rows: int) -> SampleBatch:
    """A time-major ``[n, B]`` fragment of ``n < rows`` rows padded at its end to ``[rows, B]``.

    Why padding rather than cutting streams into chunks: a chunk would need its own bootstrap
    row, and V-trace's trace would stop at every chunk edge; padding keeps each agent's whole
    stream of the fragment in one sequence, as on a single-agent env. The padding needs no mask
    in the loss, because a LAST row is exactly what V-trace and the loss already ignore: its
    ``v_s - V(x_s)`` is 0, its advantage is 0, it is not learned and no statistic counts it (the
    trace of the row before it reads only that row's reward, discount and value). So the stream's
    own last row, its bootstrap row, is marked LAST (its reward and discount stay, they belong to
    the step into it), and the padding rows are copies of it (real observations, actions, action
    masks and log-probabilities, so every term stays finite) marked LAST with reward and
    discount 0. V-trace targets, advantages, losses and statistics of the real rows are those of
    the unpadded stream (tested against a numpy reference). A recurrent learner runs over the
    padding after the real rows, so it changes no real row's state either.
    """
    n = len(fragment[SampleBatch.STEP_TYPES])
    if n >= rows:
        return fragment
    edge = np.full(rows - n, n - 1)
    out = {}
    for key, values in fragment.items():
        values = np.asarray(values)
        out[key] = np.concatenate([values, values[edge]]) if values.ndim and len(values) == n else values
    out[SampleBatch.STEP_TYPES][n - 1 :] = _LAST
    out[SampleBatch.REWARDS][n:] = 0
    out[SampleBatch.DISCOUNTS][n:] = 0
    return SampleBatch(out)


class VTraceTrainer(Trainer):
    """The asynchronous V-trace learner; subclasses set ``name``, ``config_class`` and ``policies``."""

    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})

    recurrent = True
    relational = True  # the catalog actor-critic, whose encoder it is
    multi_agent = True  # per-agent streams padded to the fragment's length; the learner per policy

    @staticmethod
    @makes_own_sequences
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        """``[T+1, B]`` time-major fragment -> ``B`` sequences ``[B, T+1, ...]`` (bootstrap row kept).

        With ``model.lstm`` (or ``model.attention``) each sequence also carries the actor's state
        before its first step (``state_in_<k>``, ``[B, width]``) and the previous actions; the
        learner runs the model along the whole fragment, resetting the state at FIRST rows. Fixed-length sequences that cross
        episodes, rather than padded per-episode chunks, because V-trace runs along the fragment and
        bootstraps from its last row: a chunk cut at ``max_seq_len`` would lack that row.

        On a multi-agent env, an agent stream shorter than the fragment (``T+1`` rows) is padded
        first (:func:`pad_agent_stream`), so every sequence has the same length.
        """
        fragment = pad_agent_stream(fragment, config.rollout_fragment_length() + 1)
        columns = (
            (*SEQUENCE_COLUMNS, SampleBatch.ACTION_MASK)
            if SampleBatch.ACTION_MASK in fragment
            else SEQUENCE_COLUMNS
        )
        # an exploration plugin's columns travel as sequences too, kept until its module has learned
        # from them (learn_exploration_on_sequences)
        columns = (*columns, *(key for key in fragment if key.startswith(COLUMN_PREFIX)))
        out = {key: np.swapaxes(fragment[key], 0, 1) for key in columns}
        if config.model.recurrent:  # model.lstm or model.attention
            out[SampleBatch.PREV_ACTIONS] = np.swapaxes(fragment[SampleBatch.PREV_ACTIONS], 0, 1)
            for k in range(2):
                out[SampleBatch.state_in(k)] = fragment[SampleBatch.state_in(k)][0]
        return SampleBatch(out)

    def setup(self, config: RunConfig) -> None:
        if config.workers.batch_mode != "truncate_episodes":
            raise ConfigError(
                f"{config.source}: workers.batch_mode: {self.name} learns on fixed-length fragments "
                f"(V-trace runs along time), expected 'truncate_episodes', got '{config.workers.batch_mode}'"
            )
        super().setup(config)
        self.sampler = AsyncSampler(
            self.workers, max_requests_in_flight_per_worker=config.workers.max_requests_in_flight_per_worker
        )
        self.num_learner_updates = 0
        self._queue: list[tuple[SampleBatch, int]] = []
        self._weights_baseline = 0  # the learner update every worker's weights are at least from
        self._weights_update_of: dict[int, int] = {}  # worker id -> learner update its weights are from
        # Per worker, the weights (learner update count) each in-flight request samples with:
        # Ray runs an actor's calls in order, and the sampler re-issues a request as soon as
        # one returns, before this step's broadcast, so a request samples with the weights the
        # worker held when the previous one returned.
        self._request_weights: dict[int, collections.deque[int]] = {}
        self._last_stats: dict[str, float] = {}

    def training_step(self) -> dict[str, float]:
        training = self.config.training
        returned: set[int] = set()
        lags = []
        for batch, steps, worker_id in self.sampler.get_ready():
            self._queue.append((batch, steps))
            returned.add(worker_id)
            if worker_id != 0:  # the local evaluator acts with the learner's own policy
                lags.append(self._policy_lag_of_arrival(worker_id))
        while sum(steps for _, steps in self._queue) >= training.train_batch_size:
            batch, env_steps = self._take_learner_batch(training.train_batch_size)
            batch, exploration_stats = self.learn_exploration_on_sequences(batch)
            if isinstance(batch, MultiAgentBatch):  # each trained policy learns on its own sequences
                for pid in self.policies_to_train:
                    self.policy_map[pid].set_global_timestep(self.timesteps_total)
                self._last_stats = self.learner_stats(
                    learn_per_policy(self.policy_map, batch, self.policies_to_train)
                )
            else:
                self.policy.set_global_timestep(self.timesteps_total)  # for lr schedules
                self._last_stats = self.policy.learn_on_batch(batch)
            self.num_learner_updates += 1
            self._last_stats.update(self.after_learner_update(env_steps))
            self._last_stats.update(exploration_stats)
        self._broadcast(returned - {0}, training.broadcast_interval)
        stats = dict(self._last_stats)
        stats["num_learner_updates"] = float(self.num_learner_updates)
        stats["learner_queue_env_steps"] = float(sum(steps for _, steps in self._queue))
        if lags:
            stats["policy_lag"] = float(np.mean(lags))
        return stats

    def learn_exploration_on_sequences(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """With an ``exploration`` plugin: train its module on the transitions of ``batch``'s
        ``[B, T+1]`` sequences and return the sequences without the ``exploration_*`` columns.

        Why flattened and masked: the module learns from transitions ``(obs[t], action[t],
        obs[t+1])``; a sequence's last row is the bootstrap (its transition is in the next
        fragment), and a LAST row's action was never taken (the reward side gives it 0 too).
        """
        if self.config.exploration.name is None or isinstance(batch, MultiAgentBatch):
            return batch, {}  # a multiagent section with a plugin is refused at config time
        columns = [key for key in batch if key.startswith(COLUMN_PREFIX)]
        if not columns:
            return batch, {}
        taken = np.asarray(batch[SampleBatch.STEP_TYPES])[:, :-1] != _LAST
        rows = SampleBatch(
            {
                key: np.asarray(batch[key])[:, :-1][taken]
                for key in (SampleBatch.OBS, SampleBatch.ACTIONS, *columns)
            }
        )
        _, stats = self.learn_exploration(rows)
        return SampleBatch({k: v for k, v in batch.items() if k not in columns}), stats

    def after_learner_update(self, env_steps: int) -> dict[str, float]:
        """Called after every learner update on a batch of ``env_steps`` env steps; returns extra
        learner stats. Nothing here; APPO updates its target network."""
        return {}

    def _take_learner_batch(self, env_steps: int) -> tuple[SampleBatch | MultiAgentBatch, int]:
        """The oldest queued fragments, until they hold ``env_steps`` env steps, and their env steps."""
        taken, steps = [], 0
        while steps < env_steps:
            batch, count = self._queue.pop(0)
            taken.append(batch)
            steps += count
        return concat_any(taken), steps

    def _weights_of(self, worker_id: int) -> int:
        return self._weights_update_of.get(worker_id, self._weights_baseline)

    def _policy_lag_of_arrival(self, worker_id: int) -> int:
        """Learner updates between the weights the arriving batch was sampled with and now.

        Exact while no worker is replaced (a replacement starts with the current
        weights, so the figure over-states its first batches' lag).
        """
        in_flight = self._request_weights.setdefault(
            worker_id,
            collections.deque(
                [self._weights_baseline] * self.config.workers.max_requests_in_flight_per_worker
            ),
        )
        sampled_with = in_flight.popleft() if in_flight else self._weights_baseline
        in_flight.append(self._weights_of(worker_id))  # the request the sampler has just re-issued
        return max(0, self.num_learner_updates - sampled_with)

    def _broadcast(self, worker_ids: set[int], interval: int) -> None:
        """Send the learner's weights to the workers among ``worker_ids`` ``interval`` updates behind."""
        due = [w for w in sorted(worker_ids) if self.num_learner_updates - self._weights_of(w) >= interval]
        if due:
            self.workers.sync_weights(due)  # one object-store put for all of them
            for worker_id in due:
                self._weights_update_of[worker_id] = self.num_learner_updates

    def get_algorithm_state(self) -> dict[str, Any]:
        # Queued fragments are not saved: they are behaviour data of the old run's actors.
        return {"num_learner_updates": self.num_learner_updates}

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.num_learner_updates = int(state.get("num_learner_updates", 0))
        self._weights_baseline = self.num_learner_updates  # restore() then sends these weights to all
        self._queue.clear()
        self._weights_update_of.clear()
        self._request_weights.clear()
