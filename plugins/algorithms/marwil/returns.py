"""MARWIL's value targets: each row's discounted return-to-go within its episode, truncation-aware.

``R_t = r_t + gamma * r_{t+1} + ... + gamma^(T-1-t) * r_{T-1} + gamma^(T-t) * B``, where ``B`` is 0
when the episode ended in a true terminal and ``V(s_T)`` (the value of the observation after the
last action, with the weights of the moment the episode is read) when it was cut by a time limit,
or when the recording stopped mid-episode. Computed by the shared
:func:`rlgear.value_ops.discounted_return`, on the episode laid out the ALF way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType, TimeStep
from rlgear.value_ops import discounted_return

TERMINATEDS = "terminateds"


def returns_to_go(rewards: np.ndarray, terminated: bool, bootstrap_value: float, gamma: float) -> np.ndarray:
    """float32 ``[T]`` returns of one episode's rows (``bootstrap_value`` is ignored if ``terminated``)."""
    steps = len(rewards)
    step_types = np.full(steps + 1, StepType.MID, dtype=np.int32)
    step_types[0], step_types[-1] = StepType.FIRST, StepType.LAST
    alf_rewards = np.concatenate(
        [[0.0], np.asarray(rewards, dtype=np.float64)]
    )  # reward arrives with the next step
    discounts = np.full(steps + 1, gamma, dtype=np.float64)
    discounts[0] = 1.0
    discounts[-1] = 0.0 if terminated else gamma
    values = np.zeros(steps + 1, dtype=np.float64)
    values[-1] = 0.0 if terminated else bootstrap_value
    return discounted_return(alf_rewards, values, step_types, discounts).astype(np.float32)


def state_value(policy: object, observation: np.ndarray) -> float:
    """``V(observation)`` of the policy's value head, for one observation ``[1, ...]`` as model input."""
    timestep = TimeStep(
        step_type=np.full(1, StepType.LAST, dtype=np.int32),
        reward=np.zeros(1, dtype=np.float32),
        discount=np.ones(1, dtype=np.float32),
        observation=observation,
        prev_action=np.zeros(1, dtype=np.float32),
        env_id=np.zeros(1, dtype=np.int32),
    )
    _, _, extras = policy.compute_actions(timestep, None, explore=False)  # type: ignore[attr-defined]
    return float(np.asarray(extras[SB.VF_PREDS]).reshape(-1)[0])


def add_value_targets(
    gamma: float, value_of: Callable[[np.ndarray], float]
) -> Callable[[SB, np.ndarray], SB]:
    """The episode postprocessing of :class:`~rlgear.plugins.families.offline.EpisodeBatches`: adds
    ``value_targets`` (returns-to-go), bootstrapping from ``value_of(final observation)`` unless the
    episode terminated."""

    def postprocess(rows: SB, final_obs: np.ndarray) -> SB:
        terminated = bool(np.asarray(rows[TERMINATEDS])[-1])
        bootstrap = 0.0 if terminated else value_of(final_obs)
        out = SB(dict(rows))
        out[SB.VALUE_TARGETS] = returns_to_go(rows[SB.REWARDS], terminated, bootstrap, gamma)
        return out

    return postprocess
