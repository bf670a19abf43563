"""Checks plugin authors run in their own tests.

``check_vector_env(env)`` steps a :class:`~rlgear.env.VectorEnv` with random
valid actions and asserts the TimeStep contract, with messages that say which
rule broke at which step and env::

    from rlgear.testing import check_vector_env

    def test_my_env_follows_the_contract():
        check_vector_env(MyAdapter().make("my-env", 4, kwargs={}), steps=500)

``assert_plugin_ok(name)`` runs every check of ``rlgear plugins --check NAME``
on an installed plugin (any kind) and fails with the broken rules and their
fixes; ``check_plugin(name)`` returns the report instead::

    from rlgear.testing import assert_plugin_ok

    def test_my_algorithm_keeps_its_contract():  # after pip install -e .
        assert_plugin_ok("my_algo", kind="algorithm")
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from rlgear.discovery.check import CheckReport, Finding, check_plugin
from rlgear.env import VectorEnv
from rlgear.preprocessing import batch_size
from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple, flat_action_dim, flatten_action
from rlgear.timestep import StepType, TimeStep

__all__ = [
    "CheckReport", "ContractError", "Finding", "assert_plugin_ok", "check_plugin", "check_vector_env",
    "random_actions",
]  # fmt: skip


class ContractError(AssertionError):
    """A VectorEnv broke the TimeStep contract."""


def assert_plugin_ok(
    name: str, kind: str | None = None, *, env_name: str | None = None, backend: str | None = None
) -> CheckReport:
    """Check the installed plugin ``name`` (see :func:`check_plugin`); raise AssertionError listing the failures.

    Returns the report when every check holds (its findings say what was checked).
    """
    report = check_plugin(name, kind, env_name=env_name, backend=backend)
    if not report.ok:
        raise AssertionError(report.describe_failures())
    return report


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def _check_shapes(env: VectorEnv, ts: TimeStep, where: str) -> None:
    n = env.num_envs
    for field in ("step_type", "reward", "discount", "env_id"):
        _expect(
            np.shape(getattr(ts, field)) == (n,),
            f"{where}: {field} has shape {np.shape(getattr(ts, field))}, expected ({n},)",
        )
    if isinstance(env.observation_space, Dict | Tuple):
        _expect(
            batch_size(ts.observation) == n,
            f"{where}: the observation's arrays must have {n} rows (one per env)",
        )
    else:
        obs_shape = (n, *env.observation_space.shape)
        _expect(
            np.shape(ts.observation) == obs_shape,
            f"{where}: observation has shape {np.shape(ts.observation)}, expected {obs_shape}",
        )
    space = env.action_space
    action_shape = (n, flat_action_dim(space)) if isinstance(space, Dict | Tuple) else (n, *space.shape)
    _expect(
        np.shape(ts.prev_action) == action_shape,
        f"{where}: prev_action has shape {np.shape(ts.prev_action)}, expected {action_shape}",
    )
    _expect(np.array_equal(ts.env_id, np.arange(n)), f"{where}: env_id should be 0..{n - 1}, got {ts.env_id}")
    _expect(bool(np.all(np.isfinite(ts.reward))), f"{where}: non-finite reward {ts.reward}")
    _expect(bool(np.isin(ts.step_type, list(StepType)).all()), f"{where}: unknown step_type {ts.step_type}")


def random_actions(env: VectorEnv, rng: np.random.Generator) -> Any:
    """A batch of random actions of ``env.action_space`` (a tuple/dict of batches for Tuple/Dict)."""
    return _random_actions(env.action_space, env.num_envs, rng)


def _random_actions(space: Any, n: int, rng: np.random.Generator) -> Any:
    if isinstance(space, Discrete):
        return rng.integers(0, space.n, size=n)
    if isinstance(space, MultiDiscrete):
        return rng.integers(0, np.array(space.nvec), size=(n, len(space.nvec)))
    if isinstance(space, Tuple):
        return tuple(_random_actions(part, n, rng) for part in space.spaces)
    if isinstance(space, Dict):
        return {key: _random_actions(part, n, rng) for key, part in space.items()}
    assert isinstance(space, Box), f"no random actions for {space!r}"
    low = np.where(np.isfinite(space.low), space.low, -1.0)
    high = np.where(np.isfinite(space.high), space.high, 1.0)
    return rng.uniform(low, high, size=(n, *space.shape)).astype(space.dtype)


def _same_observations(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same_observations(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same_observations(x, y) for x, y in zip(a, b, strict=True))
    return bool(np.allclose(a, b))


def check_vector_env(env: VectorEnv, steps: int = 300, seed: int = 0, close: bool = True) -> dict[str, int]:
    """Step ``env`` with random actions and check every TimeStep rule; returns counts seen.

    Checked: shapes; reset gives FIRST, reward 0, discount 1, zero prev_action;
    a FIRST comes only after a reset or a LAST, and the step after a LAST is a
    FIRST with reward 0 and zero prev_action; discount is 1 except at LAST,
    where it is 0 (terminated) or 1 (truncated); prev_action is the action
    sent; the same reset seed gives the same first observations.
    """
    rng = np.random.default_rng(seed)
    counts = {"steps": 0, "episodes_terminated": 0, "episodes_truncated": 0}
    try:
        ts = env.reset(seed=seed)
        first_obs = copy.deepcopy(ts.observation)
        _check_shapes(env, ts, "reset()")
        _expect(
            bool((ts.step_type == StepType.FIRST).all()),
            f"reset(): every env must be FIRST, got {ts.step_type}",
        )
        _expect(bool((ts.reward == 0).all()), f"reset(): reward must be 0 at FIRST, got {ts.reward}")
        _expect(bool((ts.discount == 1).all()), f"reset(): discount must be 1 at FIRST, got {ts.discount}")
        _expect(
            not np.any(ts.prev_action), f"reset(): prev_action must be zeros at FIRST, got {ts.prev_action}"
        )
        for step in range(1, steps + 1):
            actions = random_actions(env, rng)
            previous = ts
            ts = env.step(actions)
            where = f"step {step}"
            _check_shapes(env, ts, where)
            was_last = previous.step_type == StepType.LAST
            first = ts.step_type == StepType.FIRST
            last = ts.step_type == StepType.LAST
            for i in np.flatnonzero(was_last & ~first):
                raise ContractError(
                    f"{where}, env {i}: the step after a LAST must be FIRST, got {StepType(int(ts.step_type[i])).name}"
                )
            for i in np.flatnonzero(first & ~was_last):
                raise ContractError(
                    f"{where}, env {i}: FIRST without a LAST before it (episodes must end with LAST)"
                )
            _expect(
                bool((ts.reward[first] == 0).all()),
                f"{where}: reward must be 0 at FIRST, got {ts.reward[first]}",
            )
            _expect(not np.any(ts.prev_action[first]), f"{where}: prev_action must be zeros at FIRST")
            _expect(
                bool((ts.discount[~last] == 1).all()),
                f"{where}: discount must be 1 except at LAST, got {ts.discount}",
            )
            _expect(
                bool(np.isin(ts.discount[last], (0.0, 1.0)).all()),
                f"{where}: discount at LAST must be 0 or 1, got {ts.discount[last]}",
            )
            moved = ~first
            _expect(
                np.allclose(
                    np.asarray(ts.prev_action)[moved], flatten_action(env.action_space, actions)[moved]
                ),
                f"{where}: prev_action must be the action just sent",
            )
            counts["steps"] += int(moved.sum())
            counts["episodes_terminated"] += int((last & (ts.discount == 0)).sum())
            counts["episodes_truncated"] += int((last & (ts.discount == 1)).sum())
        again = env.reset(seed=seed)
        _expect(
            _same_observations(again.observation, first_obs),
            "reset(seed) twice with the same seed gave different observations",
        )
    finally:
        if close:
            env.close()
    return counts
