"""The framework-free runtime (issue 32): ``rlgear.inference.load(checkpoint)`` acts with numpy and
safetensors only, and acts as the framework does.

Parity: for every kind the built-ins produce, 1000 observations sampled from the env's observation
space (masks random, at least one action allowed per block) go through ``rlgear.inference.load`` and
through ``rlgear.load`` acting in the framework (``model.numpy_inference: false``): greedy discrete
actions identical, continuous ones and the network outputs (distribution inputs, Q-values, the actor's
output, the LSTM state) within 1e-5. Checkpoints are written by a trainer whose weights were moved far
from their initialisation (a near-uniform policy head would make every argmax a near tie).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rlgear
import rlgear.inference
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import ConfigError, UnsupportedError
from rlgear.inference.policies import (
    ActorCriticRuntime,
    CategoricalActorRuntime,
    LSTMRuntime,
    QRuntime,
    RuntimePolicy,
    TanhActorRuntime,
)
from rlgear.policy import flatten_observations
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from rlgear.timestep import StepType, TimeStep
from tests.conftest import needs_tf

N = 1000
TOL = {"rtol": 1e-5, "atol": 1e-5}
FRAMEWORK = ["model.numpy_inference=false"]

TRAINING = {  # the smallest settings each algorithm accepts; most checkpoints are written untrained
    "ppo": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1},
    "a2c": {"train_batch_size": 32},
    "impala": {"train_batch_size": 32},
    "dqn": {"learning_starts": 10, "train_batch_size": 8},
    "qrdqn": {"learning_starts": 10, "train_batch_size": 8, "num_quantiles": 5},
    "sac": {"learning_starts": 10, "train_batch_size": 8},
    "td3": {"learning_starts": 10, "train_batch_size": 8},
    "ddpg": {"learning_starts": 10, "train_batch_size": 8},
    "es": {"num_perturbations": 2, "perturbations_per_task": 2, "noise_table_size": 10_000},
    "ars": {"num_perturbations": 2, "perturbations_per_task": 2, "noise_table_size": 10_000},
}


def write_checkpoint(tmp_path: Path, algorithm: str, env: str, backend: str = "torch", train: bool = False,
                     model: dict | None = None, training: dict | None = None) -> Path:  # fmt: skip
    """A checkpoint of ``algorithm`` on ``env``; its weights moved far from the initialisation."""
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 0,
        "env": {"name": env, "vectorization": "sync"},
        "workers": {"num_envs_per_worker": 2},
        "model": {"hidden_sizes": [16, 16], **(model or {})},
        "training": {**TRAINING.get(algorithm, {}), **(training or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    config = config_mod.resolve(raw)
    trainer = registry.load_algorithm(algorithm)(config, logdir=tmp_path / "run")
    try:
        if train:
            trainer.train()
        rng = np.random.default_rng(1)
        weights = trainer.policy.get_weights()
        trainer.policy.set_weights(
            {k: (v + rng.normal(0, 0.3, v.shape)).astype(v.dtype) for k, v in weights.items()}
        )
        return Path(trainer.save())
    finally:
        trainer.stop()


def mask_blocks(action_space) -> list[int]:
    return list(action_space.nvec) if isinstance(action_space, MultiDiscrete) else [action_space.n]


def sample(space, rng: np.random.Generator, n: int, action_space=None):
    """``n`` observations of ``space`` (an ``action_mask`` key: at least one action allowed per block)."""
    if isinstance(space, Dict):
        out = {key: sample(part, rng, n) for key, part in space.items() if key != "action_mask"}
        if "action_mask" in space:
            masks = []
            for width in mask_blocks(action_space):
                mask = rng.random((n, width)) < 0.5
                mask[np.arange(n), rng.integers(width, size=n)] = True
                masks.append(mask)
            out["action_mask"] = np.concatenate(masks, axis=1).astype(np.int8)
        return out
    if isinstance(space, Tuple):
        return tuple(sample(part, rng, n) for part in space.spaces)
    if isinstance(space, Discrete):
        return rng.integers(space.n, size=n)
    if isinstance(space, MultiBinary):
        return rng.integers(2, size=(n, *space.shape)).astype(np.int8)
    if space.dtype == np.uint8:
        return rng.integers(0, 256, size=(n, *space.shape)).astype(np.uint8)
    low = np.where(np.isfinite(space.low), space.low, -3.0)
    high = np.where(np.isfinite(space.high), space.high, 3.0)
    return rng.uniform(low, high, size=(n, *space.shape)).astype(np.float32)


def model_input(loaded, observations):
    """What the policy's network reads: preprocessed, then through the frozen observation filter."""
    x = loaded.preprocessor.transform(observations)
    return x if loaded.obs_filter is None else loaded.obs_filter.apply(x)


