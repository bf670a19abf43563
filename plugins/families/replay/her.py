"""Hindsight experience replay (Andrychowicz et al. 2017, arXiv:1707.01495) for the replay family.

On a goal-conditioned env (gymnasium-robotics' convention: a Dict observation with
``observation``, ``achieved_goal`` and ``desired_goal``, and ``compute_reward(achieved_goal,
desired_goal, info)``), a failed episode still teaches how to reach the goals it did achieve:
each real transition is stored again with ``desired_goal`` replaced by a goal achieved in the
same episode, its reward (and termination) recomputed by the env's own functions.

Design (docs/offpolicy.md#hindsight-experience-replay says the same for users):

* **Relabeled at insertion time**, on the evaluator, in the replay family's postprocessing: each
  real transition is followed into the buffer by ``her_k`` relabeled copies, as in the paper's
  own implementation (OpenAI baselines' first HER). So exactly ``k / (k + 1)`` of the stored rows
  are relabeled, SB3's ``future_p = k / (k + 1)`` for its sample-time relabeling. Why not at
  sample time: the replay buffer (uniform or prioritized, sharded for Ape-X, checkpointed) stays
  a plain table of transitions that knows nothing of episodes, and every algorithm and buffer of
  the family gets HER unchanged. The cost: a buffer of ``buffer_size`` rows holds
  ``buffer_size / (k + 1)`` real transitions, and a relabeled goal is drawn once, not afresh at
  every replay.
* **Whole episodes**: ``future`` needs the steps after a transition, so HER requires
  ``workers.batch_mode: complete_episodes`` (each postprocessed fragment is then one episode,
  FIRST to LAST). Nothing is kept across fragments, so HER adds no state to checkpoints; the goal
  draws come from a generator seeded from ``seed`` and the episode's own data, so a run is
  reproducible and a resumed one needs nothing restored.
* **One-step transitions**: ``n_step > 1`` is refused (the rewards of the window would all have
  to be recomputed under the new goal, and the return is biased off-policy; SB3 refuses it too).
* **Goals in the flat observation**: the preprocessor lays a Dict out as one float32 vector in
  sorted key order (docs/spaces.md); the goal parts must be ``Box`` or ``MultiBinary`` (whose
  values it copies unchanged), so a goal is a slice of that vector. ``model.observation_filter``
  is refused (it would normalise the goals that ``compute_reward`` reads).
* ``compute_reward`` (and ``compute_terminated``, when the env has one; else a relabeled
  transition keeps the env's termination flag, as SB3 does) come from one env of the run's
  ``env.name``/``env.kwargs``/``env.wrappers`` built once per process, with gymnasium's
  ``get_wrapper_attr`` (a wrapper's own ``compute_reward`` wins). They are called once per
  episode, vectorized over the relabeled rows, with ``info`` an object array of empty dicts
  (the infos are not stored): goal envs whose reward reads ``info`` are not supported.

Which achieved goal (``ag[j]`` is the ``achieved_goal`` of the observation at step ``j``; a
transition at step ``t`` goes from ``obs[t]`` to ``obs[t+1]`` and its episode's steps run from
``S`` (FIRST) to ``L`` (LAST)):

* ``future``: ``j`` uniform in ``t+1 .. L`` (a goal achieved later in the episode; the paper's
  best strategy, SB3's default);
* ``final``: ``j = L`` (the episode's last achieved goal);
* ``episode``: ``j`` uniform in ``S+1 .. L`` (any goal achieved in the episode; SB3's ``episode``
  draws from the achieved goals after each step too).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS, n_step_transitions
from rlgear.config.conv import is_image
from rlgear.preprocessing import ACTION_MASK_KEY
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Dict, MultiBinary, Space, Tuple, flat_dim
from rlgear.timestep import StepType

STRATEGIES = ("future", "final", "episode")
OBSERVATION_KEY, ACHIEVED_GOAL_KEY, DESIRED_GOAL_KEY = "observation", "achieved_goal", "desired_goal"
GOAL_KEYS = (OBSERVATION_KEY, ACHIEVED_GOAL_KEY, DESIRED_GOAL_KEY)
STRATEGY_KEY = "training.her_strategy"

RewardFn = Callable[[np.ndarray, np.ndarray, Any], Any]


@dataclass(frozen=True)
class GoalLayout:
    """Where the goals sit in the preprocessed (flat float32) observation: ``obs[..., achieved]``."""

    achieved: slice
    desired: slice
    goal_shape: tuple[int, ...]


def goal_layout(space: Space) -> GoalLayout:
    """The goal slices of the flat vector the preprocessor makes of ``space`` (a Dict observation).

    Raises ValueError naming what is wrong (the caller turns it into a config error): not a Dict,
    a missing key, a goal part that is not a Box/MultiBinary, goals of different shapes, an image.
    """
    if not isinstance(space, Dict):
        raise ValueError(
            f"needs a Dict observation with keys {', '.join(GOAL_KEYS)} "
            f"(gymnasium-robotics' GoalEnv convention), the env's is {space!r}"
        )
    for key in GOAL_KEYS:
        if key not in space:
            raise ValueError(
                f"the Dict observation lacks the key '{key}' (a goal env has {', '.join(GOAL_KEYS)}; "
                f"this one has {', '.join(space.keys())})"
            )
    for key in (ACHIEVED_GOAL_KEY, DESIRED_GOAL_KEY):
        if not isinstance(space[key], Box | MultiBinary) or is_image(space[key]):
            raise ValueError(
                f"observation['{key}'] must be a Box or MultiBinary (not an image), got {space[key]!r}"
            )
    if space[ACHIEVED_GOAL_KEY].shape != space[DESIRED_GOAL_KEY].shape:
        raise ValueError(
            f"observation['achieved_goal'] has shape {space[ACHIEVED_GOAL_KEY].shape}, "
            f"observation['desired_goal'] {space[DESIRED_GOAL_KEY].shape}; they must match"
        )
    # The preprocessor's layout (rlgear.preprocessing): parts in the Dict's (sorted) order, each
    # flattened; an image would head the row instead, so none is allowed here.
    offsets: dict[str, slice] = {}
    start = 0
    for key, sub in space.items():
        if key == ACTION_MASK_KEY:
            continue
        if _has_image(sub):
            raise ValueError(f"observation['{key}'] holds an image; goal envs with images are not supported")
        width = flat_dim(sub)
        offsets[key] = slice(start, start + width)
        start += width
    return GoalLayout(
        offsets[ACHIEVED_GOAL_KEY], offsets[DESIRED_GOAL_KEY], tuple(space[ACHIEVED_GOAL_KEY].shape)
    )


def _has_image(space: Space) -> bool:
    if is_image(space):
        return True
    if isinstance(space, Dict):
        return any(_has_image(sub) for sub in space.values())
    if isinstance(space, Tuple):
        return any(_has_image(sub) for sub in space.spaces)
    return False


@dataclass(frozen=True)
class GoalEnvFunctions:
    """The goal env's layout and its ``compute_reward`` / ``compute_terminated`` (None when absent)."""

    layout: GoalLayout
    compute_reward: RewardFn
    compute_terminated: RewardFn | None


