"""What qmix's and vdn's loss sees of a replayed minibatch of episodes, in numpy, for both backends.

Three steps before each gradient step (:class:`LearningBatch`):

1. **Trim** the minibatch after its longest episode (:func:`~rlgear.plugins.algorithms.qmix.episodes.trim`),
   so the GRUs unroll over no padding that no episode of it has.
2. **Time limits end the return** (``training.bootstrap_truncated: false``): the last transition of
   an episode the env truncated gets discount 0, as a terminated one has, so the targets are the
   finite-horizon return the env's time limit defines. EPyMARL's benchmark learned MPE this way (its
   runner bootstraps only where the env's info says ``episode_limit``, which its MPE wrapper did not
   set). Why it matters: MPE's tasks never terminate, so with bootstrapping past the limit every
   target rests on another estimate and nothing anchors the values; QMIX's overestimation (Pan et al.
   2021, "Regularized Softmax Deep Multi-Agent Q-Learning") then grows without bound. The
   measurements are in docs/multi-agent.md, "Time limits, and QMIX's values on MPE".
3. **Standardise the rewards** (``training.standardise_rewards``), as EPyMARL's ``QLearner``: the
   minibatch's filled rewards update running statistics (count, mean, variance; Chan et al.'s
   parallel rule, float64), and the loss sees ``(r - mean) / sqrt(var + 1e-8)``. Two differences
   from EPyMARL: only filled transitions count (EPyMARL's statistics also take the zero padding after
   short episodes), and ``1e-8`` keeps the division finite before the rewards vary. Subtracting the
   mean shifts every value by a constant where episodes end only by a time limit that bootstraps;
   where they terminate it changes what ending an episode is worth, as in EPyMARL.

The reward statistics are saved in checkpoints (``reward_stats/{count,mean,m2}``), so a resumed run
standardises exactly as the uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.plugins.algorithms.qmix import episodes
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.observation_filter import EPSILON, RunningStats

#: Checkpoint array names of the reward statistics.
PREFIX = "reward_stats/"


def end_at_time_limits(batch: SampleBatch) -> SampleBatch:
    """``batch`` with discount 0 on each episode's last filled transition (the loss's targets then
    stop at a truncated end as at a terminal one; terminated episodes have 0 there already)."""
    filled = np.asarray(batch[episodes.FILLED]) > 0
    last = filled & ~np.concatenate([filled[:, 1:], np.zeros_like(filled[:, :1])], axis=1)
    return _with(batch, episodes.DISCOUNTS, np.where(last, 0.0, batch[episodes.DISCOUNTS]))


def standardise(batch: SampleBatch, stats: RunningStats) -> SampleBatch:
    """``batch`` with its filled rewards pushed into ``stats`` and then standardised by them."""
    rewards = np.asarray(batch[episodes.REWARDS], np.float64)
    filled = np.asarray(batch[episodes.FILLED]) > 0
    stats.push(rewards[filled])
    scaled = np.where(filled, (rewards - stats.mean) / np.sqrt(stats.var + EPSILON), 0.0)
    return _with(batch, episodes.REWARDS, scaled)


def _with(batch: SampleBatch, column: str, values: np.ndarray) -> SampleBatch:
    columns = {key: batch[key] for key in batch}
    columns[column] = np.asarray(values, np.float32)
    return SampleBatch(columns)


class LearningBatch:
    """Mixed in before the rest of a qmix/vdn policy: :meth:`learn_on_batch` prepares the minibatch
    (see the module docstring); the reward statistics travel in :meth:`get_state` / :meth:`set_state`."""

    config: Any

    @property
    def reward_stats(self) -> RunningStats:
        stats = getattr(self, "_reward_stats", None)
        if stats is None:
            stats = self._reward_stats = RunningStats(())
        return stats

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One gradient step on a minibatch of episodes, cut after its longest one."""
        training = self.config.training
        batch = episodes.trim(batch)
        if not training.bootstrap_truncated:
            batch = end_at_time_limits(batch)
        if not training.standardise_rewards:
            return super().learn_on_batch(batch)
        stats = self.reward_stats
        results = super().learn_on_batch(standardise(batch, stats))
        results["reward_mean"] = float(stats.mean)
        results["reward_std"] = float(np.sqrt(stats.var))
        return results

    def get_state(self) -> PolicyState:
        state = super().get_state()
        if self.config.training.standardise_rewards:
            stats = self.reward_stats
            state.arrays[f"{PREFIX}count"] = np.asarray(stats.count, np.int64)
            state.arrays[f"{PREFIX}mean"] = np.asarray(stats.mean, np.float64)
            state.arrays[f"{PREFIX}m2"] = np.asarray(stats.m2, np.float64)
        return state

    def set_state(self, state: PolicyState) -> None:
        arrays = {k.removeprefix(PREFIX): v for k, v in state.arrays.items() if k.startswith(PREFIX)}
        super().set_state(
            PolicyState({k: v for k, v in state.arrays.items() if not k.startswith(PREFIX)}, state.meta)
        )
        stats = self._reward_stats = RunningStats(())
        if arrays and self.config.training.standardise_rewards:
            stats.count = int(arrays["count"])
            stats.mean = np.asarray(arrays["mean"], np.float64).reshape(())
            stats.m2 = np.asarray(arrays["m2"], np.float64).reshape(())
