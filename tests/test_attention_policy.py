"""Attention-memory policies (``model.attention``): config errors, the evaluator's state, portable
weights and checkpoints, every recurrent algorithm, remote workers and multi-agent policies.

The memory is the recurrent state, so these mirror the LSTM's tests (tests/test_lstm_policy.py,
tests/test_lstm_ray.py, tests/test_multi_agent.py): what they prove for ``[h, c]`` is proved here
for ``[memory, mask]``.
"""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.spaces import Box, Discrete, MultiDiscrete, Tuple
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS, small_config
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, PENDULUM_ACT, PENDULUM_OBS, random_weights

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

MEMORY = 4
ATTENTION = {
    "attention": True,
    "attention_dim": 8,
    "attention_heads": 2,
    "attention_layers": 2,
    "attention_memory": MEMORY,
    "max_seq_len": 5,
    "hidden_sizes": [16],
}
WIDTH = 2 * MEMORY * 8


def resolve(tmp_path, algorithm="ppo", model=None, backend="torch", env="CartPole-v1", **sections):
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 3,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 3, "rollout_fragment_length": 7},
        "model": {**ATTENTION, **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        **sections,
    }
    return config_mod.resolve(raw)


def make_policy(tmp_path, backend="torch", continuous=False, **model):
    config = resolve(
        tmp_path, model=model, backend=backend, env="Pendulum-v1" if continuous else "CartPole-v1"
    )
    obs, act = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    policy = registry.load_algorithm("ppo").policy_class(backend)(obs, act, config)
    policy.set_weights(random_weights(policy.get_weights(), seed=5, gain=1.5))
    return policy


def timestep(obs, step_type) -> TimeStep:
    n = obs.shape[0]
    return TimeStep(
        step_type=np.asarray(step_type, np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
        observation=np.asarray(obs, np.float32),
        prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n, dtype=np.int32),
    )


def train(tmp_path, algorithm="ppo", backend="torch", **sections):
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 2},
        "training": {"train_batch_size": 64},
        "model": ATTENTION,
        "stop": {"training_iteration": 2},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return rlgear.train(raw)


