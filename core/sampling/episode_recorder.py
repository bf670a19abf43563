"""Whole episodes as the env gave them, for ``offline.output`` (a Minari dataset).

The sampler is the one place every transition of a run passes through with the env's *raw*
observations (the train batches hold preprocessed, filtered ones and no LAST rows): the in-process
rollout worker, remote workers and the external clients of ``rlgear serve`` all step one. So the
recorder sits there, assembles each env slot's episode (FIRST..LAST) and hands finished ones to the
driver with the episode metrics (:meth:`RolloutWorker.pop_metrics`), where
:mod:`rlgear.offline.recorder` writes them: one writer, whatever kind of run.

Cost: one reference per step to arrays the sampler has anyway, copies of the observation and
action rows (the env may reuse its buffers), and one gather per finished episode; the
log-probabilities a policy defers (:meth:`rlgear.policy.Policy.finish_fragment`) are completed
once per episode. Single-agent envs only: multi-agent recording is refused where the recorder
is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.timestep import StepType, TimeStep

_FIRST, _LAST = int(StepType.FIRST), int(StepType.LAST)
#: Row columns the recorder never needs (what it needs: the policy's action and its extras).
_SKIP = frozenset(
    {
        SampleBatch.OBS,
        SampleBatch.REWARDS,
        SampleBatch.DISCOUNTS,
        SampleBatch.STEP_TYPES,
        SampleBatch.PREV_ACTIONS,
        SampleBatch.EPS_ID,
        SampleBatch.T,
        SampleBatch.VF_PREDS,
    }
)


def _copy(nest: Any) -> Any:
    if isinstance(nest, dict):
        return {k: _copy(v) for k, v in nest.items()}
    if isinstance(nest, tuple):
        return tuple(_copy(v) for v in nest)
    return np.array(nest, copy=True)


def _gather(steps: list[Any], slot: int) -> Any:
    """Row ``slot`` of each step's (nested) batch, stacked over the steps: ``[len(steps), ...]``."""
    first = steps[0]
    if isinstance(first, dict):
        return {k: _gather([s[k] for s in steps], slot) for k in first}
    if isinstance(first, tuple):
        return tuple(_gather([s[i] for s in steps], slot) for i in range(len(first)))
    return np.stack([s[slot] for s in steps])


class EpisodeRecorder:
    """Assembles the episodes of a single-agent vector env from the sampler's steps.

    Per step the sampler calls :meth:`observe` with the raw TimeStep (before preprocessing) and,
    when it steps the env, :meth:`act` with what the env was given and the recorded row. An
    episode's dict (:meth:`pop`) holds ``observations`` ``[T+1]`` (a dict/tuple of arrays for
    Dict/Tuple spaces), ``actions`` ``[T]`` (the env's actions: clipped, structured),
    ``rewards`` float32 ``[T]``, ``terminations`` / ``truncations`` bool ``[T]`` (only the last can
    be true) and, when the policy reports one, ``action_logp`` float32 ``[T]`` (the behaviour
    policy's log-probability of its sampled action, before any clipping).

    Args:
        num_envs: env slots.
        finish: completes a dict of ``[T]`` row columns in place (the policy's
            ``finish_fragment`` plus the sampler's taken-action merge).
    """

    def __init__(self, num_envs: int, finish: Callable[[dict[str, np.ndarray]], None]):
        self.num_envs = num_envs
        self.finish = finish
        self._steps: list[dict[str, Any]] = []  # one entry per observed step, all slots
        self._base = 0  # absolute index of _steps[0]
        self._start = np.full(num_envs, -1, dtype=np.int64)  # absolute index of each slot's FIRST, -1: none
        self._done: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Drop the episodes in progress (the envs were reset: they will not finish)."""
        self._steps.clear()
        self._base = 0
        self._start[:] = -1

    def observe(self, ts: TimeStep) -> None:
        """A step of the env as it gave it (``ts.observation`` raw: before preprocessing and filter)."""
        step_types = np.asarray(ts.step_type)
        self._steps.append(
            {
                "obs": _copy(ts.observation),
                "reward": np.asarray(ts.reward, dtype=np.float32).copy(),
                "discount": np.asarray(ts.discount).copy(),
            }
        )
        index = self._base + len(self._steps) - 1
        if ts.valid is not None and not ts.valid.all():  # no env step there: an aborted episode
            self._start[~ts.valid] = -1
            step_types = np.where(ts.valid, step_types, -1)
        first = step_types == _FIRST
        if first.any():
            self._start[first] = index
        last = (step_types == _LAST) & (self._start >= 0)
        for slot in np.flatnonzero(last).tolist():
            self._finish_episode(slot, index)
            self._start[slot] = -1
        self._trim()

    def act(self, env_actions: Any, row: dict[str, np.ndarray]) -> None:
        """The step just observed was acted on: the env's actions and the row's columns."""
        entry = self._steps[-1]
        entry["action"] = _copy(env_actions)
        entry["row"] = {k: np.array(v, copy=True) for k, v in row.items() if k not in _SKIP}

    def pop(self) -> list[dict[str, Any]]:
        """The episodes finished since the last call."""
        done, self._done = self._done, []
        return done

    def _finish_episode(self, slot: int, end: int) -> None:
        steps = self._steps[self._start[slot] - self._base : end - self._base + 1]
        acted = steps[:-1]
        if not acted or any("action" not in s for s in acted):
            return  # a step of it was not recorded (an evaluation or a reset in between)
        rows = {k: np.stack([s["row"][k][slot] for s in acted]) for k in acted[0]["row"]}
        self.finish(rows)
        terminated = bool(steps[-1]["discount"][slot] == 0)
        terminations = np.zeros(len(acted), dtype=bool)
        truncations = np.zeros(len(acted), dtype=bool)
        (terminations if terminated else truncations)[-1] = True
        episode = {
            "observations": _gather([s["obs"] for s in steps], slot),
            "actions": _gather([s["action"] for s in acted], slot),
            "rewards": np.array([s["reward"][slot] for s in steps[1:]], dtype=np.float32),
            "terminations": terminations,
            "truncations": truncations,
        }
        logp = rows.get(SampleBatch.ACTION_LOGP)
        if logp is not None:
            episode["action_logp"] = np.asarray(logp, dtype=np.float32)
        self._done.append(episode)

    def _trim(self) -> None:
        """Forget the steps no running episode needs (bounded memory)."""
        running = self._start[self._start >= 0]
        keep_from = self._base + len(self._steps) - 1  # the current step: act() is still to come
        if running.size:
            keep_from = min(keep_from, int(running.min()))
        drop = keep_from - self._base
        if drop > 64 or (drop > 0 and drop == len(self._steps) - 1):
            del self._steps[:drop]
            self._base = keep_from
