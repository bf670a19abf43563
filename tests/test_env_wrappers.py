"""env.wrappers and env.wrappers_vector: config checks, order, observation spaces, statistics in checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.config import WrapperConfig
from rlgear.discovery import registry
from rlgear.errors import CheckpointError, ConfigError
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter, GymnasiumVectorEnv
from rlgear.run import checkpoint as ckpt
from rlgear.run.agent import evaluate_checkpoint, load
from rlgear.sampling.rollout_worker import RolloutWorker
from tests.conftest import small_config

FRAME_STACK = {"name": "gymnasium.wrappers.FrameStackObservation", "kwargs": {"stack_size": 4}}
FLATTEN = {"name": "gymnasium.wrappers.FlattenObservation"}
NORMALIZE_OBS = {"name": "gymnasium.wrappers.vector.NormalizeObservation"}
STATS = "wrappers_vector/0/obs_rms"


def resolve(tmp_path, overrides=(), **env):
    return config_mod.resolve(
        small_config(tmp_path, env={"name": "CartPole-v1", **env}), source="run.yaml", overrides=overrides
    )


def make(num_envs=2, vectorization="sync", wrappers=(), wrappers_vector=()):
    return GymnasiumAdapter().make(
        "CartPole-v1",
        num_envs,
        kwargs={},
        vectorization=vectorization,
        wrappers=[WrapperConfig(**w) for w in wrappers],
        wrappers_vector=[WrapperConfig(**w) for w in wrappers_vector],
    )


# --- config errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"wrappers": [FRAME_STACK, {"name": "no_such_package.Wrapper"}]},
            ["run.yaml: env.wrappers[1].name: cannot import module 'no_such_package'"],
        ),
        (
            {"wrappers": [{"name": "gymnasium.wrappers.NoSuchWrapper"}]},
            ["run.yaml: env.wrappers[0].name: module 'gymnasium.wrappers' has no attribute 'NoSuchWrapper'"],
        ),
        (
            {"wrappers": [{"name": "collections.OrderedDict"}]},
            ["run.yaml: env.wrappers[0].name: 'collections.OrderedDict' is not a gymnasium.Wrapper subclass"],
        ),
        (
            {"wrappers": [NORMALIZE_OBS]},
            ["env.wrappers[0].name:", "is not a gymnasium.Wrapper subclass", "put it in env.wrappers_vector"],
        ),
        (
            {"wrappers_vector": [FRAME_STACK]},
            [
                "env.wrappers_vector[0].name:",
                "not a gymnasium.vector.VectorWrapper",
                "put it in env.wrappers",
            ],
        ),
        (
            {
                "wrappers": [
                    FLATTEN,
                    {"name": "gymnasium.wrappers.FrameStackObservation", "kwargs": {"size": 4}},
                ]
            },
            [
                "run.yaml: env.wrappers[1].kwargs: FrameStackObservation takes no argument 'size'",
                "did you mean 'stack_size'",
                "(its arguments: stack_size, padding_type)",
            ],
        ),
        (
            {"wrappers": [{"kwargs": {}}]},
            ["run.yaml: env.wrappers[0].name: missing required key"],
        ),
    ],
)
def test_a_wrapper_that_cannot_be_built_is_refused_when_the_config_is_read(tmp_path, env, expected):
    with pytest.raises(ConfigError) as info:
        resolve(tmp_path, **env)
    for text in expected:
        assert text in str(info.value)


def test_a_wrapper_error_from_set_names_the_override(tmp_path):
    with pytest.raises(ConfigError) as info:
        resolve(tmp_path, overrides=["env.wrappers=[{name: gymnasium.wrappers.FrameStackObservation}]"])
    message = str(info.value)
    assert message.startswith("--set env.wrappers=[{name: gymnasium.wrappers.FrameStackObservation}]: ")
    assert (
        "env.wrappers[0].kwargs: FrameStackObservation: missing a required argument: 'stack_size'" in message
    )


BROKEN_REWARD = {"name": "gymnasium.wrappers.TransformReward", "kwargs": {"func": None}}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"wrappers": [FLATTEN, BROKEN_REWARD]},
            "run.yaml: env.wrappers[1]: TransformReward(func=None) breaks the env's first step: "
            "TypeError: 'NoneType' object is not callable",
        ),
        (
            {
                "wrappers": [
                    {
                        "name": "gymnasium.wrappers.TransformObservation",
                        "kwargs": {"func": None, "observation_space": None},
                    }
                ]
            },
            "run.yaml: env.wrappers[0]: TransformObservation(func=None, observation_space=None) breaks the "
            "env's first reset: TypeError: 'NoneType' object is not callable",
        ),
        (
            {
                "wrappers": [
                    {"name": "gymnasium.wrappers.ClipReward", "kwargs": {"min_reward": 2, "max_reward": 1}}
                ]
            },
            "run.yaml: env.wrappers[0]: ClipReward(min_reward=2, max_reward=1) cannot wrap the env: "
            "InvalidBound: Min reward (2) must be smaller than max reward (1)",
        ),
        (
            {
                "wrappers": [FLATTEN],
                "wrappers_vector": [
                    NORMALIZE_OBS,
                    {"name": "gymnasium.wrappers.vector.TransformReward", "kwargs": {"func": None}},
                ],
            },
            "run.yaml: env.wrappers_vector[1]: TransformReward(func=None) breaks the env's first step: "
            "TypeError: 'NoneType' object is not callable",
        ),
    ],
)
def test_a_wrapper_that_breaks_the_env_is_refused_when_the_config_is_read(tmp_path, env, expected):
    # its kwargs fit its signature: only building and stepping one env shows the mistake
    with pytest.raises(ConfigError) as info:
        resolve(tmp_path, **env)
    assert str(info.value) == expected


def test_an_env_that_fails_without_its_wrappers_is_left_to_the_env_build(tmp_path):
    config = resolve(tmp_path, kwargs={"no_such_kwarg": 1}, wrappers=[FLATTEN])  # not a wrapper's mistake
    with pytest.raises(ConfigError) as info:
        GymnasiumAdapter().make("CartPole-v1", 1, kwargs=config.env.kwargs, wrappers=config.env.wrappers)
    assert str(info.value).startswith("env.kwargs: CartPole-v1 does not accept these arguments")


def test_the_external_adapter_refuses_wrappers(tmp_path):
    for key, item in (("wrappers", FRAME_STACK), ("wrappers_vector", NORMALIZE_OBS)):
        with pytest.raises(ConfigError) as info:
            resolve(tmp_path, adapter="external", **{key: [item]})
        assert f"run.yaml: env.{key}: env adapter 'external' does not apply gymnasium wrappers" in str(
            info.value
        )


def test_the_base_check_refuses_what_an_adapter_does_not_declare(tmp_path):
    """EnvAdapter.check_config, written once for all adapters: applies_wrappers, vectorizations and
    records_video decide what is refused, steps_envs says why (the envpool adapter declares the same)."""
    from rlgear.env import EnvAdapter

    class BatchedAdapter(EnvAdapter):
        applies_wrappers = ("wrappers_vector",)
        vectorizations = ("auto", "native")
        steps_envs = "steps all envs in one batch"

        def make(self, *args, **kwargs):  # never called: only the config is checked
            raise NotImplementedError

    def check(overrides=(), **env):  # "batched" is no installed adapter: resolve leaves it alone
        BatchedAdapter.check_config(resolve(tmp_path, overrides, adapter="batched", **env))

    check(wrappers_vector=[NORMALIZE_OBS], vectorization="native")  # what it declares passes
    with pytest.raises(ConfigError) as info:
        check(wrappers=[FLATTEN])
    assert str(info.value) == (
        "run.yaml: env.wrappers: the batched adapter steps all envs in one batch, so per-env gymnasium "
        "wrappers cannot apply; use env.wrappers_vector, or the gymnasium adapter"
    )
    with pytest.raises(ConfigError) as info:
        check(vectorization="sync")
    assert str(info.value) == (
        "run.yaml: env.vectorization: 'sync' does not apply to the batched adapter "
        "(it steps all envs in one batch); use auto or native"
    )
    with pytest.raises(ConfigError) as info:
        check(["training.evaluation_interval=1", "training.evaluation_video_every=1"])
    assert str(info.value) == (
        "--set training.evaluation_video_every=1: training.evaluation_video_every: env adapter 'batched' "
        "cannot record videos (the gymnasium adapter can); set it to 0"
    )


def test_valid_wrappers_resolve(tmp_path):
    config = resolve(tmp_path, wrappers=[FRAME_STACK, FLATTEN], wrappers_vector=[NORMALIZE_OBS])
    assert [w.name for w in config.env.wrappers] == [FRAME_STACK["name"], FLATTEN["name"]]
    assert config.env.wrappers[0].kwargs == {"stack_size": 4}
    assert config.env.wrappers_vector == [WrapperConfig(NORMALIZE_OBS["name"], {})]


# --- applying them ---------------------------------------------------------------------------


def test_wrappers_apply_in_order_in_sync_and_async_vector_envs():
    # the first wraps the bare env: stack then flatten gives (8,), flatten then stack gives (2, 4)
    stack2 = {"name": "gymnasium.wrappers.FrameStackObservation", "kwargs": {"stack_size": 2}}
    cases = [
        ([stack2, FLATTEN], (8,), "sync"),
        ([FLATTEN, stack2], (2, 4), "sync"),
        ([stack2, FLATTEN], (8,), "async"),
    ]
    for wrappers, shape, vectorization in cases:
        env = make(wrappers=wrappers, vectorization=vectorization)
        try:
            assert env.observation_space.shape == shape, (wrappers, vectorization)
            assert env.reset(seed=0).observation.shape == (2, *shape)
            assert env.step(np.zeros(2, dtype=np.int64)).observation.shape == (2, *shape)
        finally:
            env.close()


def test_vector_wrappers_apply_in_order():
    """README: env.wrappers_vector wraps the vector env "in order": the first wraps it, the last is
    outermost. Reshape then flatten gives (4,), flatten then reshape gives (2, 2)."""
    reshape = {"name": "gymnasium.wrappers.vector.ReshapeObservation", "kwargs": {"shape": (2, 2)}}
    flatten = {"name": "gymnasium.wrappers.vector.FlattenObservation"}
    for wrappers_vector, shape in (([reshape, flatten], (4,)), ([flatten, reshape], (2, 2))):
        env = make(wrappers_vector=wrappers_vector)
        try:
            assert env.observation_space.shape == shape, wrappers_vector
            assert env.reset(seed=0).observation.shape == (2, *shape)
        finally:
            env.close()


def test_frame_stack_reaches_the_policy_and_a_short_ppo_run_trains(tmp_path):
    config = small_config(tmp_path, env={"name": "CartPole-v1", "wrappers": [FRAME_STACK]})
    trainer = PPO(config)
    try:
        assert trainer.workers.local_worker.observation_space.shape == (4, 4)
        assert trainer.policy.observation_space.shape == (4, 4)
        before = {k: v.copy() for k, v in trainer.policy.get_weights().items()}
        for _ in range(2):
            result = trainer.train()
        assert result["timesteps_total"] > 100  # 2 x 64 env steps less the reset steps between episodes
        assert np.isfinite(result["learner/total_loss"])
        changed = [k for k, v in trainer.policy.get_weights().items() if not np.array_equal(v, before[k])]
        assert changed, "training did not change the weights"
        # the first layer takes the stacked observation, flattened: 4 frames x 4 values
        assert any(v.shape[0] == 16 for v in before.values() if v.ndim == 2)
    finally:
        trainer.stop()


# --- statistics of vector wrappers -----------------------------------------------------------


def test_normalize_observation_statistics_are_env_state_and_round_trip():
    env = make(wrappers_vector=[NORMALIZE_OBS])
    other = make(wrappers_vector=[NORMALIZE_OBS])
    try:
        env.reset(seed=0)
        for _ in range(30):
            env.step(np.ones(2, dtype=np.int64))
        state = env.get_state()
        assert sorted(state) == [f"{STATS}/count", f"{STATS}/mean", f"{STATS}/var"]
        assert state[f"{STATS}/count"] > 60 and np.abs(state[f"{STATS}/mean"]).sum() > 0
        other.set_state(state)
        for key, value in other.get_state().items():
            np.testing.assert_array_equal(value, state[key])
        # frozen: stepping no longer moves them
        other.freeze_statistics()
        other.reset(seed=1)
        for _ in range(10):
            other.step(np.zeros(2, dtype=np.int64))
        for key, value in other.get_state().items():
            np.testing.assert_array_equal(value, state[key])
        with pytest.raises(CheckpointError, match=r"do not fit env\.wrappers_vector"):
            make().set_state(state)
    finally:
        env.close()
        other.close()


def _train(tmp_path, **extra):
    return small_config(
        tmp_path,
        env={"name": "CartPole-v1", "wrappers_vector": [NORMALIZE_OBS]},
        stop={"training_iteration": 2},
        **extra,
    )


def test_normalize_observation_statistics_survive_a_checkpoint_and_a_resume(tmp_path, monkeypatch):
    config = _train(
        tmp_path,
        logging={"dir": str(tmp_path / "runs"), "name": "run", "progress": "none", "tensorboard": False},
    )
    rlgear.train(config)
    run_dir = tmp_path / "runs" / "run"
    first = ckpt.latest(run_dir)
    arrays, *_ = ckpt.read(first)
    saved = {k.removeprefix("env/"): v for k, v in arrays.items() if k.startswith("env/")}
    assert sorted(saved) == [f"{STATS}/count", f"{STATS}/mean", f"{STATS}/var"]
    assert saved[f"{STATS}/count"] > 128  # every training observation counted

    # a trainer restored from the checkpoint normalizes with the saved statistics
    trainer = PPO(config)
    try:
        fresh = trainer.workers.local_worker.env.get_state()
        trainer.restore(first)
        restored = trainer.workers.local_worker.env.get_state()
        # restore restarts the envs, and NormalizeObservation counts the 2 reset observations
        assert float(restored[f"{STATS}/count"]) == float(saved[f"{STATS}/count"]) + 2
        assert float(fresh[f"{STATS}/count"]) < 3
        np.testing.assert_allclose(restored[f"{STATS}/mean"], saved[f"{STATS}/mean"], atol=0.05)
        # evaluation copies the training envs' statistics, frozen: still the same after the evaluation
        trainer.evaluate(2)
        evaluated = trainer._evaluation_worker.env.get_state()
        for key, value in restored.items():
            np.testing.assert_array_equal(evaluated[key], value)
    finally:
        trainer.stop()

    # --resume continues from them: the count grows from the saved one, it does not start over
    config["stop"] = {"training_iteration": 3}
    rlgear.train(config, resume=run_dir)
    resumed, *_ = ckpt.read(ckpt.latest(run_dir))
    count = float(resumed[f"env/{STATS}/count"])
    assert count > float(saved[f"{STATS}/count"]) + 64
    assert load(run_dir).env_state[f"{STATS}/count"] == count

    # rlgear evaluate restores them too, frozen (a policy trained on normalized observations acts on them)
    seen = {}
    real_freeze = GymnasiumVectorEnv.freeze_statistics

    def freeze(env):
        seen["frozen"] = env.get_state()
        real_freeze(env)

    monkeypatch.setattr(GymnasiumVectorEnv, "freeze_statistics", freeze)
    evaluation = evaluate_checkpoint(run_dir, 2)
    assert len(evaluation.episodes) == 2
    assert float(seen["frozen"][f"{STATS}/count"]) == count


# --- reward wrappers: the run reports the env's own returns (issue 37) -------------------------

NORMALIZE_REWARD = {"name": "gymnasium.wrappers.vector.NormalizeReward"}
CLIP_HALF = {"name": "gymnasium.wrappers.ClipReward", "kwargs": {"max_reward": 0.5}}


def sampled_episodes(config, count):
    """At least ``count`` episode summaries from a PPO evaluator's sampling, then ``count`` greedy ones."""
    evaluator = RolloutWorker(
        config, PPO.policy_class("torch"), registry.load_env_adapter("gymnasium"), PPO.postprocess
    )
    try:
        episodes = []
        while len(episodes) < count:
            episodes += evaluator.sample_with_episodes()[2]
        return episodes, evaluator.evaluate(count)
    finally:
        evaluator.stop()


