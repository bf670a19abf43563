"""NaN and infinity never reach the weights or a checkpoint (issue 17).

The reproduction: one reward of 1e39 (finite in float64, inf in float32) made
every later loss NaN, collapsed the policy and was saved in the final
checkpoint. Now: the env boundary refuses it, a learner skips any update whose
loss or gradient is not finite (and counts it), too many in a row stop the
run, and a checkpoint refuses non-finite arrays.
"""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import NonFiniteError
from rlgear.run import checkpoint as ckpt
from rlgear.run.runner import STOP_RECORD, run
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS, small_config
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy, resolve

N = 16


def a2c_batch(reward_scale: float = 1.0, seed: int = 0) -> SB:
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(N, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=N).astype(np.int64),
            SB.ADVANTAGES: (rng.normal(size=N) * reward_scale).astype(np.float32),
            SB.VALUE_TARGETS: (rng.normal(size=N) * reward_scale).astype(np.float32),
        }
    )


def poisoned_batch() -> SB:
    """What a 1e39 reward becomes once the learner's float32 sees it: an infinite target."""
    batch = a2c_batch()
    batch[SB.VALUE_TARGETS][3] = np.float32(np.inf)
    batch[SB.ADVANTAGES][3] = np.float32(np.inf)
    return batch


def a2c_policy(tmp_path, backend, **training):
    config = resolve(tmp_path, "a2c", {"optimizer": "adam", "lr": 0.01, **training}, backend=backend)
    return make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)


def same_state(a, b) -> bool:
    return set(a.arrays) == set(b.arrays) and all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_finite_update_is_skipped_counted_and_the_next_finite_one_trains(tmp_path, backend):
    policy = a2c_policy(tmp_path, backend)
    policy.learn_on_batch(a2c_batch(seed=1))  # Adam has moments: they must not absorb the NaN either
    before = policy.get_state()
    stats = policy.learn_on_batch(poisoned_batch())
    after = policy.get_state()
    assert same_state(before, after), "weights or optimizer state changed on a skipped update"
    assert stats["num_nonfinite_updates"] == 1.0
    stats = policy.learn_on_batch(a2c_batch(seed=2))
    assert stats["num_nonfinite_updates"] == 1.0 and np.isfinite(stats["total_loss"])
    assert not np.array_equal(
        policy.get_weights()["policy/output/kernel"], after.arrays["weights/policy/output/kernel"]
    )
    assert all(np.isfinite(w).all() for w in policy.get_weights().values())
    assert policy.get_state().meta["num_nonfinite_updates"] == 1  # saved with the policy


