"""Scoring many parameter vectors in one vectorized pass over an evaluator's env slots.

Why: parameter-space algorithms (ES, ARS, CEM) score a population of weight
vectors by whole episodes. With one weight set per evaluator they would play
candidates one after another, leaving all but one env slot idle or forcing a
weight swap per candidate. Here every env slot acts with its own candidate
(the policy's ``compute_population_actions``: one batched forward pass for all
slots), and a slot takes the next candidate as soon as its episode ends.

Episodes are whole: the envs are reset when the call starts (seeded by the
env's own RNG, so successive calls see different starts), and a slot's next
candidate begins at the FIRST step that follows its LAST. A slot with no
candidate left keeps stepping with the parameters it had (vector envs step
together); its episodes are neither scored nor reported, but their env steps
are counted like every other (they were taken).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.errors import UnsupportedError


@dataclass
class PopulationResult:
    """Per-candidate episode summaries of one :func:`evaluate_population` call.

    ``returns[i, k]`` and ``lengths[i, k]``: the undiscounted return (every reward,
    the final step's included) and the env steps of candidate ``i``'s ``k``-th
    episode. ``env_steps``: every env step the call took, on all slots.
    """

    returns: np.ndarray  # float64 [N, episodes_per_candidate]
    lengths: np.ndarray  # int64 [N, episodes_per_candidate]
    env_steps: int


def evaluate_population(
    evaluator: Any,
    parameters: np.ndarray,
    episodes_per_candidate: int = 1,
    report_episodes: bool = False,
) -> PopulationResult:
    """Play ``episodes_per_candidate`` whole episodes with each row of ``parameters`` ``[N, P]``.

    ``parameters`` rows are flat weight vectors in the layout of the evaluator's
    policy (``policy.layout``, a :class:`~rlgear.numpy_policy.FlatLayout`); the policy
    must have ``compute_population_actions``. ``report_episodes``: the scored episodes
    also go to the evaluator's episode metrics (``pop_metrics``: the run's
    ``episode_return_mean``); otherwise they are returned only. Env steps always count.
    """
    if getattr(evaluator, "_multi", None) is not None:
        raise UnsupportedError("evaluating a population needs a single-agent env (this one is multi-agent)")
    policy = evaluator.policy
    if not hasattr(policy, "compute_population_actions"):
        raise UnsupportedError(
            f"policy {type(policy).__name__} has no compute_population_actions(timestep, parameters): "
            "population evaluation needs one (rlgear.numpy_policy.NumpyMLPPolicy has it)"
        )
    parameters = np.asarray(parameters, np.float32)
    if parameters.ndim != 2:
        raise ValueError(f"parameters must be [num_candidates, num_params], got shape {parameters.shape}")
    num_candidates = parameters.shape[0]
    jobs = [(i, k) for i in range(num_candidates) for k in range(episodes_per_candidate)]
    returns = np.zeros((num_candidates, episodes_per_candidate), np.float64)
    lengths = np.zeros((num_candidates, episodes_per_candidate), np.int64)
    num_slots = evaluator.num_envs
    slot_job: list[tuple[int, int] | None] = [None] * num_slots
    slot_parameters = np.repeat(parameters[:1], num_slots, axis=0) if num_candidates else None
    next_job = 0
    for slot in range(num_slots):
        if next_job < len(jobs):
            slot_job[slot] = jobs[next_job]
            slot_parameters[slot] = parameters[jobs[next_job][0]]
            next_job += 1
    steps_before = evaluator._env_steps
    if not jobs:
        return PopulationResult(returns, lengths, 0)
    timestep = evaluator.reset()
    active = sum(job is not None for job in slot_job)
    while active:
        actions = policy.compute_population_actions(timestep, slot_parameters)
        before = len(evaluator._finished)
        timestep = evaluator._step(actions)
        finished = evaluator._finished[before:]
        del evaluator._finished[before:]
        for summary in finished:
            slot = summary["env_id"]
            job = slot_job[slot]
            if job is None:
                continue  # an idle slot's episode
            returns[job] = summary.get("wrapped_return", summary["episode_return"])  # what training sees
            lengths[job] = summary["length"]
            if report_episodes:
                evaluator._finished.append(summary)
            if next_job < len(jobs):
                slot_job[slot] = jobs[next_job]
                slot_parameters[slot] = parameters[jobs[next_job][0]]
                next_job += 1
            else:
                slot_job[slot] = None
                active -= 1
    return PopulationResult(returns, lengths, evaluator._env_steps - steps_before)


def parallel_evaluate_population(
    workers: Any,
    parameters: np.ndarray,
    episodes_per_candidate: int = 1,
    report_episodes: bool = False,
) -> PopulationResult:
    """:func:`evaluate_population` over a WorkerSet: the rows split into one contiguous share per
    remote worker (the local evaluator's, without remote workers), results in row order.

    The parameter vectors travel to the workers with the request: fine for small policies (a
    CEM over a linear policy); an algorithm over large vectors sends noise indices instead
    (:mod:`rlgear.plugins.families.evolution.evolution`). A worker that dies has its share re-issued
    (:func:`rlgear.distributed.async_ops.run_tasks`).
    """
    from rlgear.distributed.async_ops import run_tasks

    parameters = np.asarray(parameters, np.float32)
    shares = max(1, len(workers.remote_worker_ids)) if workers.has_remote_workers else 1
    chunks = [chunk for chunk in np.array_split(parameters, shares) if len(chunk)]
    results, _ = run_tasks(
        workers, _evaluate_share, [(chunk, episodes_per_candidate, report_episodes) for chunk in chunks]
    )
    return PopulationResult(
        np.concatenate([r.returns for r in results]),
        np.concatenate([r.lengths for r in results]),
        sum(r.env_steps for r in results),
    )


def _evaluate_share(evaluator: Any, share: tuple[np.ndarray, int, bool]) -> tuple[PopulationResult, int]:
    result = evaluate_population(evaluator, *share)
    return result, result.env_steps