#: One goal env per (env.name, env.kwargs, env.wrappers) and process: built at the first use
#: (check_spaces, when the evaluator starts), kept for the process's life.
_RESOLVED: dict[str, GoalEnvFunctions] = {}


def goal_env_functions(config: Any) -> GoalEnvFunctions:
    """The goal functions of ``config.env``'s env, built once per process; config errors name the key."""
    from rlgear.plugins.envs import gymnasium_env, gymnasium_wrappers

    env_config = config.env
    wrappers = gymnasium_wrappers.specs(env_config.wrappers)
    key = json.dumps([env_config.name, env_config.kwargs, wrappers], sort_keys=True, default=repr)
    if key in _RESOLVED:
        return _RESOLVED[key]
    env = gymnasium_env._make_env(env_config.name, dict(env_config.kwargs), None, wrappers)
    try:
        space = gymnasium_env.convert_space(env.observation_space, "observation", env_config.name)
        layout = goal_layout(space)
    except ValueError as err:
        env.close()
        raise config.fail(STRATEGY_KEY, f"env {env_config.name} {err}") from None
    reward_fn = _wrapper_attr(env, "compute_reward")
    if not callable(reward_fn):
        env.close()
        raise config.fail(
            STRATEGY_KEY,
            f"env {env_config.name} has no compute_reward(achieved_goal, desired_goal, info) "
            "(gymnasium-robotics' GoalEnv API), which HER needs to reward relabeled transitions",
        )
    terminated_fn = _wrapper_attr(env, "compute_terminated")
    functions = GoalEnvFunctions(layout, reward_fn, terminated_fn if callable(terminated_fn) else None)
    _RESOLVED[key] = functions
    return functions


def _wrapper_attr(env: Any, name: str) -> Any:
    try:
        return env.get_wrapper_attr(name)  # a wrapper's own, else the env's
    except AttributeError:
        return None