@pytest.mark.parametrize("backend", BACKENDS)
def test_too_many_non_finite_updates_in_a_row_stop_with_a_clear_error(tmp_path, backend):
    policy = a2c_policy(tmp_path, backend, max_nonfinite_updates=3)
    policy.learn_on_batch(poisoned_batch())
    policy.learn_on_batch(a2c_batch())  # a finite one in between resets the run of failures
    policy.learn_on_batch(poisoned_batch())
    policy.learn_on_batch(poisoned_batch())
    with pytest.raises(NonFiniteError, match=r"3 updates in a row .*training\.max_nonfinite_updates is 3"):
        policy.learn_on_batch(poisoned_batch())
    assert all(np.isfinite(w).all() for w in policy.get_weights().values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_gradients_from_a_worker_are_not_applied(tmp_path, backend):
    policy = a2c_policy(tmp_path, backend)
    grads, _ = policy.compute_gradients(a2c_batch())
    grads = {k: v.copy() for k, v in grads.items()}
    next(iter(grads.values())).flat[0] = np.nan
    before = policy.get_weights()
    policy.apply_gradients(grads)
    assert all(np.array_equal(before[k], v) for k, v in policy.get_weights().items())
    assert policy.nonfinite.total == 1


def test_a_checkpoint_refuses_non_finite_arrays_and_writes_nothing(tmp_path):
    arrays = {
        "policy/weights/a": np.ones(3, np.float32),
        "policy/weights/b": np.array([1.0, np.nan], np.float32),
    }
    with pytest.raises(
        NonFiniteError, match=r"not written: 1 array\(s\) hold NaN or infinity \(policy/weights/b\)"
    ):
        ckpt.write(tmp_path / "checkpoint_000001", arrays, {}, {}, {})
    assert list(tmp_path.iterdir()) == []


class RewardAfter(gym.Env):
    """CartPole-like spaces; the reward becomes ``bad_reward`` at step ``k`` of the env's life."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, k: int = 10**9, bad_reward: float = 1e39, crash_once_file: str | None = None):
        self.k, self.bad_reward, self.crash_file, self.t = k, bad_reward, crash_once_file, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.k and self.crash_file and os.path.exists(self.crash_file):
            os.remove(self.crash_file)  # a transient fault: gone after a restart
            raise RuntimeError("the simulator crashed")
        reward = self.bad_reward if self.t == self.k else 1.0
        return np.zeros(4, np.float32), reward, self.t % 20 == 0, False, {}


def test_the_gymnasium_adapter_refuses_a_reward_beyond_float32_naming_env_and_slot(tmp_path):
    raw = small_config(tmp_path, env={"name": f"{__name__}:RewardAfter", "kwargs": {"k": 30}})
    trainer = registry.load_algorithm("ppo")(raw)
    try:
        with pytest.raises(
            NonFiniteError,
            match=r"env tests\.test_nonfinite:RewardAfter: step returned a reward .*slot\(s\) \[0, 1\]",
        ):
            for _ in range(5):
                trainer.train()
        assert all(np.isfinite(w).all() for w in trainer.policy.get_weights().values())
    finally:
        trainer.stop()


class ObservationAfter(gym.Env):
    """Observations of ``dtype``: zeros, except ``bad`` in the env seeded ``bad_seed`` (env slot
    ``bad_seed`` of a vector env reset with seed 0) from its step ``k`` on (at reset with k=0)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad: float = float("nan"), dtype: str = "float32", k: int = 5, bad_seed: int = 1):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.dtype(dtype))
        self.bad, self.k, self.bad_seed, self.t, self.reset_seed = bad, k, bad_seed, 0, None

    def _obs(self) -> np.ndarray:
        obs = np.zeros(2, self.observation_space.dtype)
        if self.reset_seed == self.bad_seed and self.t >= self.k:
            obs[1] = self.bad
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.reset_seed = seed
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, False, {}


def observation_env(**kwargs):
    from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter

    return GymnasiumAdapter().make(f"{__name__}:ObservationAfter", 3, kwargs=kwargs)


@pytest.mark.parametrize(
    ("dtype", "bad"),
    [
        ("float32", float("nan")),
        ("float32", float("inf")),
        ("float32", float("-inf")),
        ("float64", float("nan")),
        ("float64", 1e39),  # finite in float64, infinite once the learner casts it to float32
        ("float64", -1.7e308),
    ],
)
@pytest.mark.parametrize("at", ["step", "reset"])
def test_the_gymnasium_adapter_refuses_an_observation_that_is_not_finite_in_float32(dtype, bad, at):
    env = observation_env(bad=bad, dtype=dtype, k=3 if at == "step" else 0)
    try:
        message = (
            r"env tests\.test_nonfinite:ObservationAfter: observation holds NaN, infinity or values beyond "
            r"float32 in env slot\(s\) \[1\] \(rlgear trains in float32"
        )
        if at == "reset":
            with pytest.raises(NonFiniteError, match=message):
                env.reset(seed=0)
            return
        env.reset(seed=0)
        for _ in range(2):  # the steps before k pass
            assert np.isfinite(env.step(np.zeros(3, np.int64)).observation).all()
        with pytest.raises(NonFiniteError, match=message):
            env.step(np.zeros(3, np.int64))
    finally:
        env.close()


def test_a_float64_observation_within_float32_range_is_accepted():
    env = observation_env(bad=3.4e38, dtype="float64", k=0)  # float32's largest is 3.4028235e38
    try:
        ts = env.reset(seed=0)
        assert ts.observation[1, 1] == 3.4e38
        assert env.step(np.zeros(3, np.int64)).observation[1, 1] == 3.4e38
    finally:
        env.close()


def test_a_run_whose_env_sends_an_observation_beyond_float32_stops_before_training_on_it(tmp_path):
    raw = small_config(
        tmp_path,
        env={"name": f"{__name__}:ObservationAfter", "kwargs": {"bad": 1e39, "dtype": "float64", "k": 40}},
    )
    trainer = registry.load_algorithm("ppo")(raw)
    try:
        with pytest.raises(NonFiniteError, match=r"observation holds .* env slot\(s\) \[1\]"):
            for _ in range(5):
                trainer.train()
        assert trainer.iteration >= 1  # it trained on the finite observations before
        assert all(np.isfinite(w).all() for w in trainer.policy.get_weights().values())
    finally:
        trainer.stop()


