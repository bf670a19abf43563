"""The envpool adapter: envpool's C++ pools emit TimeSteps with ALF semantics, seeded, with clear errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install 'rlgear[envpool]')")

from rlgear.config import resolve
from rlgear.errors import ConfigError
from rlgear.plugins.envs.envpool_env import EnvPoolAdapter
from rlgear.spaces import Box, Discrete
from rlgear.testing import check_vector_env
from rlgear.timestep import StepType


def make(name="CartPole-v1", num_envs=4, kwargs=None, horizon=None, **options):
    return EnvPoolAdapter().make(name, num_envs, kwargs=kwargs or {}, horizon=horizon, **options)


@pytest.mark.parametrize(
    "name, horizon", [("CartPole-v1", None), ("Pendulum-v1", 7), ("Acrobot-v1", 20), ("MountainCar-v0", 30)]
)
def test_envpool_envs_pass_the_vector_env_contract_check(name, horizon):
    counts = check_vector_env(make(name, horizon=horizon), steps=200)
    assert counts["episodes_terminated"] + counts["episodes_truncated"] >= 1  # a LAST -> FIRST was checked


def test_spaces_are_converted():
    env = make("CartPole-v1")
    assert isinstance(env.observation_space, Box) and env.observation_space.shape == (4,)
    assert isinstance(env.action_space, Discrete) and env.action_space.n == 2
    env = make("Pendulum-v1")
    assert isinstance(env.action_space, Box) and env.action_space.shape == (1,)
    np.testing.assert_allclose(env.action_space.high, [2.0])


def test_horizon_truncates_with_discount_one_then_first_with_zero_reward():
    env = make("Pendulum-v1", num_envs=2, horizon=5)
    ts = env.reset(seed=3)
    assert (ts.step_type == StepType.FIRST).all()
    actions = np.ones((2, 1), np.float32)
    types = []
    for _ in range(5):
        ts = env.step(actions)
        types.append(ts.step_type.copy())
    assert (types[-1] == StepType.LAST).all() and (types[0] == StepType.MID).all()
    np.testing.assert_array_equal(ts.discount, [1.0, 1.0])  # truncated: bootstraps
    assert (ts.reward != 0).all()
    ts = env.step(actions)  # the step after LAST: the next episode's first, action ignored
    assert (ts.step_type == StepType.FIRST).all()
    np.testing.assert_array_equal(ts.reward, [0.0, 0.0])
    np.testing.assert_array_equal(ts.prev_action, np.zeros((2, 1)))


def test_termination_maps_to_discount_zero():
    env = make("CartPole-v1", num_envs=4)
    env.reset(seed=0)
    pushes = np.ones(4, np.int64)  # always push right: the pole falls within a few dozen steps
    for _ in range(100):
        ts = env.step(pushes)
        if (ts.step_type == StepType.LAST).any():
            break
    last = ts.step_type == StepType.LAST
    assert last.any()
    np.testing.assert_array_equal(ts.discount[last], 0.0)


def test_seeded_resets_repeat_and_seeds_differ():
    def first_observations(seed):
        env = make("CartPole-v1", num_envs=3)
        obs = [env.reset(seed=seed).observation]
        for _ in range(10):
            obs.append(env.step(np.zeros(3, np.int64)).observation)
        return np.stack(obs)

    np.testing.assert_array_equal(first_observations(5), first_observations(5))
    assert not np.array_equal(first_observations(5), first_observations(6))
    assert not np.allclose(first_observations(5)[0, 0], first_observations(5)[0, 1])  # envs differ


def test_unknown_env_name_is_a_config_error_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"^env\.name: envpool has no env 'CartPole-v9'.*CartPole-v1"):
        make("CartPole-v9")


def test_bad_and_reserved_kwargs_are_config_errors():
    with pytest.raises(ConfigError, match=r"^env\.kwargs\.num_thread: .*did you mean 'num_threads'"):
        make(kwargs={"num_thread": 1})
    with pytest.raises(ConfigError, match=r"^env\.kwargs\.seed: set by rlgear"):
        make(kwargs={"seed": 1})
    env = make(kwargs={"num_threads": 1})  # a real option goes through
    assert env.num_envs == 4


def test_config_refuses_per_env_wrappers_sync_vectorization_and_videos_not_vector_wrappers(tmp_path):
    base = {"algorithm": "ppo", "env": {"adapter": "envpool", "name": "CartPole-v1"}}
    bad_wrappers = {**base, "env": {**base["env"], "wrappers": [{"name": "gymnasium.wrappers.ClipReward"}]}}
    with pytest.raises(
        ConfigError, match=r"env\.wrappers: the envpool adapter steps all envs in one C\+\+ pool"
    ):
        resolve(bad_wrappers)
    with pytest.raises(
        ConfigError, match=r"env\.vectorization: 'sync' does not apply to the envpool adapter"
    ):
        resolve({**base, "env": {**base["env"], "vectorization": "sync"}})
    videos = {**base, "training": {"evaluation_interval": 1, "evaluation_video_every": 1}}
    with pytest.raises(
        ConfigError, match=r"training\.evaluation_video_every: env adapter 'envpool' cannot record"
    ):
        resolve(videos)
    vector_wrapper = [{"name": "gymnasium.wrappers.vector.NormalizeReward"}]
    resolve({**base, "env": {**base["env"], "vectorization": "native", "wrappers_vector": vector_wrapper}})


def test_vector_wrappers_apply_and_their_statistics_are_the_env_state():
    wrapper = ("gymnasium.wrappers.vector.NormalizeReward", {})  # (name, kwargs), as config items give
    env = make("Pendulum-v1", num_envs=2, wrappers_vector=[wrapper])
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.zeros((2, 1), np.float32))
    state = env.get_state()
    assert state and all(np.isfinite(v).all() for v in state.values())


def test_a_ppo_run_on_envpool_trains_and_its_checkpoint_evaluates(tmp_path):
    config = f"""
algorithm: ppo
env: {{adapter: envpool, name: CartPole-v1}}
seed: 0
workers: {{num_envs_per_worker: 4}}
training: {{train_batch_size: 512, sgd_minibatch_size: 128, num_sgd_iter: 2}}
stop: {{timesteps_total: 1024}}
logging: {{dir: {tmp_path}, name: run, progress: none}}
"""
    (tmp_path / "c.yaml").write_text(config)
    train = subprocess.run(
        [sys.executable, "-m", "rlgear", "train", str(tmp_path / "c.yaml")], capture_output=True, text=True
    )
    assert train.returncode == 0, train.stderr[-2000:]
    assert "Gym has been unmaintained" not in train.stderr  # envpool's `import gym` banner is kept out
    evaluate = subprocess.run(
        [sys.executable, "-m", "rlgear", "evaluate", str(tmp_path / "run"), "--episodes", "2"],
        capture_output=True,
        text=True,
    )
    assert evaluate.returncode == 0, evaluate.stderr[-2000:]
    assert "episode_return_mean" in evaluate.stdout or "return" in evaluate.stdout
