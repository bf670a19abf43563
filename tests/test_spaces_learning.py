"""Runs on envs with structured spaces: action masks are honoured, composite actions are learned.

The envs are in ``tests/spaces_envs.py``. Learning tests are seeded and slow-marked, each
with a stated return within a stated env-step budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import EnvDataError, UnsupportedError
from rlgear.run.runner import should_stop
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS, small_config
from tests.spaces_envs import MaskedChoiceEnv

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

MASKED_ENV = {"name": "tests.spaces_envs:MaskedChoiceEnv", "vectorization": "sync"}
JOINT_ENV = {"name": "tests.spaces_envs:JointTargetEnv", "vectorization": "sync"}
TUPLE_ENV = {"name": "tests.spaces_envs:TupleActionEnv", "vectorization": "sync"}
DICT_ENV = {"name": "tests.spaces_envs:DictActionEnv", "vectorization": "sync"}


def make_trainer(tmp_path, algorithm: str, **sections: Any):
    raw = small_config(tmp_path, algorithm=algorithm, **sections)
    if algorithm != "ppo":
        raw["training"] = sections.get("training", {})
    trainer_cls = registry.load_algorithm(algorithm)
    return trainer_cls(config_mod.resolve(raw, training_class=trainer_cls.config_class))


def train(trainer, stop: dict[str, float]) -> dict[str, Any]:
    try:
        while True:
            result = trainer.train()
            if should_stop(result, stop):
                return result
    finally:
        trainer.stop()


def train_until_learned(trainer, max_iterations: int = 5) -> dict[str, Any]:
    """Iterations until one reports learner stats (impala's learner starts on its second)."""
    try:
        for _ in range(max_iterations):
            result = trainer.train()
            if "learner/entropy" in result:
                return result
    finally:
        trainer.stop()
    raise AssertionError(f"no learner stats after {max_iterations} iterations: {sorted(result)}")


@pytest.mark.parametrize(
    "algorithm, training",
    [
        ("ppo", {"train_batch_size": 512, "sgd_minibatch_size": 256, "num_sgd_iter": 2}),
        # epsilon 1 -> 0.1 over the run: random exploration is drawn among allowed actions too
        ("dqn", {"learning_starts": 500, "epsilon_timesteps": 10_000, "env_steps_per_training_step": 64}),
    ],
)
def test_no_masked_action_is_ever_taken_in_10k_env_steps(tmp_path, algorithm, training):
    MaskedChoiceEnv.violations = MaskedChoiceEnv.actions_taken = 0
    trainer = make_trainer(tmp_path, algorithm, env=MASKED_ENV, workers={"num_envs_per_worker": 8},
                           training=training)  # fmt: skip
    worker = trainer.workers.local_worker
    assert worker.policy.observation_space.shape == (4,)  # cue one-hot (2) + noise (2); the mask is not input
    batch = worker.sample()
    assert batch[SB.ACTION_MASK].shape == (len(batch), 4)
    assert batch[SB.ACTION_MASK][np.arange(len(batch)), batch[SB.ACTIONS]].all()
    result = train(trainer, {"timesteps_total": 10_000})
    assert MaskedChoiceEnv.actions_taken >= 10_000
    assert MaskedChoiceEnv.violations == 0
    assert result["episode_return_min"] >= 0  # a violation would cost -1


def test_a_mask_allowing_no_action_stops_the_run_with_an_error_naming_the_env(tmp_path):
    env = {**MASKED_ENV, "kwargs": {"empty_mask_at": 3}}
    trainer = make_trainer(tmp_path, "ppo", env=env)
    try:
        with pytest.raises(
            EnvDataError, match=r"tests.spaces_envs:MaskedChoiceEnv: action_mask allows no action"
        ):
            trainer.train()
    finally:
        trainer.stop()


def test_dqn_refuses_multi_discrete_actions_naming_the_space(tmp_path):
    with pytest.raises(UnsupportedError, match=r"multi_discrete actions.*MultiDiscrete\(nvec=\(3, 3\)\)"):
        make_trainer(tmp_path, "dqn", env=JOINT_ENV)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tuple_actions_reach_the_env_as_a_tuple_and_are_stored_flat(tmp_path, backend):
    trainer = make_trainer(tmp_path, "ppo", backend=backend, env=TUPLE_ENV)
    try:
        batch = trainer.workers.local_worker.sample()
        assert batch[SB.ACTIONS].shape == (len(batch), 2) and batch[SB.ACTIONS].dtype == np.float32
        assert set(np.unique(batch[SB.ACTIONS][:, 0])) <= {0.0, 1.0, 2.0}
        assert batch[SB.PREV_ACTIONS].shape == (len(batch), 2)
        trainer.train()  # the loss runs on the flat rows
    finally:
        trainer.stop()


@pytest.mark.parametrize("algorithm", ["pg", "a2c", "a3c", "impala"])
@pytest.mark.parametrize("env", [MASKED_ENV, JOINT_ENV, DICT_ENV], ids=["masked", "multi_discrete", "dict"])
def test_every_policy_gradient_algorithm_trains_on_masks_and_composite_actions(tmp_path, algorithm, env):
    """The envs check what they receive (MultiDiscrete rows of 2, Dict actions with both keys,
    Box parts within bounds); a masked action would be counted."""
    MaskedChoiceEnv.violations = 0
    result = train_until_learned(make_trainer(tmp_path, algorithm, env=env))
    assert result["timesteps_total"] > 0 and np.isfinite(result["learner/entropy"])
    assert MaskedChoiceEnv.violations == 0


@pytest.mark.parametrize("env", [JOINT_ENV, DICT_ENV], ids=["multi_discrete", "dict"])
def test_impala_on_tf_trains_on_composite_action_sequences(tmp_path, env):
    pytest.importorskip("tensorflow", reason="needs TensorFlow: pip install 'rlgear[tf]'")
    result = train_until_learned(make_trainer(tmp_path, "impala", backend="tf", env=env))
    assert np.isfinite(result["learner/entropy"]) and result["learner/entropy"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_ppo_learns_the_masked_choice_task(tmp_path, backend):
    """Mean return >= 19.5 of 20 (random allowed play: ~8.3) within 30k env steps, seed 0
    (measured: 9.3k env steps on both backends; 2 s on torch, 4 s on TF)."""
    MaskedChoiceEnv.violations = 0
    trainer = make_trainer(
        tmp_path, "ppo", backend=backend, env=MASKED_ENV, workers={"num_envs_per_worker": 8},
        training={"train_batch_size": 512, "sgd_minibatch_size": 256, "num_sgd_iter": 6, "lr": 0.003,
                  "entropy_coeff": 0.0},
    )  # fmt: skip
    result = train(trainer, {"episode_return_mean": 19.5, "timesteps_total": 30_000})
    assert result["episode_return_mean"] >= 19.5, result
    assert MaskedChoiceEnv.violations == 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_dqn_learns_the_masked_choice_task(tmp_path, backend):
    """Mean return >= 19.5 of 20 within 40k env steps, seed 0, acting on masked Q-values with epsilon
    0.02 (measured: 19.9k env steps on torch, 13.6k on TF; about 10 s each)."""
    MaskedChoiceEnv.violations = 0
    trainer = make_trainer(
        tmp_path, "dqn", backend=backend, env=MASKED_ENV, workers={"num_envs_per_worker": 8},
        training={"learning_starts": 1000, "epsilon_timesteps": 10_000, "epsilon_final": 0.02,
                  "env_steps_per_training_step": 64, "target_network_update_freq": 1000},
    )  # fmt: skip
    result = train(trainer, {"episode_return_mean": 19.5, "timesteps_total": 40_000})
    assert result["episode_return_mean"] >= 19.5, result
    assert MaskedChoiceEnv.violations == 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_ppo_learns_to_choose_two_sub_actions_jointly(tmp_path, backend):
    """MultiDiscrete([3, 3]): mean return >= 9.8 of 10 (random play: 1.1) within 30k env steps, seed 0
    (measured: 11.6k env steps on torch, 10.7k on TF; 2 s and 7 s)."""
    trainer = make_trainer(
        tmp_path, "ppo", backend=backend, env=JOINT_ENV, workers={"num_envs_per_worker": 8},
        training={"train_batch_size": 512, "sgd_minibatch_size": 256, "num_sgd_iter": 6, "lr": 0.003,
                  "entropy_coeff": 0.0},
    )  # fmt: skip
    result = train(trainer, {"episode_return_mean": 9.8, "timesteps_total": 30_000})
    assert result["episode_return_mean"] >= 9.8, result


def test_a_dqn_checkpoint_keeps_the_replayed_masks_and_the_raw_dict_space(tmp_path):
    training = {
        "learning_starts": 100,
        "env_steps_per_training_step": 64,
        "store_buffer_in_checkpoints": True,
    }
    trainer = make_trainer(tmp_path, "dqn", env=MASKED_ENV, training=training)
    try:
        trainer.train()
        trainer.train()
        path = trainer.save(str(tmp_path / "checkpoint"))
        stored = trainer.replay_buffer.sample(32)
    finally:
        trainer.stop()
    restored = make_trainer(tmp_path, "dqn", env=MASKED_ENV, training=training)
    try:
        restored.restore(path)
        again = restored.replay_buffer.sample(32)  # same RNG state: the same slots
        np.testing.assert_array_equal(again["batch_indexes"], stored["batch_indexes"])
        assert again[SB.NEXT_ACTION_MASK].dtype == bool
        np.testing.assert_array_equal(again[SB.NEXT_ACTION_MASK], stored[SB.NEXT_ACTION_MASK])
        restored.train()  # learns on the restored masks
    finally:
        restored.stop()