# --- relabeling ---------------------------------------------------------------------------
def episode_bounds(step_types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` ``[T+1, B]``: per row, the index of its episode's FIRST and LAST row (-1: not in the fragment)."""
    num_rows = step_types.shape[0]
    start = np.full(step_types.shape, -1, dtype=np.int64)
    end = np.full(step_types.shape, -1, dtype=np.int64)
    current = np.full(step_types.shape[1], -1, dtype=np.int64)
    for t in range(num_rows):
        current = np.where(step_types[t] == StepType.FIRST, t, current)
        start[t] = current
    current[:] = -1
    for t in reversed(range(num_rows)):
        current = np.where(step_types[t] == StepType.LAST, t, current)
        end[t] = current
    return start, end


def relabel_transitions(
    fragment: SampleBatch,
    *,
    strategy: str,
    k: int,
    gamma: float,
    layout: GoalLayout,
    compute_reward: RewardFn,
    compute_terminated: RewardFn | None = None,
    rng: np.random.Generator,
) -> SampleBatch:
    """The one-step transitions of ``fragment`` followed by ``k`` relabeled copies of each.

    ``fragment`` is time-major ``[T+1, B]`` of whole episodes (each column's rows start at a FIRST
    and every trained row's episode ends at a LAST inside it), its ``obs`` the preprocessed flat
    vectors. The first ``N`` rows are :func:`~rlgear.blocks.replay_buffers.n_step_transitions`'s
    with ``n_step=1``; row ``N + i * k + c`` is copy ``c`` of real row ``i``: ``obs`` and
    ``next_obs`` with the goal drawn by ``strategy`` in ``desired_goal``, ``rewards =
    compute_reward(achieved_goal of next_obs, goal)``, ``discounts = gamma * (1 - terminated)`` with
    ``terminated`` from ``compute_terminated`` (else the real row's discount); other columns copied.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"HER strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    rows = n_step_transitions(fragment, 1, gamma)
    step_types = np.asarray(fragment[SampleBatch.STEP_TYPES])
    num_steps = step_types.shape[0] - 1
    rows_t, rows_b = np.nonzero(step_types[:num_steps] != StepType.LAST)  # the rows' order
    start, end = episode_bounds(step_types)
    first, last = start[rows_t, rows_b], end[rows_t, rows_b]
    if (first < 0).any() or (last < 0).any():
        raise ValueError(
            "HER relabels whole episodes only: a fragment holds a transition whose episode starts "
            "or ends outside it (workers.batch_mode must be complete_episodes)"
        )
    if k == 0 or len(rows) == 0:
        return rows
    copy_of = np.repeat(np.arange(len(rows)), k)  # [N k]: the real row each copy relabels
    t, b = rows_t[copy_of], rows_b[copy_of]
    if strategy == "future":
        goal_t = rng.integers(t + 1, last[copy_of] + 1)
    elif strategy == "final":
        goal_t = last[copy_of]
    else:  # episode
        goal_t = rng.integers(first[copy_of] + 1, last[copy_of] + 1)
    obs = np.asarray(fragment[SampleBatch.OBS])
    goals = obs[goal_t, b][:, layout.achieved]  # [N k, G]: achieved goals of the same episode
    relabeled = SampleBatch({key: np.asarray(value)[copy_of] for key, value in rows.items()})
    relabeled[SampleBatch.OBS][:, layout.desired] = goals
    relabeled[NEXT_OBS][:, layout.desired] = goals
    achieved_next = relabeled[NEXT_OBS][:, layout.achieved]
    shape = (len(copy_of), *layout.goal_shape)
    infos = np.array([{} for _ in range(len(copy_of))], dtype=object)
    rewards = np.asarray(compute_reward(achieved_next.reshape(shape), goals.reshape(shape), infos))
    if rewards.shape != (len(copy_of),):
        raise ValueError(
            f"compute_reward returned shape {rewards.shape} for {len(copy_of)} rows of goals: HER "
            "needs it vectorized over leading rows (gymnasium-robotics' GoalEnv API)"
        )
    relabeled[SampleBatch.REWARDS] = rewards.astype(rows[SampleBatch.REWARDS].dtype)
    if compute_terminated is not None:
        terminated = np.broadcast_to(
            np.asarray(compute_terminated(achieved_next.reshape(shape), goals.reshape(shape), infos), bool),
            (len(copy_of),),
        )
        discounts = np.where(terminated, 0.0, gamma)
        relabeled[SampleBatch.DISCOUNTS] = discounts.astype(rows[SampleBatch.DISCOUNTS].dtype)
    return SampleBatch.concat([rows, relabeled])


def hindsight_transitions(fragment: SampleBatch, config: Any) -> SampleBatch:
    """The replay family's postprocessing with ``training.her_strategy`` set: real plus relabeled rows.

    The goal draws are seeded from ``config.seed`` and the fragment's observations and episode ids:
    reproducible, distinct per episode and worker, and nothing to checkpoint.
    """
    training = config.training
    functions = goal_env_functions(config)
    obs = np.ascontiguousarray(fragment[SampleBatch.OBS])
    eps_id = np.ascontiguousarray(fragment.get(SampleBatch.EPS_ID, np.zeros(0, np.int64)))
    seed = 0 if config.seed is None else int(config.seed)
    rng = np.random.default_rng([seed, zlib.crc32(obs.tobytes()), zlib.crc32(eps_id.tobytes())])
    return relabel_transitions(
        fragment,
        strategy=training.her_strategy,
        k=training.her_k,
        gamma=training.gamma,
        layout=functions.layout,
        compute_reward=functions.compute_reward,
        compute_terminated=functions.compute_terminated,
        rng=rng,
    )
