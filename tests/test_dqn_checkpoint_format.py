"""DQN policy states written by an earlier rlgear keep restoring, names and all.

``tests/data/dqn-policy-state/`` holds the ``get_state()`` of DQN policies as commit eccce71
wrote them (``make_fixtures.py`` there, run on that commit), before the target network moved
to the backends' ``TargetModel``: online weights, the target network under ``target/``, the
optimizer state and the generators. A checkpoint on disk is these arrays under a policy
prefix plus this meta, so a policy that restores them and gives back the same keys and values
reads the checkpoints users already have.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from rlgear import config as config_mod
from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.plugins.algorithms.dqn import DQN, DQNConfig
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

FIXTURES = Path(__file__).parent / "data" / "dqn-policy-state"
OBS = Box(np.full(3, -np.inf), np.full(3, np.inf))
ACTIONS = Discrete(2)

#: Case name -> training overrides: plain DQN, and Rainbow (noisy dueling C51 heads).
CASES = {
    "dqn": {"dueling": False},
    "rainbow": {"dueling": True, "noisy": True, "num_atoms": 5, "double_q": True},
}


def make_policy(backend: str, case: str, seed: int = 0):
    if backend == "tf":
        pytest.importorskip("tensorflow")
    raw = {
        "algorithm": "dqn",
        "backend": backend,
        "seed": seed,
        "env": {"name": "CartPole-v1"},
        "model": {"hidden_sizes": [4], "activation": "relu"},
        "training": {"train_batch_size": 4, **CASES[case]},
    }
    config = config_mod.resolve(raw, training_class=DQNConfig)
    return DQN.policy_class(backend)(OBS, ACTIONS, config)


def learned_policy(backend: str, case: str):
    """A policy after one acting and one learning step: its target network lags its online one."""
    policy = make_policy(backend, case)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    policy.compute_actions(
        TimeStep(
            step_type=np.full(4, StepType.MID, dtype=np.int32),
            reward=np.zeros(4, dtype=np.float32),
            discount=np.ones(4, dtype=np.float32),
            observation=obs,
            prev_action=np.zeros(4, dtype=np.int64),
            env_id=np.arange(4, dtype=np.int32),
        )
    )
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.array([0, 1, 1, 0], dtype=np.int64),
            SampleBatch.REWARDS: np.array([1.0, 0.5, -1.0, 2.0], dtype=np.float32),
            NEXT_OBS: rng.normal(size=(4, 3)).astype(np.float32),
            SampleBatch.DISCOUNTS: np.array([0.99, 0.99, 0.0, 0.99], dtype=np.float32),
        }
    )
    policy.learn_on_batch(batch)
    return policy


def stored_state(backend: str, case: str) -> PolicyState:
    arrays = load_file(FIXTURES / f"{backend}-{case}.safetensors")
    meta = json.loads((FIXTURES / f"{backend}-{case}.json").read_text())
    return PolicyState(arrays, meta)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_a_stored_dqn_policy_state_restores_with_its_names_and_values(backend, case):
    stored = stored_state(backend, case)
    target = {k.removeprefix("target/"): v for k, v in stored.arrays.items() if k.startswith("target/")}
    weights = {k.removeprefix("weights/"): v for k, v in stored.arrays.items() if k.startswith("weights/")}
    assert target and set(target) == set(weights)
    assert any(not np.array_equal(target[k], weights[k]) for k in target)  # the target lags: a real test

    policy = make_policy(backend, case, seed=7)
    policy.set_state(PolicyState(dict(stored.arrays), json.loads(json.dumps(stored.meta))))
    for name, value in target.items():
        np.testing.assert_array_equal(policy.get_target_weights()[name], value, err_msg=name)

    state = policy.get_state()
    assert sorted(state.arrays) == sorted(stored.arrays)
    for name, value in stored.arrays.items():
        np.testing.assert_array_equal(state.arrays[name], value, err_msg=name)
    assert json.loads(json.dumps(state.meta)) == stored.meta


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_todays_policy_writes_the_stored_layout(backend, case):
    """The names a policy writes now are the names of the stored state (nothing added or renamed)."""
    written = learned_policy(backend, case).get_state().arrays
    assert sorted(written) == sorted(stored_state(backend, case).arrays)