@pytest.mark.parametrize(
    "env",
    [
        {"wrappers_vector": [NORMALIZE_REWARD]},  # native CartPole: recorded beneath the vector wrappers
        {"wrappers": [CLIP_HALF], "vectorization": "async"},  # recorded in each env, beneath env.wrappers
        {"wrappers": [FLATTEN, CLIP_HALF], "wrappers_vector": [NORMALIZE_REWARD]},
    ],
)
def test_reward_wrappers_change_what_training_sees_not_the_reported_returns(tmp_path, env):
    pytest.importorskip("torch")
    episodes, greedy = sampled_episodes(resolve(tmp_path, **env), count=3)
    for e in episodes + greedy:
        assert e["episode_return"] == e["length"]  # CartPole pays 1 per step: its own return is the length
        assert e["wrapped_return"] != pytest.approx(e["length"])  # what training saw differs
        if "wrappers_vector" not in env:
            assert e["wrapped_return"] == 0.5 * e["length"]


def test_the_run_reports_the_envs_returns_under_reward_normalization_and_the_wrapped_ones_apart(tmp_path):
    pytest.importorskip("torch")
    config = resolve(
        tmp_path,
        overrides=["training.evaluation_interval=1", "training.evaluation_episodes=2"],
        wrappers_vector=[NORMALIZE_REWARD],
    )
    trainer, result = PPO(config), {}
    try:
        while result.get("episode_return_mean") is None:  # the first iteration that finished an episode
            result = trainer.train()
    finally:
        trainer.stop()
    for prefix in ("", "evaluation/"):
        assert result[f"{prefix}episode_return_mean"] == result[f"{prefix}episode_len_mean"]
        assert result[f"{prefix}wrapped/episode_return_mean"] != pytest.approx(
            result[f"{prefix}episode_len_mean"]
        )