def assert_same_actions(space, got, expected):
    """Discrete parts identical; Box parts (the means, computed in two frameworks) within 1e-5."""
    if isinstance(space, Tuple | Dict):
        parts = space.spaces if isinstance(space, Tuple) else [space[k] for k in space]
        keys = range(len(parts)) if isinstance(space, Tuple) else list(space.keys())
        for part, key in zip(parts, keys, strict=True):
            assert_same_actions(part, got[key], expected[key])
        return
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if isinstance(space, Box):
        np.testing.assert_allclose(got, expected, **TOL)
    else:
        np.testing.assert_array_equal(got, expected)


def allowed(mask: np.ndarray, action_space, actions: np.ndarray) -> bool:
    offsets = np.concatenate([[0], np.cumsum(mask_blocks(action_space))[:-1]])
    columns = actions.reshape(len(actions), -1) + offsets
    return bool(np.take_along_axis(mask.astype(bool), columns, axis=1).all())


def load_both(path: Path):
    runtime = rlgear.inference.load(path)
    framework = rlgear.load(path, FRAMEWORK)
    assert isinstance(runtime.policy, RuntimePolicy)
    assert type(framework.policy).__module__.startswith("rlgear.plugins.algorithms")
    return runtime, framework


# --- no framework ----------------------------------------------------------------------------------
def test_the_runtime_imports_neither_torch_nor_tensorflow(tmp_path):
    path = write_checkpoint(tmp_path, "ppo", "tests.spaces_envs:MaskedChoiceEnv")
    code = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import rlgear.inference
        policy = rlgear.inference.load({str(path)!r})
        mask = np.array([[1, 0, 1, 0], [0, 1, 0, 0]], np.int8)
        obs = {{"action_mask": mask, "cue": np.array([0, 1]), "noise": np.zeros((2, 2), np.float32)}}
        actions = policy.compute_actions(obs)
        print(json.dumps({{"actions": actions.tolist(),
                          "loaded": [m for m in ("torch", "tensorflow") if m in sys.modules]}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["actions"][0] in (0, 2) and result["actions"][1] == 1  # the masks hold


# --- actor-critic MLP and conv, every action space -------------------------------------------------
ACTOR_CRITIC = {
    "ppo-box-obs-discrete": ("ppo", "CartPole-v1", {}),
    "a2c-shared-relu": ("a2c", "CartPole-v1", {"vf_share_layers": True, "activation": "relu"}),
    "impala-elu": ("impala", "CartPole-v1", {"activation": "elu"}),
    "ppo-box-actions": ("ppo", "Pendulum-v1", {}),
    "ppo-dict-obs-masked": ("ppo", "tests.spaces_envs:MaskedChoiceEnv", {}),
    "ppo-multidiscrete-masked": ("ppo", "tests.spaces_envs:MaskedJointEnv", {}),
    "ppo-tuple-actions": ("ppo", "tests.spaces_envs:TupleActionEnv", {}),
    "pg-dict-actions": ("pg", "tests.spaces_envs:DictActionEnv", {}),
    "ppo-conv": ("ppo", "tests.image_env:QuadrantEnv", {"conv_filters": [[4, 3, 2], [8, 3, 1]]}),
    "ppo-image-plus-vector": ("ppo", "tests.dict_image_env:DictImageEnv", {"conv_filters": [[4, 3, 2]]}),
}


@pytest.mark.parametrize("kind", sorted(ACTOR_CRITIC))
def test_actor_critic_acts_as_the_framework(tmp_path, kind):
    algorithm, env, model = ACTOR_CRITIC[kind]
    runtime, framework = load_both(write_checkpoint(tmp_path, algorithm, env, model=model))
    assert isinstance(runtime.policy, ActorCriticRuntime) and framework.policy.fast_actor is None
    obs = sample(runtime.observation_space, np.random.default_rng(0), N, runtime.action_space)
    x = model_input(framework, obs)
    np.testing.assert_allclose(
        runtime.policy.action_distribution_inputs(x), framework.policy.action_distribution_inputs(x), **TOL
    )
    got, expected = runtime.compute_actions(obs), framework.compute_actions(obs)
    assert_same_actions(runtime.action_space, got, expected)
    if isinstance(obs, dict) and "action_mask" in obs:
        assert allowed(obs["action_mask"], runtime.action_space, got)
        # the mask matters: without it some greedy actions differ
        unmasked = framework.compute_actions({**obs, "action_mask": np.ones_like(obs["action_mask"])})
        assert not np.array_equal(unmasked, got)
    single = runtime.compute_single_action(
        {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else obs[0]
    )
    assert_same_actions(runtime.action_space, with_batch_axis(single), with_batch_axis(first(expected)))


def first(actions):
    if isinstance(actions, dict):
        return {key: value[0] for key, value in actions.items()}
    return tuple(value[0] for value in actions) if isinstance(actions, tuple) else actions[0]


def with_batch_axis(action):
    if isinstance(action, dict):
        return {key: np.asarray(value)[None] for key, value in action.items()}
    if isinstance(action, tuple):
        return tuple(np.asarray(value)[None] for value in action)
    return np.asarray(action)[None]


def test_the_observation_filter_applies_as_in_rlgear_load(tmp_path):
    path = write_checkpoint(
        tmp_path, "ppo", "CartPole-v1", train=True, model={"observation_filter": "mean_std"}
    )
    runtime, framework = load_both(path)
    assert runtime.obs_filter is not None and runtime.obs_filter.frozen
    obs = sample(runtime.observation_space, np.random.default_rng(0), N)
    filtered = runtime.obs_filter.apply(obs)
    assert not np.allclose(filtered, obs)  # trained statistics: the filter changes the input
    np.testing.assert_array_equal(filtered, framework.obs_filter.apply(obs))
    np.testing.assert_array_equal(runtime.compute_actions(obs), framework.compute_actions(obs))
    # acting on the raw observations would not give these actions
    raw = runtime.policy.compute_actions(
        TimeStep(np.zeros(N, np.int32), np.zeros(N), np.ones(N), obs, np.zeros(N), np.arange(N))
    )[0]
    assert not np.array_equal(raw, runtime.compute_actions(obs))


# --- LSTM ------------------------------------------------------------------------------------------
LSTM = {
    "discrete-prev-action-reward": (
        "CartPole-v1", {"lstm_use_prev_action": True, "lstm_use_prev_reward": True},
    ),
    "box-prev-action": ("Pendulum-v1", {"lstm_use_prev_action": True}),
    "conv": ("tests.image_env:QuadrantEnv", {"conv_filters": [[4, 3, 2]]}),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(LSTM))
def test_lstm_acts_as_the_framework_over_sequences_with_episode_starts(tmp_path, kind):
    env, model = LSTM[kind]
    model = {"lstm": True, "lstm_cell_size": 16, "max_seq_len": 8, **model}
    runtime, framework = load_both(write_checkpoint(tmp_path, "ppo", env, model=model))
    assert isinstance(runtime.policy, LSTMRuntime) and runtime.policy.recurrent
    rng = np.random.default_rng(0)
    envs, steps = 20, N // 20
    for _ in range(steps):
        obs = sample(runtime.observation_space, rng, envs)
        start = rng.random(envs) < 0.1
        rewards = rng.normal(size=envs).astype(np.float32)
        expected = framework.compute_actions(obs, episode_start=start, prev_rewards=rewards)
        got = runtime.compute_actions(obs, episode_start=start, prev_rewards=rewards)
        assert_same_actions(runtime.action_space, got, expected)
        for mine, theirs in zip(runtime.state, framework.state, strict=True):
            np.testing.assert_allclose(mine, theirs, **TOL)
    assert np.abs(runtime.state[0]).max() > 0.05  # the state carries something
    # the heads on a state mid-episode: distribution inputs and values
    x = model_input(framework, obs)
    step = TimeStep(
        np.full(envs, StepType.MID, np.int32), rewards, np.ones(envs, np.float32), x,
        np.asarray(got), np.arange(envs),
    )  # fmt: skip
    mine = runtime.policy.recurrent_step(step, runtime.state)
    theirs = framework.policy.recurrent_step(step, runtime.state)
    for a, b in zip(mine[:2], theirs[:2], strict=True):
        np.testing.assert_allclose(a, b.numpy(), **TOL)


ATTENTION = {
    "discrete": ("CartPole-v1", {}),
    "box": ("Pendulum-v1", {}),
    "conv": ("tests.image_env:QuadrantEnv", {"conv_filters": [[4, 3, 2]]}),
}


@pytest.mark.parametrize("kind", sorted(ATTENTION))
def test_attention_memory_acts_as_the_framework_over_sequences_with_episode_starts(tmp_path, kind):
    """``model.attention`` through its numpy twin: actions, and the memory and mask carried, as the framework."""
    env, model = ATTENTION[kind]
    model = {"attention": True, "attention_dim": 8, "attention_memory": 4, "max_seq_len": 8, **model}
    runtime, framework = load_both(write_checkpoint(tmp_path, "ppo", env, model=model))
    assert isinstance(runtime.policy, LSTMRuntime) and runtime.policy.recurrent
    rng = np.random.default_rng(0)
    envs = 20
    for _ in range(N // envs):
        obs = sample(runtime.observation_space, rng, envs)
        start = rng.random(envs) < 0.1
        expected = framework.compute_actions(obs, episode_start=start)
        got = runtime.compute_actions(obs, episode_start=start)
        assert_same_actions(runtime.action_space, got, expected)
        for mine, theirs in zip(runtime.state, framework.state, strict=True):
            np.testing.assert_allclose(mine, theirs, **TOL)
    assert runtime.state[1].all(axis=1).any()  # full memories were compared


# --- DQN ---------------------------------------------------------------------------------------------
DQN = {
    "plain": ("CartPole-v1", {"dueling": False}, {}),
    "dueling-masked": ("tests.spaces_envs:MaskedChoiceEnv", {"dueling": True}, {}),
    "c51-dueling": ("CartPole-v1", {"num_atoms": 11, "v_min": -5.0, "v_max": 5.0}, {}),
    "noisy-c51": ("CartPole-v1", {"noisy": True, "num_atoms": 5, "dueling": False}, {}),
    "conv": ("tests.image_env:QuadrantEnv", {}, {"conv_filters": [[4, 3, 2]]}),
}


QRDQN = {
    "dueling": ("CartPole-v1", {"num_quantiles": 7}, {}),
    "noisy-plain-masked": ("tests.spaces_envs:MaskedChoiceEnv", {"noisy": True, "dueling": False}, {}),
}


@pytest.mark.parametrize("kind", sorted(DQN))
def test_dqn_acts_as_the_framework(tmp_path, kind):
    check_q_runtime(tmp_path, "dqn", *DQN[kind])


@pytest.mark.parametrize("kind", sorted(QRDQN))
def test_qrdqn_acts_as_the_framework(tmp_path, kind):
    """Q-values are each action's mean quantile, as the backends' QR-DQN policy."""
    check_q_runtime(tmp_path, "qrdqn", *QRDQN[kind])


def check_q_runtime(tmp_path, algorithm, env, training, model):
    import torch

    runtime, framework = load_both(write_checkpoint(tmp_path, algorithm, env, model=model, training=training))
    assert isinstance(runtime.policy, QRuntime)
    assert runtime.policy.net.noisy == bool(training.get("noisy"))
    obs = sample(runtime.observation_space, np.random.default_rng(0), N, runtime.action_space)
    x = model_input(framework, obs)
    policy = framework.policy
    policy.set_noise(explore=False)  # greedy: the noisy layers' mean weights, as compute_actions does
    with torch.no_grad():
        flat = torch.from_numpy(flatten_observations(policy.observation_space, x))
        expected_q = policy.q_values(policy.model(flat)[0]).numpy()
    np.testing.assert_allclose(runtime.policy.q_values(x), expected_q, **TOL)
    got, expected = runtime.compute_actions(obs), framework.compute_actions(obs)
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(got)) > 1
    if isinstance(obs, dict):
        assert allowed(obs["action_mask"], runtime.action_space, got)
    if training.get("noisy"):  # exploring draws fresh noise: other Q-values
        assert not np.allclose(runtime.policy.q_values(x, explore=True), expected_q, **TOL)


# --- SAC, TD3, DDPG ----------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["sac", "td3", "ddpg"])
def test_tanh_actors_act_as_the_framework(tmp_path, algorithm):
    import torch

    runtime, framework = load_both(write_checkpoint(tmp_path, algorithm, "Pendulum-v1"))
    assert isinstance(runtime.policy, TanhActorRuntime)
    assert runtime.policy.net.gaussian == (algorithm == "sac")
    obs = sample(runtime.observation_space, np.random.default_rng(0), N)
    x = model_input(framework, obs)
    with torch.no_grad():
        expected_out = framework.policy.model.actor(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(runtime.policy.actor_outputs(x), expected_out, **TOL)
    got = runtime.compute_actions(obs)
    np.testing.assert_allclose(got, framework.policy.greedy_actions(x), **TOL)  # torch's tanh and rescale
    np.testing.assert_array_equal(got, framework.compute_actions(obs))
    assert got.min() >= -2.0 and got.max() <= 2.0 and got.std() > 0.1
    if algorithm == "sac":  # exploring samples the Gaussian, within the bounds
        explored = runtime.compute_actions(obs, explore=True)
        assert not np.allclose(explored, got) and np.abs(explored).max() <= 2.0
    else:
        with pytest.raises(UnsupportedError, match="explore=True"):
            runtime.compute_actions(obs, explore=True)


def test_discrete_sac_acts_with_its_categorical_actor_as_the_framework(tmp_path):
    import torch

    runtime, framework = load_both(write_checkpoint(tmp_path, "sac", "CartPole-v1"))
    assert isinstance(runtime.policy, CategoricalActorRuntime)
    obs = sample(runtime.observation_space, np.random.default_rng(0), N)
    x = model_input(framework, obs)
    with torch.no_grad():
        expected_logits = framework.policy.model.actor(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(runtime.policy.actor_outputs(x), expected_logits, **TOL)
    got = runtime.compute_actions(obs)
    np.testing.assert_array_equal(got, framework.policy.greedy_actions(x))
    np.testing.assert_array_equal(got, framework.compute_actions(obs))
    explored = runtime.compute_actions(obs, explore=True)
    assert explored.dtype == np.int64 and set(np.unique(explored)) <= {0, 1}


# --- ES, ARS ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["es", "ars"])
def test_framework_free_algorithms_load_their_own_numpy_policy(tmp_path, algorithm):
    path = write_checkpoint(tmp_path, algorithm, "CartPole-v1")
    runtime, loaded = rlgear.inference.load(path), rlgear.load(path)
    assert type(runtime.policy) is type(loaded.policy) and getattr(runtime.policy, "framework_free", False)
    obs = sample(runtime.observation_space, np.random.default_rng(0), N)
    got = runtime.compute_actions(obs)
    np.testing.assert_array_equal(got, loaded.compute_actions(obs))
    weights = runtime.policy.weights  # the checkpoint's (moved) weights, not a fresh initialisation
    for name, value in rlgear.run.agent.load_weights(path).items():
        np.testing.assert_array_equal(weights[name], value)


# --- TensorFlow ------------------------------------------------------------------------------------
@needs_tf
@pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")
def test_a_tf_checkpoint_acts_as_tf(tmp_path):
    path = write_checkpoint(tmp_path, "ppo", "tests.spaces_envs:MaskedChoiceEnv", backend="tf")
    runtime, framework = load_both(path)
    assert type(framework.policy).__module__.endswith("tf_policy")
    obs = sample(runtime.observation_space, np.random.default_rng(0), N, runtime.action_space)
    x = model_input(framework, obs)
    np.testing.assert_allclose(
        runtime.policy.action_distribution_inputs(x), framework.policy.action_distribution_inputs(x), **TOL
    )
    got = runtime.compute_actions(obs)
    np.testing.assert_array_equal(got, framework.compute_actions(obs))
    assert allowed(obs["action_mask"], runtime.action_space, got)


# --- exploring, and what is refused -----------------------------------------------------------------
def test_exploring_samples_allowed_actions_reproducibly(tmp_path):
    path = write_checkpoint(tmp_path, "ppo", "tests.spaces_envs:MaskedChoiceEnv")
    first, second = rlgear.inference.load(path), rlgear.inference.load(path)
    obs = sample(first.observation_space, np.random.default_rng(0), N, first.action_space)
    explored = first.compute_actions(obs, explore=True)
    assert allowed(obs["action_mask"], first.action_space, explored)
    assert not np.array_equal(explored, first.compute_actions(obs))
    np.testing.assert_array_equal(second.compute_actions(obs, explore=True), explored)  # seeded


def test_a_custom_model_is_refused_naming_the_key(tmp_path):
    path = write_checkpoint(
        tmp_path, "ppo", "CartPole-v1", model={"custom": "tests.custom_models:TinyActorCritic"}
    )
    with pytest.raises(ConfigError, match=r"^model\.custom: .*no numpy twin"):
        rlgear.inference.load(path)


def test_the_0_1_names_of_the_numpy_twin_still_resolve_with_a_warning():
    import rlgear.blocks.inference as twin

    with pytest.warns(DeprecationWarning, match=r"rlgear.inference.NumpyActorCritic moved to rlgear.blocks"):
        assert rlgear.inference.NumpyActorCritic is twin.NumpyActorCritic
    with pytest.raises(AttributeError):
        rlgear.inference.no_such_name  # noqa: B018


def test_a_multi_agent_checkpoint_acts_per_policy_with_its_own_model(tmp_path):
    from tests.test_multi_agent import independent, ma_config

    policies = {"pa": {}, "pb": {"model": {"activation": "relu", "vf_share_layers": True}}}
    raw = ma_config(multiagent=independent(policies=policies))
    raw["logging"] = {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"}
    trainer = registry.load_algorithm("ppo")(config_mod.resolve(raw), logdir=tmp_path / "run")
    try:
        rng = np.random.default_rng(1)
        for policy in trainer.policy_map.values():
            weights = policy.get_weights()
            policy.set_weights(
                {k: v + rng.normal(0, 0.3, v.shape).astype(v.dtype) for k, v in weights.items()}
            )
        path = trainer.save()
    finally:
        trainer.stop()
    with pytest.raises(rlgear.errors.CheckpointError, match=r"holds 2 policies \(pa, pb\); say which one"):
        rlgear.inference.load(path)
    for pid in ("pa", "pb"):
        runtime, framework = rlgear.inference.load(path, pid), rlgear.load(path, FRAMEWORK, pid)
        assert runtime.policy.net.shared == (pid == "pb")
        obs = sample(runtime.observation_space, np.random.default_rng(0), N)
        np.testing.assert_allclose(
            runtime.policy.action_distribution_inputs(obs),
            framework.policy.action_distribution_inputs(obs),
            **TOL,
        )
        np.testing.assert_array_equal(runtime.compute_actions(obs), framework.compute_actions(obs))