def test_an_error_in_training_leaves_a_checkpoint_and_a_stop_record_and_resume_goes_on(tmp_path):
    crash = tmp_path / "crash-once"
    crash.touch()
    raw = small_config(
        tmp_path,
        env={"name": f"{__name__}:RewardAfter", "kwargs": {"k": 200, "crash_once_file": str(crash)}},
        stop={"training_iteration": 50},
        checkpoint={"every": 0, "at_end": True},
    )
    with pytest.raises(RuntimeError, match="the simulator crashed") as caught:
        run(config_mod.resolve(raw))
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / STOP_RECORD).read_text())
    saved = ckpt.latest(run_dir)
    assert saved is not None and record["checkpoint"] == str(saved)
    assert (
        record["reason"] == "failed: RuntimeError" and record["error"]["message"] == "the simulator crashed"
    )
    assert record["iteration"] >= 1 and saved.name == ckpt.checkpoint_name(record["iteration"])
    assert any("--resume" in note for note in caught.value.__notes__)
    # --resume goes on from that checkpoint (the fault was transient) and ends normally.
    again = config_mod.resolve({**raw, "stop": {"training_iteration": record["iteration"] + 2}})
    result = run(again, resume=run_dir)
    assert result["training_iteration"] == record["iteration"] + 2
    assert json.loads((run_dir / STOP_RECORD).read_text())["reason"].startswith("stop criterion met")


class CheckpointRecorder:
    """What each checkpoint held when it was first written, and the samples taken."""

    def __init__(self):
        self.first_written: dict[str, tuple[dict, dict]] = {}
        self.samples = 0

    @rlgear.hookimpl
    def on_checkpoint(self, trainer, checkpoint_dir):
        name = os.path.basename(checkpoint_dir)
        if name not in self.first_written:
            arrays, state, _, _ = ckpt.read(checkpoint_dir)
            self.first_written[name] = (arrays, state)

    @rlgear.hookimpl
    def on_sample_end(self, worker, batch):
        self.samples += 1


def test_a_failure_keeps_the_checkpoint_of_the_last_finished_iteration_as_it_was(tmp_path):
    """Iteration 2 fails in its second training step, after its first one changed the weights:
    checkpoint_000001, written when iteration 1 ended, is the last good state and stays as it was
    (the failure must not overwrite it with half of iteration 2)."""
    crash = tmp_path / "crash-once"
    crash.touch()
    raw = small_config(
        tmp_path,
        env={"name": f"{__name__}:RewardAfter", "kwargs": {"k": 105, "crash_once_file": str(crash)}},
        training={"min_env_steps_per_iteration": 120},  # two training steps of 64 rows per iteration
        stop={"training_iteration": 50},
        checkpoint={"every": 1, "at_end": True},
    )
    recorder = CheckpointRecorder()
    with pytest.raises(RuntimeError, match="the simulator crashed") as caught:
        run(config_mod.resolve(raw), hooks=[recorder])
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / STOP_RECORD).read_text())
    assert record["iteration"] == 1 and recorder.samples == 3  # failed in iteration 2's second sample
    kept = run_dir / ckpt.checkpoint_name(1)
    assert ckpt.list_checkpoints(run_dir) == [kept] and record["checkpoint"] == str(kept)
    arrays, state, _, _ = ckpt.read(kept)
    first_arrays, first_state = recorder.first_written[kept.name]
    assert state["counters"] == first_state["counters"]
    assert set(arrays) == set(first_arrays)
    assert all(np.array_equal(arrays[k], first_arrays[k]) for k in arrays), [
        k for k in arrays if not np.array_equal(arrays[k], first_arrays[k])
    ]
    assert any(f"newest checkpoint {kept.name}" in note for note in caught.value.__notes__)


def test_the_cli_exits_1_with_one_line_naming_the_cause_and_the_checkpoint(tmp_path, capsys):
    from rlgear.cli import main

    raw = small_config(
        tmp_path,
        env={"name": f"{__name__}:RewardAfter", "kwargs": {"k": 200}},
        stop={"training_iteration": 50},
    )
    path = tmp_path / "config.yaml"
    path.write_text(config_mod.dump_yaml(raw))
    assert main(["train", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "rlgear: error: env tests.test_nonfinite:RewardAfter: step returned"
    )
    assert "written; continue with --resume" in err[0]
