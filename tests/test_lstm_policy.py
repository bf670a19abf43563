"""Recurrent (LSTM) policies: config errors, the acting contract, the evaluator's state, the numpy twin."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.spaces import Box, Discrete, MultiDiscrete, Tuple
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, PENDULUM_ACT, PENDULUM_OBS, random_weights

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

LSTM_MODEL = {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 5, "hidden_sizes": [16]}


def resolve(tmp_path, algorithm="ppo", model=None, backend="torch", env="CartPole-v1", **sections):
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 3,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 3, "rollout_fragment_length": 7},
        "model": {**LSTM_MODEL, **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        **sections,
    }
    return config_mod.resolve(raw)  # finds the algorithm, and runs its checks of the other sections


def make_policy(tmp_path, backend="torch", continuous=False, **model):
    from rlgear.discovery import registry

    config = resolve(
        tmp_path, model=model, backend=backend, env="Pendulum-v1" if continuous else "CartPole-v1"
    )
    obs, act = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    policy = registry.load_algorithm("ppo").policy_class(backend)(obs, act, config)
    policy.set_weights(random_weights(policy.get_weights(), seed=5, gain=1.5))
    return policy


def timestep(obs, step_type, prev_action, reward) -> TimeStep:
    n = obs.shape[0]
    return TimeStep(
        step_type=np.asarray(step_type, np.int32),
        reward=np.asarray(reward, np.float32),
        discount=np.ones(n, np.float32),
        observation=np.asarray(obs, np.float32),
        prev_action=np.asarray(prev_action),
        env_id=np.arange(n, dtype=np.int32),
    )


# --- config -----------------------------------------------------------------------------------------
def test_dqn_refuses_an_lstm_with_the_key_named(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.lstm: algorithm 'dqn' does not support recurrent"):
        resolve(tmp_path, algorithm="dqn")


def test_a_custom_model_with_the_catalog_lstm_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.lstm: a custom model"):
        resolve(tmp_path, model={"custom": "tests.custom_models:TinyModel"})


@pytest.mark.parametrize("key", ["lstm_cell_size", "max_seq_len"])
def test_lstm_sizes_must_be_positive(tmp_path, key):
    with pytest.raises(ConfigError, match=rf"model\.{key}: expected a positive number"):
        resolve(tmp_path, model={key: 0})


# --- the acting contract --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_initial_state_is_zeros_h_and_c_per_slot_and_empty_for_feed_forward(tmp_path, backend):
    state = make_policy(tmp_path, backend).get_initial_state(4)
    assert [s.shape for s in state] == [(4, 8), (4, 8)]
    assert all(s.dtype == np.float32 and not s.any() for s in state)
    from rlgear.discovery import registry

    config = resolve(tmp_path, model={"lstm": False}, backend=backend)
    mlp = registry.load_algorithm("ppo").policy_class(backend)(CARTPOLE_OBS, CARTPOLE_ACT, config)
    assert mlp.get_initial_state(4) == [] and not mlp.recurrent


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("prev", [False, True])
def test_numpy_twin_acts_as_the_framework_over_a_rollout_with_resets(tmp_path, backend, continuous, prev):
    """Same greedy actions, log-probabilities, values and states, step by step, from both paths."""
    twin = make_policy(tmp_path, backend, continuous, lstm_use_prev_action=prev, lstm_use_prev_reward=prev)
    framework = make_policy(
        tmp_path, backend, continuous, lstm_use_prev_action=prev, lstm_use_prev_reward=prev,
        numpy_inference=False,
    )  # fmt: skip
    assert twin.fast_actor is not None and framework.fast_actor is None
    rng = np.random.default_rng(0)
    n = 3
    state_a = state_b = twin.get_initial_state(n)
    prev_action = np.zeros((n, 1), np.float32) if continuous else np.zeros(n, np.int64)
    for step in range(6):
        step_type = [
            StepType.FIRST if step == 0 or (step == 3 and i == 1) else StepType.MID for i in range(n)
        ]
        obs = rng.normal(size=(n, PENDULUM_OBS.size if continuous else 4))
        ts = timestep(obs, step_type, prev_action, rng.normal(size=n))
        a, state_a, extras_a = twin.compute_actions(ts, state_a, explore=False)
        b, state_b, extras_b = framework.compute_actions(ts, state_b, explore=False)
        np.testing.assert_allclose(a, b, atol=1e-5)
        for key in (SB.ACTION_LOGP, SB.VF_PREDS):
            np.testing.assert_allclose(extras_a[key], extras_b[key], atol=1e-5, rtol=1e-5)
        for x, y in zip(state_a, state_b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5)
        assert np.abs(state_a[0]).max() > 1e-2  # the state moves: the comparison means something
        prev_action = a


def test_the_fused_torch_lstm_equals_the_written_out_cell():
    torch = pytest.importorskip("torch")
    from rlgear.plugins.backends.torch.recurrent import LSTMLayer

    torch.manual_seed(0)
    layer = LSTMLayer(5, 6)
    with torch.no_grad():
        layer.bias.normal_()
    x, h, c = torch.randn(4, 7, 5), torch.randn(4, 6), torch.randn(4, 6)
    fused, (h1, c1) = layer(x, (h, c))
    looped, (h2, c2) = layer(x, (h, c), torch.zeros(4, 7, dtype=torch.bool))
    for a, b in ((fused, looped), (h1, h2), (c1, c2)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_fused_tf_lstm_equals_the_written_out_cell_in_outputs_and_gradients():
    """TF learns through ``BlockLSTM`` (gates permuted to its i, c, f, o order, no forget bias, no cell
    clipping); the written-out loop (the path with resets, all False here) is the cell as documented.
    A cell state of about 10 would be clipped at BlockLSTM's default ``cell_clip`` of 3."""
    tf = pytest.importorskip("tensorflow")
    from rlgear.plugins.backends.tf.recurrent import LSTMLayer

    rng = np.random.default_rng(0)
    layer = LSTMLayer(5, 6, rng)
    layer.bias.assign(rng.normal(size=24).astype(np.float32))
    x = tf.constant(rng.normal(size=(4, 7, 5)).astype(np.float32))
    h, c = (tf.constant(rng.normal(size=(4, 6)).astype(np.float32) * s) for s in (1.0, 10.0))
    weights = rng.normal(size=(4, 7, 6)).astype(np.float32)  # a loss that weighs every output differently

    def outputs_and_gradients(resets):
        with tf.GradientTape() as tape:
            tape.watch([x, h, c])
            outputs, (h1, c1) = layer(x, (h, c), resets)
            loss = tf.reduce_sum(outputs * weights) + tf.reduce_sum(h1) + 0.5 * tf.reduce_sum(c1)
        grads = tape.gradient(loss, [layer.kernel, layer.recurrent_kernel, layer.bias, x, h, c])
        return [t.numpy() for t in (outputs, h1, c1, *grads)]

    fused = outputs_and_gradients(None)
    looped = outputs_and_gradients(tf.zeros((4, 7), tf.bool))
    assert np.abs(fused[2]).max() > 3.0  # the final cell state is beyond the default clip
    for a, b in zip(fused, looped, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


# --- the evaluator carries the state ------------------------------------------------------------------------
def test_evaluator_stores_each_rows_state_in_resets_it_at_first_and_keeps_it_across_fragments(tmp_path):
    from rlgear.discovery import registry

    config = resolve(tmp_path, model={"numpy_inference": False})
    trainer_cls = registry.load_algorithm("ppo")
    evaluator = RolloutWorker(
        config, trainer_cls.policy_class("torch"), registry.load_env_adapter("gymnasium")
    )
    policy = evaluator.policy
    policy.set_weights(random_weights(policy.get_weights(), seed=2, gain=1.5))
    try:
        fragments = [evaluator._sample_fragment() for _ in range(6)]  # 42 steps: CartPole episodes end
    finally:
        evaluator.stop()
    firsts = 0
    for k, fragment in enumerate(fragments):
        steps = fragment[SB.STEP_TYPES]
        h, c = fragment[SB.state_in(0)], fragment[SB.state_in(1)]
        if k:  # the bootstrap row is acted on again as the next fragment's first row, from the same state
            np.testing.assert_array_equal(fragments[k - 1][SB.state_in(0)][-1], h[0])
        for t in range(steps.shape[0]):
            first = steps[t] == StepType.FIRST
            firsts += int(first.sum())
            assert not h[t][first].any() and not c[t][first].any()
            if t + 1 < steps.shape[0]:  # the next row's state-in is this row's state-out
                ts = timestep(
                    fragment[SB.OBS][t], steps[t], fragment[SB.PREV_ACTIONS][t], fragment[SB.REWARDS][t]
                )
                _, _, out = policy.recurrent_step(ts, [h[t], c[t]])
                moved = steps[t + 1] != StepType.FIRST
                np.testing.assert_allclose(h[t + 1][moved], out[0].detach().numpy()[moved], atol=1e-6)
                np.testing.assert_allclose(c[t + 1][moved], out[1].detach().numpy()[moved], atol=1e-6)
    assert firsts > 3  # episodes ended and started inside the fragments


def test_sample_cuts_rows_into_masked_sequences_of_max_seq_len(tmp_path):
    from rlgear.discovery import registry

    config = resolve(tmp_path)
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
    assert int(mask.sum()) == steps == 21  # every env step once, padding added
    assert (np.diff(mask, axis=1) <= 0).all()  # real rows first in each sequence
    eps = batch[SB.EPS_ID].reshape(-1, 5)
    assert all(len(set(e[m > 0])) == 1 for e, m in zip(eps, mask, strict=True))


# --- portable weights ------------------------------------------------------------------------------------
@pytest.mark.parametrize("source,target", [("torch", "tf"), ("tf", "torch")])
@pytest.mark.parametrize("continuous", [False, True])
def test_lstm_weights_act_identically_on_the_other_backend(tmp_path, source, target, continuous):
    """Greedy actions, distribution inputs and states over a rollout with resets, framework paths on both."""
    pytest.importorskip("tensorflow")
    model = {"numpy_inference": False, "lstm_use_prev_action": True, "lstm_use_prev_reward": True}
    a = make_policy(tmp_path, source, continuous, **model)
    b = make_policy(tmp_path, target, continuous, **model)
    b.set_weights(a.get_weights())
    assert {k: v.shape for k, v in a.get_weights().items()} == {
        k: v.shape for k, v in b.get_weights().items()
    }
    rng = np.random.default_rng(1)
    n = 3
    state_a = state_b = a.get_initial_state(n)
    prev_action = np.zeros((n, 1), np.float32) if continuous else np.zeros(n, np.int64)
    for step in range(8):
        step_type = [
            StepType.FIRST if step == 0 or (step == 4 and i != 1) else StepType.MID for i in range(n)
        ]
        for i, kind in enumerate(step_type):
            if kind == StepType.FIRST:
                state_a = [s.copy() for s in state_a]
                for s in state_a:
                    s[i] = 0.0
        state_b = [s.copy() for s in state_a]
        ts = timestep(rng.normal(size=(n, PENDULUM_OBS.size if continuous else 4)), step_type, prev_action,
                      rng.normal(size=n))  # fmt: skip
        inputs_a, _, _ = a.recurrent_step(ts, state_a)
        inputs_b, _, _ = b.recurrent_step(ts, state_b)
        np.testing.assert_allclose(np.asarray(inputs_a), np.asarray(inputs_b), atol=1e-5)
        actions_a, state_a, extras_a = a.compute_actions(ts, state_a, explore=False)
        actions_b, state_b, extras_b = b.compute_actions(ts, state_b, explore=False)
        np.testing.assert_allclose(actions_a, actions_b, atol=1e-5)
        np.testing.assert_allclose(extras_a[SB.VF_PREDS], extras_b[SB.VF_PREDS], atol=1e-5)
        for x, y in zip(state_a, state_b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5)
        prev_action = actions_a


@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_an_lstm_checkpoint_evaluates_identically_on_the_other_backend(
    tmp_path, trained_with, evaluated_with
):
    """``rlgear evaluate`` returns the same greedy episodes, and the loaded policies (carrying their state
    between calls, reset at each episode start) choose the same actions over a rollout."""
    pytest.importorskip("tensorflow")
    import gymnasium as gym

    import rlgear
    from rlgear.run import agent

    rlgear.train(
        {
            "algorithm": "ppo",
            "backend": trained_with,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "workers": {"num_envs_per_worker": 2},
            "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
            "model": {**LSTM_MODEL, "lstm_use_prev_action": True, "lstm_use_prev_reward": True},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        }
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    original = agent.evaluate_checkpoint(run_dir, episodes=3)
    moved = agent.evaluate_checkpoint(run_dir, episodes=3, overrides=[f"backend={evaluated_with}"])
    assert [e["episode_return"] for e in original.episodes] == [e["episode_return"] for e in moved.episodes]

    policies = [agent.load(run_dir, [f"model.numpy_inference={fast}", f"backend={b}"])
                for b in (trained_with, evaluated_with) for fast in ("false", "true")]  # fmt: skip
    env = gym.make("CartPole-v1")
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        reward, start, states = 0.0, True, []
        for _ in range(30):
            actions = [
                p.compute_single_action(obs, episode_start=start, prev_reward=reward) for p in policies
            ]
            assert len(set(actions)) == 1, actions
            states.append([p.state[0].copy() for p in policies])
            obs, reward, terminated, truncated, _ = env.step(actions[0])
            start = False
            if terminated or truncated:
                break
        for step_states in states:
            for state in step_states[1:]:
                np.testing.assert_allclose(state, step_states[0], atol=1e-5)
        assert np.abs(states[-1][0]).max() > 1e-3


def test_loaded_policy_resets_its_state_at_an_episode_start(tmp_path):
    from rlgear.run.agent import LoadedPolicy

    policy = make_policy(tmp_path)
    loaded = LoadedPolicy(policy, policy.config)
    obs = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    first = loaded.compute_single_action(obs, episode_start=True)
    after_first = loaded.state[0].copy()
    loaded.compute_single_action(obs)
    assert not np.allclose(loaded.state[0], after_first)  # carried and moved on
    assert loaded.compute_single_action(obs, episode_start=True) == first
    np.testing.assert_array_equal(loaded.state[0], after_first)  # from zeros again


def test_the_evaluators_state_survives_a_weight_sync(tmp_path):
    from rlgear.discovery import registry

    config = resolve(tmp_path)
    trainer_cls = registry.load_algorithm("ppo")
    evaluator = RolloutWorker(
        config, trainer_cls.policy_class("torch"), registry.load_env_adapter("gymnasium")
    )
    try:
        evaluator._sample_fragment()
        before = [s.copy() for s in evaluator._state]
        assert np.abs(before[0]).max() > 0
        evaluator.set_weights(random_weights(evaluator.get_weights(), seed=9))
        for a, b in zip(before, evaluator._state, strict=True):
            np.testing.assert_array_equal(a, b)
    finally:
        evaluator.stop()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["ppo", "pg", "a2c", "a3c", "impala"])
def test_every_recurrent_algorithm_trains_end_to_end_with_an_lstm(tmp_path, algorithm, backend):
    """Sampling with state, sequences (padded, or IMPALA's fragments) and a finite learner step."""
    import rlgear

    result = rlgear.train(
        {
            "algorithm": algorithm,
            "backend": backend,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "workers": {"num_envs_per_worker": 2},
            "training": {"train_batch_size": 64},
            "model": {**LSTM_MODEL, "lstm_use_prev_action": True, "lstm_use_prev_reward": True},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == 2 and result["timesteps_total"] > 0
    assert np.isfinite(result["learner/policy_loss"]) and result["learner/num_grad_updates"] >= 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "action_space",
    [MultiDiscrete([3, 3]), Tuple([Discrete(3), Box(np.array([-1.0]), np.array([1.0]))])],
    ids=["multi_discrete", "tuple"],
)
def test_an_lstm_refuses_composite_actions_naming_the_key(tmp_path, backend, action_space):
    """The LSTM models have one Categorical or Gaussian head: a MultiDiscrete policy used to be built
    as a Gaussian (half-width logits, the rest a fixed log std) and trained silently."""
    from rlgear.discovery import registry

    config = resolve(tmp_path, backend=backend)
    policy_class = registry.load_algorithm("ppo").policy_class(backend)
    with pytest.raises(
        ConfigError, match=r"model.lstm: recurrent policies act in Discrete or Box action spaces"
    ):
        policy_class(CARTPOLE_OBS, action_space, config)