# --- config -------------------------------------------------------------------------------------------
def test_dqn_refuses_attention_with_the_key_named(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.attention: algorithm 'dqn' does not support recurrent"):
        resolve(tmp_path, algorithm="dqn")


@pytest.mark.parametrize(
    ("model", "pattern"),
    [
        ({"lstm": True}, r"model\.attention: model\.attention and model\.lstm are two recurrent models"),
        ({"custom": "tests.custom_models:TinyModel"}, r"model\.attention: a custom model"),
        ({"attention_heads": 3}, r"model\.attention_heads: must divide model\.attention_dim \(8\)"),
        ({"lstm_use_prev_action": True}, r"model\.lstm_use_prev_action: feeds the LSTM only"),
        ({"lstm_use_prev_reward": True}, r"model\.lstm_use_prev_reward: feeds the LSTM only"),
        ({"attention_dim": 0}, r"model\.attention_dim: expected a positive number"),
        ({"attention_heads": 0}, r"model\.attention_heads: expected a positive number"),
        ({"attention_layers": 0}, r"model\.attention_layers: expected a positive number"),
        ({"attention_memory": 0}, r"model\.attention_memory: expected a positive number"),
        ({"attention_mlp_dim": -1}, r"model\.attention_mlp_dim: expected a positive number"),
        ({"max_seq_len": 0}, r"model\.max_seq_len: expected a positive number"),
    ],
)
def test_config_errors_name_the_key(tmp_path, model, pattern):
    with pytest.raises(ConfigError, match=pattern):
        resolve(tmp_path, model=model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "action_space",
    [MultiDiscrete([3, 3]), Tuple([Discrete(3), Box(np.array([-1.0]), np.array([1.0]))])],
    ids=["multi_discrete", "tuple"],
)
def test_composite_actions_are_refused_naming_the_key(tmp_path, backend, action_space):
    policy_class = registry.load_algorithm("ppo").policy_class(backend)
    with pytest.raises(ConfigError, match=r"model\.attention: recurrent policies act in Discrete or Box"):
        policy_class(CARTPOLE_OBS, action_space, resolve(tmp_path, backend=backend))


# --- the acting contract and the evaluator's state ---------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_initial_state_is_an_empty_memory_per_slot(tmp_path, backend):
    policy = make_policy(tmp_path, backend)
    state = policy.get_initial_state(3)
    assert policy.recurrent and [s.shape for s in state] == [(3, WIDTH), (3, MEMORY)]
    assert all(s.dtype == np.float32 and not s.any() for s in state)


def run_evaluator(tmp_path, backend, fragments, numpy_inference=True):
    config = resolve(tmp_path, model={"numpy_inference": numpy_inference}, backend=backend)
    evaluator = RolloutWorker(
        config, registry.load_algorithm("ppo").policy_class(backend), registry.load_env_adapter("gymnasium")
    )
    evaluator.policy.set_weights(random_weights(evaluator.policy.get_weights(), seed=2, gain=1.5))
    try:
        return evaluator.policy, [evaluator._sample_fragment() for _ in range(fragments)]
    finally:
        evaluator.stop()


def unroll(policy, obs, resets):
    """The framework model over one env's whole trajectory from an empty memory: values ``[T]``."""
    empty = policy.get_initial_state(1)
    steps = obs.shape[0]
    if policy.config.backend == "torch":
        import torch

        with torch.no_grad():
            _, values, _ = policy.model(
                torch.from_numpy(obs), [torch.from_numpy(s) for s in empty], None, None, steps,
                torch.from_numpy(resets),
            )  # fmt: skip
        return values.numpy()
    import tensorflow as tf

    _, values, _ = policy.model(tf.constant(obs), [tf.constant(s) for s in empty], None, None, steps,
                                tf.constant(resets))  # fmt: skip
    return values.numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("numpy_inference", [True, False], ids=["twin", "framework"])
def test_state_carried_across_fragments_equals_one_long_unroll(tmp_path, backend, numpy_inference):
    """Each row's state-in is zero at FIRST and the previous row's state-out otherwise (fragments chain:
    the bootstrap row is acted on again from the same state), and the values the actor recorded step by
    step over 8 fragments equal one unroll of each env's whole trajectory (resets at FIRST rows)."""
    policy, fragments = run_evaluator(tmp_path, backend, 8, numpy_inference)
    for k in range(1, len(fragments)):
        for key in (SB.state_in(0), SB.state_in(1)):
            np.testing.assert_array_equal(fragments[k - 1][key][-1], fragments[k][key][0])
    rows = {
        key: np.concatenate([f[key][:-1] for f in fragments]) for key in (SB.OBS, SB.STEP_TYPES, SB.VF_PREDS)
    }
    rows.update(
        {key: np.concatenate([f[key][:-1] for f in fragments]) for key in (SB.state_in(0), SB.state_in(1))}
    )
    first = rows[SB.STEP_TYPES] == StepType.FIRST
    assert first[1:].sum() >= 3  # episodes ended and started inside (CartPole under random weights)
    assert not rows[SB.state_in(0)][first].any() and not rows[SB.state_in(1)][first].any()
    assert (rows[SB.state_in(1)].sum(axis=-1) == MEMORY).any()  # the memory filled up, then shifted
    for env in range(3):
        values = unroll(policy, rows[SB.OBS][:, env].astype(np.float32), first[:, env])
        np.testing.assert_allclose(rows[SB.VF_PREDS][:, env], values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_sequences_start_from_the_actors_memory_in_both_batch_modes(tmp_path, batch_mode):
    config = resolve(tmp_path, workers={"num_envs_per_worker": 2, "rollout_fragment_length": 8,
                                        "batch_mode": batch_mode})  # fmt: skip
    trainer_cls = registry.load_algorithm("ppo")
    evaluator = RolloutWorker(
        config,
        trainer_cls.policy_class("torch"),
        registry.load_env_adapter("gymnasium"),
        trainer_cls.postprocess,
    )
    try:
        batch, steps = evaluator.sample_with_count()
    finally:
        evaluator.stop()
    mask = batch[SB.SEQ_MASK].reshape(-1, 5)
    assert 0 < int(mask.sum()) <= steps and (np.diff(mask, axis=1) <= 0).all()  # LAST rows are not trained on
    starts = batch[SB.state_in(1)][::5]
    first = batch[SB.STEP_TYPES][::5] == StepType.FIRST
    assert not starts[first].any()  # an episode's first sequence starts from an empty memory
    assert starts[~first & (mask[:, 0] > 0)].any()  # a later one from the memory the actor had
    if batch_mode == "complete_episodes":
        assert (batch[SB.STEP_TYPES] == StepType.FIRST).sum() >= 1


# --- portable weights and checkpoints ------------------------------------------------------------------------
@pytest.mark.parametrize("source,target", [("torch", "tf"), ("tf", "torch")])
@pytest.mark.parametrize("continuous", [False, True])
def test_weights_act_identically_on_the_other_backend(tmp_path, source, target, continuous):
    """Same neutral names and shapes; greedy actions, values and states over a rollout with resets."""
    pytest.importorskip("tensorflow")
    a = make_policy(tmp_path, source, continuous, numpy_inference=False)
    b = make_policy(tmp_path, target, continuous, numpy_inference=False)
    assert a.fast_actor is None and b.fast_actor is None  # the frameworks' own models, not the twin
    assert {k: v.shape for k, v in a.get_weights().items()} == {
        k: v.shape for k, v in b.get_weights().items()
    }
    b.set_weights(a.get_weights())
    rng = np.random.default_rng(1)
    n = 3
    state_a = state_b = a.get_initial_state(n)
    for step in range(7):
        step_type = [
            StepType.FIRST if step == 0 or (step == 5 and i != 1) else StepType.MID for i in range(n)
        ]
        state_a = [
            np.where((np.array(step_type) == StepType.FIRST)[:, None], 0.0, s).astype(np.float32)
            for s in state_a
        ]
        state_b = [s.copy() for s in state_a]
        ts = timestep(rng.normal(size=(n, PENDULUM_OBS.size if continuous else 4)), step_type)
        actions_a, state_a, extras_a = a.compute_actions(ts, state_a, explore=False)
        actions_b, state_b, extras_b = b.compute_actions(ts, state_b, explore=False)
        np.testing.assert_allclose(actions_a, actions_b, atol=1e-5)
        np.testing.assert_allclose(extras_a[SB.VF_PREDS], extras_b[SB.VF_PREDS], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(extras_a[SB.ACTION_LOGP], extras_b[SB.ACTION_LOGP], atol=1e-5, rtol=1e-5)
        for x, y in zip(state_a, state_b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5)
    assert state_a[1][1].sum() == MEMORY  # env 1 never reset: a full, shifted memory was compared


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("continuous", [False, True])
def test_numpy_twin_acts_as_the_framework_over_a_rollout_with_resets(tmp_path, backend, continuous):
    """Same greedy actions, log-probabilities, values and memory, step by step, from both paths."""
    twin = make_policy(tmp_path, backend, continuous)
    framework = make_policy(tmp_path, backend, continuous, numpy_inference=False)
    assert twin.fast_actor is not None and framework.fast_actor is None
    rng = np.random.default_rng(0)
    n = 3
    state_a = state_b = twin.get_initial_state(n)
    for step in range(8):
        step_type = [
            StepType.FIRST if step == 0 or (step == 6 and i == 1) else StepType.MID for i in range(n)
        ]
        first = (np.array(step_type) == StepType.FIRST)[:, None]
        state_a = [np.where(first, 0.0, s).astype(np.float32) for s in state_a]  # the evaluator's reset
        state_b = [np.where(first, 0.0, s).astype(np.float32) for s in state_b]
        ts = timestep(rng.normal(size=(n, PENDULUM_OBS.size if continuous else 4)), step_type)
        a, state_a, extras_a = twin.compute_actions(ts, state_a, explore=False)
        b, state_b, extras_b = framework.compute_actions(ts, state_b, explore=False)
        np.testing.assert_allclose(a, b, atol=1e-5)
        for key in (SB.ACTION_LOGP, SB.VF_PREDS):
            np.testing.assert_allclose(extras_a[key], extras_b[key], atol=1e-5, rtol=1e-5)
        for x, y in zip(state_a, state_b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5)
    assert state_a[1][0].sum() == MEMORY and state_a[1][1].sum() == 2  # shifted full; refilling after FIRST


@pytest.mark.parametrize("backend", BACKENDS)
def test_image_observations_go_through_the_conv_trunk_in_the_twin_and_the_framework(tmp_path, backend):
    obs_space = Box(np.zeros((6, 6, 2)), np.ones((6, 6, 2)))
    values = []
    for fast in (True, False):
        config = resolve(
            tmp_path, model={"numpy_inference": fast, "conv_filters": [[4, 3, 1]]}, backend=backend
        )
        policy = registry.load_algorithm("ppo").policy_class(backend)(obs_space, Discrete(3), config)
        assert "shared/conv_0/kernel" in policy.get_weights() and (policy.fast_actor is not None) == fast
        policy.set_weights(random_weights(policy.get_weights(), seed=1, gain=1.5))
        rng = np.random.default_rng(0)
        state, rows = policy.get_initial_state(2), []
        for step in range(5):
            ts = timestep(rng.random((2, 6, 6, 2)), [StepType.FIRST if step == 0 else StepType.MID] * 2)
            _, state, extras = policy.compute_actions(ts, state, explore=False)
            rows.append(extras[SB.VF_PREDS])
        values.append(np.array(rows))
    np.testing.assert_allclose(values[0], values[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_state_round_trip_restores_weights_optimizer_and_actions(tmp_path, backend):
    a = make_policy(tmp_path, backend)
    b = make_policy(tmp_path, backend)
    b.set_weights(random_weights(b.get_weights(), seed=11))
    b.set_state(a.get_state())
    for name, value in a.get_weights().items():
        np.testing.assert_array_equal(b.get_weights()[name], value)
    ts = timestep(np.random.default_rng(3).normal(size=(2, 4)), [StepType.FIRST] * 2)
    np.testing.assert_array_equal(
        a.compute_actions(ts, explore=False)[0], b.compute_actions(ts, explore=False)[0]
    )


@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_a_checkpoint_evaluates_identically_on_the_other_backend(tmp_path, trained_with, evaluated_with):
    """``rlgear evaluate`` gives the same greedy episodes, and the loaded policies, carrying their memory
    between calls (emptied at each episode start), choose the same actions and hold the same memory."""
    pytest.importorskip("tensorflow")
    import gymnasium as gym

    from rlgear.run import agent

    train(tmp_path, backend=trained_with)
    (run_dir,) = (tmp_path / "runs").iterdir()
    original = agent.evaluate_checkpoint(run_dir, episodes=3)
    moved = agent.evaluate_checkpoint(run_dir, episodes=3, overrides=[f"backend={evaluated_with}"])
    assert [e["episode_return"] for e in original.episodes] == [e["episode_return"] for e in moved.episodes]
    policies = [agent.load(run_dir, [f"backend={b}"]) for b in (trained_with, evaluated_with)]
    env = gym.make("CartPole-v1")
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        start = True
        for _ in range(12):
            actions = [p.compute_single_action(obs, episode_start=start) for p in policies]
            assert actions[0] == actions[1]
            np.testing.assert_allclose(policies[0].state[0], policies[1].state[0], atol=1e-5)
            obs, _, terminated, truncated, _ = env.step(actions[0])
            start = False
            if terminated or truncated:
                break
        assert policies[0].state[1].any()


NEEDS_ONNX = pytest.mark.skipif(
    find_spec("onnxscript") is None or find_spec("onnxruntime") is None,
    reason="ONNX export needs the export extra: pip install 'rlgear[export]'",
)


@pytest.mark.parametrize("fmt", [pytest.param("onnx", marks=NEEDS_ONNX), "torchscript"])
def test_an_export_carries_the_memory_and_acts_as_the_policy_through_an_episode(tmp_path, fmt):
    """The memory and its mask are the graph's ``state_in.*``/``state_out.*``; fed back for more steps
    than the memory holds (the window slides) with an episode restarting mid-way in some rows, the
    graph's logits and values are the framework policy's."""
    from rlgear.export import check, export
    from rlgear.export.checking import player

    train(tmp_path)
    (run_dir,) = (tmp_path / "runs").iterdir()
    result = export(run_dir, fmt, tmp_path / f"policy.{fmt}")
    sidecar = result.sidecar
    assert sidecar["recurrent"] is True
    inputs = {spec["name"]: spec["shape"] for spec in sidecar["inputs"]}
    assert inputs == {"obs": [None, 4], "state_in.0": [None, WIDTH], "state_in.1": [None, MEMORY]}
    assert [s["name"] for s in sidecar["outputs"]][-2:] == ["state_out.0", "state_out.1"]
    report = check(result.path, n=1000)
    assert report.ok and report.actions_equal == report.observations == 1000, report.problems

    policy = rlgear.load(run_dir, overrides=["model.numpy_inference=false"]).policy
    play = player(result.path, sidecar)
    rng = np.random.default_rng(5)
    n = 6
    state = policy.get_initial_state(n)
    feeds_state = [np.zeros_like(s) for s in state]
    for step in range(3 * MEMORY):
        obs = rng.normal(size=(n, 4)).astype(np.float32)
        restart = np.zeros(n, bool) if step == 0 else (np.arange(n) == step % n)
        step_type = np.where(restart | (step == 0), StepType.FIRST, StepType.MID).astype(np.int32)
        feeds_state = [np.where(restart[:, None], 0.0, s).astype(np.float32) for s in feeds_state]
        state = [np.where(restart[:, None], 0.0, np.asarray(s)).astype(np.float32) for s in state]
        timestep = TimeStep(
            step_type=step_type, reward=np.zeros(n, np.float32), discount=np.ones(n, np.float32),
            observation=obs, prev_action=np.zeros(n, np.int64), env_id=np.arange(n, dtype=np.int32),
        )  # fmt: skip
        dist_inputs, values, state = policy.recurrent_step(timestep, state)
        outputs = play({"obs": obs, "state_in.0": feeds_state[0], "state_in.1": feeds_state[1]})
        np.testing.assert_allclose(outputs["logits"], np.asarray(dist_inputs), atol=1e-5, rtol=0)
        np.testing.assert_allclose(outputs["value"], np.asarray(values), atol=1e-5, rtol=0)
        np.testing.assert_allclose(outputs["state_out.1"], np.asarray(state[1]), atol=0)
        feeds_state = [outputs["state_out.0"], outputs["state_out.1"]]
    assert feeds_state[1].all(axis=1).sum() >= 1  # some rows ran a full memory


def test_the_plugins_matrix_says_which_algorithms_take_attention(monkeypatch, capsys):
    from rlgear import cli

    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    matrix = out[out.index("algorithm support") :]
    assert "recurrent: model.lstm and model.attention" in matrix
    for name in ("ppo", "pg", "a2c", "a3c", "impala", "appo"):
        row = next(line for line in matrix.splitlines() if line.split()[:1] == [name])
        assert row.split()[-2] == "yes", row  # the recurrent column, before the league one
    dqn = next(line for line in matrix.splitlines() if line.split()[:1] == ["dqn"])
    assert dqn.split()[-2] == "-"


# --- every recurrent algorithm, remote workers, multi-agent ---------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["ppo", "pg", "a2c", "a3c", "impala", "appo"])
def test_every_recurrent_algorithm_trains_end_to_end_with_attention(tmp_path, algorithm, backend):
    """Sampling with the memory, sequences (padded, or IMPALA/APPO's fragments) and a finite learner step."""
    result = train(tmp_path, algorithm, backend)
    assert result["training_iteration"] == 2 and result["timesteps_total"] > 0
    assert np.isfinite(result["learner/policy_loss"]) and result["learner/num_grad_updates"] >= 1


def test_remote_workers_keep_their_memory_across_weight_syncs(tmp_path, ray_session):
    config = small_config(
        tmp_path,
        model=ATTENTION,
        workers={"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 16},
        training={"train_batch_size": 64, "sgd_minibatch_size": 20, "num_sgd_iter": 2},
    )
    trainer = registry.load_algorithm("ppo")(config)
    try:
        result = trainer.train()
        assert result["timesteps_total"] > 0 and np.isfinite(result["learner/total_loss"])
        workers = trainer.workers
        (worker_id,) = workers.remote_worker_ids
        before = dict(workers.foreach_worker_with_id(lambda _, w: [s.copy() for s in w._state]))[worker_id]
        assert before[1].any()  # a remembered step on the worker
        workers.sync_weights()
        after = dict(workers.foreach_worker_with_id(lambda _, w: [s.copy() for s in w._state]))[worker_id]
        for a, b in zip(before, after, strict=True):
            np.testing.assert_array_equal(a, b)
        batch = dict(workers.foreach_worker_with_id(lambda _, w: w.sample()))[worker_id]
        firsts = batch[SB.STEP_TYPES] == 0
        assert firsts.any() and not batch[SB.state_in(1)][firsts].any()
    finally:
        trainer.stop()


def test_a_multi_agent_policy_keeps_a_memory_per_env_slot_and_agent():
    from tests.test_multi_agent import ma_config

    raw = ma_config(
        "make_late_join",
        model={k: v for k, v in ATTENTION.items() if k != "max_seq_len"} | {"max_seq_len": 4},
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": 6},
    )
    trainer = registry.load_algorithm("ppo")(raw)
    try:
        collector = trainer.workers.local_worker.collectors["default"]
        assert [s.shape for s in collector.state] == [(4, WIDTH), (4, MEMORY)]  # 2 agents x 2 env slots
        batch, _ = trainer.workers.local_worker.sample_with_count()
        rows = batch["default"]
        real = rows[SB.SEQ_MASK] > 0
        eps, mask = rows[SB.EPS_ID].reshape(-1, 4), real.reshape(-1, 4)
        for seq, seq_mask in zip(eps, mask, strict=True):  # a sequence holds one agent's episode
            assert len(set(seq[seq_mask].tolist())) == 1
        first_rows = (rows[SB.STEP_TYPES] == 0) & real
        np.testing.assert_array_equal(rows[SB.state_in(1)][first_rows], 0.0)
        result = trainer.train()
        assert np.isfinite(result["learner/total_loss"])
    finally:
        trainer.stop()
