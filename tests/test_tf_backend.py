"""Tests of the TF backend on its own: weight names, state, the compiled learn step, acting, errors.

Agreement with the torch backend (losses, gradients, forward passes,
checkpoints) is in ``test_tf_parity.py``; import isolation and start-up noise
in ``test_tf_isolation.py``; learning CartPole in ``test_tf_learning.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import PluginError, UnsupportedError
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep
from rlgear.trainer import Trainer
from tests.conftest import HAS_TF, needs_tf

if HAS_TF:  # found by name, so a broken TensorFlow install fails; tests that need it are marked needs_tf
    from rlgear.plugins.backends.tf import Categorical, DiagGaussian, TFBackend, tf
    from rlgear.plugins.backends.tf.policy import EAGER_ENV, Compiled

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

CARTPOLE_OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))
PENDULUM_OBS = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
PENDULUM_ACT = Box(np.array([-2.0]), np.array([2.0]))
CARTPOLE_ACT = Discrete(2)


def resolve(tmp_path, algorithm="ppo", training=None, model=None, env="CartPole-v1", seed=0):
    raw = {
        "algorithm": algorithm,
        "backend": "tf",
        "seed": seed,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2},
        "training": {"train_batch_size": 64, **(training or {})},
        "model": {"hidden_sizes": [16, 8], **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    return config_mod.resolve(raw, training_class=registry.load_algorithm(algorithm).config_class)


def make_policy(config, obs_space=CARTPOLE_OBS, act_space=CARTPOLE_ACT, backend="tf"):
    return registry.load_algorithm(config.algorithm).policy_class(backend)(obs_space, act_space, config)


def timestep_of(observations):
    n = len(observations)
    return TimeStep(
        step_type=np.full(n, StepType.MID, dtype=np.int32),
        reward=np.zeros(n, dtype=np.float32),
        discount=np.ones(n, dtype=np.float32),
        observation=observations,
        prev_action=np.zeros(n, dtype=np.int64),
        env_id=np.arange(n, dtype=np.int32),
    )


def ppo_batch(policy, n=64, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, policy.observation_space.size)).astype(np.float32)
    actions, _, extras = policy.compute_actions(timestep_of(obs))
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            SB.ACTION_LOGP: extras[SB.ACTION_LOGP],
            SB.VF_PREDS: extras[SB.VF_PREDS],
            SB.ADVANTAGES: rng.normal(size=n).astype(np.float32),
            SB.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )


# ----------------------------------------------------------------------------- weights


@pytest.mark.parametrize(
    ("algorithm", "obs_space", "act_space", "model", "training"),
    [
        ("ppo", CARTPOLE_OBS, CARTPOLE_ACT, {}, {}),
        ("ppo", PENDULUM_OBS, PENDULUM_ACT, {}, {}),
        ("ppo", CARTPOLE_OBS, CARTPOLE_ACT, {"vf_share_layers": True}, {}),
        ("dqn", CARTPOLE_OBS, CARTPOLE_ACT, {}, {"dueling": True}),
        ("dqn", CARTPOLE_OBS, CARTPOLE_ACT, {}, {"dueling": False}),
    ],
)
@needs_tf
def test_weight_names_shapes_and_order_are_the_torch_backends(
    tmp_path, algorithm, obs_space, act_space, model, training
):
    config = resolve(tmp_path, algorithm, training, model)
    tf_weights = make_policy(config, obs_space, act_space).get_weights()
    torch_weights = make_policy(config, obs_space, act_space, backend="torch").get_weights()
    assert list(tf_weights) == list(torch_weights)  # same order too: optimizer state lines up
    for name, value in torch_weights.items():
        assert tf_weights[name].shape == value.shape and tf_weights[name].dtype == np.float32, name


@needs_tf
def test_orthogonal_init_gives_orthogonal_kernels_and_zero_biases(tmp_path):
    weights = make_policy(resolve(tmp_path, model={"hidden_sizes": [16, 16]})).get_weights()
    kernel = weights["policy/hidden_1/kernel"]
    np.testing.assert_allclose(kernel.T @ kernel, 2.0 * np.eye(16), atol=1e-5)  # gain sqrt(2)
    assert np.all(weights["policy/hidden_0/bias"] == 0)
    assert np.abs(weights["policy/output/kernel"]).max() < 0.02  # gain 0.01 head


@needs_tf
def test_set_weights_rejects_a_missing_or_misshapen_weight_and_changes_nothing(tmp_path):
    policy = make_policy(resolve(tmp_path))
    before = policy.get_weights()
    missing = dict(before)
    del missing["value/output/bias"]
    with pytest.raises(ValueError, match="value/output/bias"):
        policy.set_weights(missing)
    wrong = {k: v + 1 for k, v in before.items()}
    wrong["policy/hidden_1/kernel"] = np.zeros((8, 16), np.float32)
    with pytest.raises(ValueError, match=r"policy/hidden_1/kernel' has shape \(8, 16\).*\(16, 8\)"):
        policy.set_weights(wrong)
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


@needs_tf
def test_get_weights_returns_copies(tmp_path):
    policy = make_policy(resolve(tmp_path))
    weights = policy.get_weights()
    weights["policy/output/bias"][:] = 7.0
    assert not np.any(policy.get_weights()["policy/output/bias"] == 7.0)


# ----------------------------------------------------------------------------- state


@needs_tf
def test_state_round_trip_continues_training_identically(tmp_path):
    config = resolve(tmp_path, training={"sgd_minibatch_size": 16, "num_sgd_iter": 2})
    policy = make_policy(config)
    policy.learn_on_batch(ppo_batch(policy, seed=1))
    state = policy.get_state()
    json.dumps(state.meta)  # checkpoints store meta as JSON
    assert any(k.startswith("optimizer/exp_avg/") for k in state.arrays)

    batch = ppo_batch(policy, seed=2)
    expected = policy.learn_on_batch(batch)
    expected_weights = policy.get_weights()

    fresh = make_policy(resolve(tmp_path, training={"sgd_minibatch_size": 16, "num_sgd_iter": 2}, seed=5))
    fresh.set_state(PolicyState(dict(state.arrays), dict(state.meta)))
    assert fresh.optimizer.steps == state.meta["optimizer"]["steps"] > 0
    got = fresh.learn_on_batch(batch)
    assert got == expected  # same minibatch order (rng state) and same optimizer moments
    for name, value in fresh.get_weights().items():
        np.testing.assert_array_equal(value, expected_weights[name], err_msg=name)


@needs_tf
def test_set_state_with_another_optimizers_state_is_refused_before_any_change(tmp_path):
    adam = make_policy(resolve(tmp_path))
    sgd = make_policy(resolve(tmp_path, training={"optimizer": "sgd"}, seed=9))
    before = sgd.get_weights()
    with pytest.raises(ValueError, match="optimizer state of a Adam, this is a SGD"):
        sgd.set_state(adam.get_state())
    np.testing.assert_array_equal(sgd.get_weights()["policy/output/kernel"], before["policy/output/kernel"])


@needs_tf
def test_backend_rng_state_round_trips_the_global_generator():
    backend = TFBackend()
    backend.setup(1, seed=11)
    state = backend.get_rng_state()
    first = tf.random.get_global_generator().normal([3]).numpy()
    backend.set_rng_state(state)
    np.testing.assert_array_equal(tf.random.get_global_generator().normal([3]).numpy(), first)


# ----------------------------------------------------------------------------- the compiled learn step


@needs_tf
def test_eager_and_compiled_learn_steps_give_the_same_stats(tmp_path, monkeypatch):
    training = {"sgd_minibatch_size": 24, "num_sgd_iter": 2}
    compiled = make_policy(resolve(tmp_path, training=training))
    eager = make_policy(resolve(tmp_path, training={**training, "eager": True}))
    assert eager.eager and not compiled.eager
    assert not isinstance(
        eager._sgd_step_for(eager.to_tensors(ppo_batch(eager), eager.loss_columns)), Compiled
    )
    batch = ppo_batch(compiled)
    compiled_stats, eager_stats = compiled.learn_on_batch(batch), eager.learn_on_batch(batch)
    assert set(compiled_stats) == set(eager_stats)
    for key, value in compiled_stats.items():
        np.testing.assert_allclose(eager_stats[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    # The environment variable switches it on as well.
    monkeypatch.setenv(EAGER_ENV, "1")
    assert make_policy(resolve(tmp_path, training=training)).eager


@needs_tf
def test_compiled_functions_trace_without_autograph_unless_asked(monkeypatch):
    """rlgear's TF code needs no AutoGraph (docs/backends.md); a function branching in Python on a
    tensor's value gets TF's error naming the ways out, and RLGEAR_TF_AUTOGRAPH=1 converts it."""
    from rlgear.plugins.backends.tf.compiled import AUTOGRAPH_ENV

    def branches_on_a_value(x):
        if tf.reduce_sum(x) > 0:
            return x * 2.0
        return -x

    signature = [tf.TensorSpec([None], tf.float32)]
    monkeypatch.delenv(AUTOGRAPH_ENV, raising=False)
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="RLGEAR_TF_AUTOGRAPH=1"):
        Compiled(branches_on_a_value, signature)(tf.constant([1.0, 2.0]))
    decorated = Compiled(lambda x: tf.function(branches_on_a_value)(x), signature)  # the documented way out
    np.testing.assert_array_equal(decorated(tf.constant([-1.0, -2.0])).numpy(), [1.0, 2.0])
    monkeypatch.setenv(AUTOGRAPH_ENV, "1")
    converted = Compiled(branches_on_a_value, signature)
    np.testing.assert_array_equal(converted(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(converted(tf.constant([-1.0, -2.0])).numpy(), [1.0, 2.0])


@needs_tf
def test_learn_step_is_traced_once_across_batch_sizes_and_partial_minibatches(tmp_path):
    policy = make_policy(resolve(tmp_path, training={"sgd_minibatch_size": 24, "num_sgd_iter": 2}))
    for n in (64, 50, 7):  # minibatches of 24, 16, 2, 7 rows
        policy.learn_on_batch(ppo_batch(policy, n=n))
    (step,) = policy._sgd_steps.values()
    assert step.function.experimental_get_tracing_count() == 1


def a3c_batch(policy, n=64, seed=0):
    batch = ppo_batch(policy, n, seed)
    return SB({k: batch[k] for k in (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)})


@needs_tf
def test_compute_and_apply_gradients_are_traced_once_and_agree_with_eager(tmp_path):
    compiled = make_policy(resolve(tmp_path, "a3c", {"lr_schedule": [[0, 1e-3], [1000, 0.0]]}))
    eager = make_policy(resolve(tmp_path, "a3c", {"eager": True}))
    for n in (64, 50, 7):
        batch = a3c_batch(compiled, n=n, seed=n)
        eager.set_weights(compiled.get_weights())
        grads, stats = compiled.compute_gradients(batch)
        eager_grads, eager_stats = eager.compute_gradients(batch)
        assert set(stats) == set(eager_stats) >= {"total_loss", "grad_gnorm", "policy_loss"}
        for key, value in stats.items():
            np.testing.assert_allclose(eager_stats[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
        for name, value in grads.items():
            np.testing.assert_allclose(eager_grads[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        compiled.apply_gradients(grads)
    (gradients,) = compiled._gradient_fns.values()
    assert gradients.function.experimental_get_tracing_count() == 1
    assert compiled._apply_clipped.function.experimental_get_tracing_count() == 1
    assert compiled.num_grad_updates == 3 and compiled.optimizer.steps == 3
    # apply_gradients follows the lr schedule (a variable: no retrace)
    compiled.set_global_timestep(500)
    compiled.apply_gradients(grads)
    assert compiled.optimizer.lr == pytest.approx(5e-4)
    assert compiled._apply_clipped.function.experimental_get_tracing_count() == 1


def impala_sequences(n, steps=9, seed=0):
    rng = np.random.default_rng(seed)
    step_types = np.full((n, steps), StepType.MID, dtype=np.int32)
    step_types[:, 0] = StepType.FIRST
    step_types[0, 4], step_types[0, 5] = StepType.LAST, StepType.FIRST
    return SB(
        {
            SB.OBS: rng.normal(size=(n, steps, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=(n, steps)).astype(np.int64),
            SB.REWARDS: rng.normal(size=(n, steps)).astype(np.float32),
            SB.DISCOUNTS: np.ones((n, steps), np.float32),
            SB.STEP_TYPES: step_types,
            SB.ACTION_LOGP: np.full((n, steps), np.log(0.5), np.float32),
        }
    )


@needs_tf
def test_impala_learn_step_is_traced_once_across_numbers_of_sequences(tmp_path):
    policy = make_policy(resolve(tmp_path, "impala", {"num_sgd_iter": 2}))
    for n in (6, 3, 1):
        stats = policy.learn_on_batch(impala_sequences(n, seed=n))
        assert np.isfinite(stats["total_loss"]) and stats["grad_gnorm"] > 0
    (step,) = policy._sgd_steps.values()
    assert step.function.experimental_get_tracing_count() == 1
    assert policy.num_grad_updates == 6


@needs_tf
def test_clip_schedule_and_lr_schedule_take_effect_without_retracing(tmp_path):
    policy = make_policy(
        resolve(
            tmp_path,
            training={
                "lr_schedule": [[0, 1e-3], [1000, 0.0]],
                "clip_param_schedule": [[0, 0.3], [1000, 0.1]],
            },
        )
    )
    stats_start = policy.learn_on_batch(ppo_batch(policy))
    policy.set_global_timestep(500)
    stats_mid = policy.learn_on_batch(ppo_batch(policy))
    assert stats_start["cur_lr"] == pytest.approx(1e-3) and stats_mid["cur_lr"] == pytest.approx(5e-4)
    assert policy._clip.numpy() == pytest.approx(0.2)
    assert policy.optimizer.lr == pytest.approx(5e-4)
    (step,) = policy._sgd_steps.values()
    assert step.function.experimental_get_tracing_count() == 1


@needs_tf
def test_update_config_retraces_with_the_new_coefficients(tmp_path):
    one_step = {"num_sgd_iter": 1, "sgd_minibatch_size": 64}
    policy = make_policy(resolve(tmp_path, training={"vf_loss_coeff": 0.5, **one_step}))
    batch = ppo_batch(policy)
    state = policy.get_state()
    before = policy.learn_on_batch(batch)
    policy.set_state(state)
    policy.update_config(resolve(tmp_path, training={"vf_loss_coeff": 2.0, **one_step}))
    after = policy.learn_on_batch(batch)
    expected = before["policy_loss"] + 2.0 * before["vf_loss"] - 0.0 * before["entropy"]
    assert after["total_loss"] == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- acting


@needs_tf
def test_tf_acting_path_samples_from_the_policy_and_is_seeded(tmp_path):
    config = resolve(tmp_path, model={"numpy_inference": False})
    policy = make_policy(config)
    assert policy.fast_actor is None
    logits = np.array([[2.0, 0.0]], np.float32)
    weights = policy.get_weights()
    weights = {k: np.zeros_like(v) for k, v in weights.items()}
    weights["policy/output/bias"] = logits[0]
    policy.set_weights(weights)
    obs = np.zeros((4000, 4), np.float32)
    actions, _, extras = policy.compute_actions(timestep_of(obs))
    p0 = np.exp(2.0) / (np.exp(2.0) + 1.0)
    assert actions.dtype == np.int64 and abs(np.mean(actions == 0) - p0) < 0.03
    np.testing.assert_allclose(
        extras[SB.ACTION_LOGP], np.where(actions == 0, np.log(p0), np.log(1 - p0)), rtol=1e-5
    )
    greedy, _, _ = policy.compute_actions(timestep_of(obs[:5]), explore=False)
    assert np.all(greedy == 0)
    again = make_policy(config)
    again.set_weights(weights)
    np.testing.assert_array_equal(again.compute_actions(timestep_of(obs))[0], actions)


@needs_tf
def test_acting_skips_argument_binding_and_gives_what_the_public_call_gives(tmp_path):
    policy = make_policy(resolve(tmp_path, model={"numpy_inference": False}))
    act = policy._act
    rng = np.random.default_rng(0)
    obs_and_noise = tf.constant(
        np.concatenate([rng.normal(size=(8, 4)), np.full((8, 2), 0.3)], axis=1).astype(np.float32)
    )
    policy.compute_actions(timestep_of(np.zeros((8, 4), np.float32)))
    assert act._call_flat is not None  # the pinned TF has ConcreteFunction._call_flat
    calls = []
    flat = act._call_flat
    act._call_flat = lambda *a: calls.append(1) or flat(*a)
    fast = act(obs_and_noise)
    public = act._concrete(obs_and_noise)
    assert calls == [1]
    np.testing.assert_array_equal(fast.numpy(), public.numpy())
    assert fast.shape == (8, 3)  # action, logp, value
    # the fast path reads the live variables: weights set later are used
    policy.set_weights({k: np.zeros_like(v) for k, v in policy.get_weights().items()})
    np.testing.assert_allclose(act(obs_and_noise).numpy()[:, 1], np.log(0.5), rtol=1e-6)
    # an input that does not fit the signature takes the public call, which raises TF's own error
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        act(tf.constant(np.zeros((8, 6), np.float64)))
    assert len(calls) == 2


@needs_tf
def test_tf_acting_path_with_box_actions_matches_the_numpy_twin_greedily(tmp_path):
    tf_path = make_policy(
        resolve(tmp_path, env="Pendulum-v1", model={"numpy_inference": False}), PENDULUM_OBS, PENDULUM_ACT
    )
    twin = make_policy(resolve(tmp_path, env="Pendulum-v1"), PENDULUM_OBS, PENDULUM_ACT)
    twin.set_weights(tf_path.get_weights())
    obs = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    a, _, ea = tf_path.compute_actions(timestep_of(obs), explore=False)
    b, _, eb = twin.compute_actions(timestep_of(obs), explore=False)
    assert a.shape == (8, 1) and a.dtype == np.float32
    np.testing.assert_allclose(a, b, atol=1e-5)
    for key in (SB.ACTION_LOGP, SB.VF_PREDS):
        np.testing.assert_allclose(ea[key], eb[key], atol=1e-5, err_msg=key)


@needs_tf
def test_distributions_sample_with_the_requested_statistics():
    rng = np.random.default_rng(0)
    n = 20000
    logits = tf.math.log(tf.constant([[0.2, 0.5, 0.3]] * n))
    noise = Categorical.draw_noise(rng, n, Discrete(3))
    counts = np.bincount(Categorical(logits).sample(noise).numpy(), minlength=3) / n
    np.testing.assert_allclose(counts, [0.2, 0.5, 0.3], atol=0.02)
    inputs = tf.constant([[1.0, -2.0, np.log(0.5), np.log(2.0)]] * n)
    noise = DiagGaussian.draw_noise(rng, n, Box(-np.ones(2), np.ones(2)))
    samples = DiagGaussian(inputs).sample(noise).numpy()
    np.testing.assert_allclose(samples.mean(axis=0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(samples.std(axis=0), [0.5, 2.0], rtol=0.05)


# ----------------------------------------------------------------------------- unsupported backends


class TorchOnly(Trainer):
    name = "torch_only"
    policies = {"torch": "rlgear.plugins.algorithms.ppo.torch_policy:PPOTorchPolicy"}


def test_an_algorithm_without_a_tf_policy_says_so_before_any_work(tmp_path):
    with pytest.raises(
        UnsupportedError, match=r"algorithm 'torch_only' does not support backend 'tf' \(supported: torch\)"
    ):
        TorchOnly.policy_class("tf")
    raw = {
        "algorithm": "ppo",  # for its config class; the trainer class decides the support
        "backend": "tf",
        "env": {"name": "CartPole-v1"},
        "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
    }
    with pytest.raises(UnsupportedError, match="does not support backend 'tf'"):
        TorchOnly(raw)


BUILTIN_ALGORITHMS = [
    "a2c",
    "a3c",
    "apex",
    "apex_ddpg",
    "apex_td3",
    "appo",
    "ars",
    "bc",
    "cql",
    "crossq",
    "ddpg",
    "discrete_cql",
    "dqn",
    "es",
    "impala",
    "iql",
    "iqn",
    "maddpg",
    "mappo",
    "marwil",
    "masac",
    "matd3",
    "pg",
    "ppo",
    "pqn",
    "qmix",
    "qrdqn",
    "sac",
    "td3",
    "tqc",
    "trpo",
    "vdn",
]
#: Torch only (none today: every builtin has a tf policy).
TORCH_ONLY: set[str] = set()
#: A framework-free numpy policy under "*": they run under tf (and any backend name) without importing it.
FRAMEWORK_FREE = {"ars", "es"}


def test_the_builtin_algorithms_are_the_ones_listed_here():
    builtin = [p.name for p in registry.available("algorithm") if p.target.startswith("rlgear.plugins.")]
    assert builtin == BUILTIN_ALGORITHMS  # a new one must be added to the test below


@pytest.mark.parametrize("algorithm", BUILTIN_ALGORITHMS)
def test_every_builtin_algorithm_lists_the_tf_backend(algorithm):
    expected = (
        ["torch"] if algorithm in TORCH_ONLY else ["*"] if algorithm in FRAMEWORK_FREE else ["tf", "torch"]
    )
    assert registry.load_algorithm(algorithm).capabilities()["backends"] == expected
    if algorithm in FRAMEWORK_FREE:  # its "*" policy serves backend: tf without importing tensorflow
        assert registry.load_algorithm(algorithm).policy_class("tf") is not None


# ----------------------------------------------------------------------------- trainers on tf


@needs_tf
def test_a_restored_tf_trainer_learns_exactly_like_the_original(tmp_path):
    # Envs restart with a new seed on restore (their internals can't be saved), so the
    # comparison is on one batch: same weights, optimizer moments and minibatch order.
    config = resolve(tmp_path, training={"sgd_minibatch_size": 32, "num_sgd_iter": 2})
    trainer_cls = registry.load_algorithm("ppo")
    original, fresh = trainer_cls(config), None
    try:
        original.train()
        checkpoint = original.save(tmp_path / "checkpoint")
        fresh = trainer_cls(config)
        fresh.restore(checkpoint)
        assert fresh.timesteps_total == original.timesteps_total
        batch = original.workers.local_worker.sample()
        assert fresh.policy.learn_on_batch(batch) == original.policy.learn_on_batch(batch)
        for name, value in original.policy.get_weights().items():
            np.testing.assert_array_equal(fresh.policy.get_weights()[name], value, err_msg=name)
    finally:
        original.stop()
        if fresh is not None:
            fresh.stop()


@needs_tf
def test_dqn_trainer_on_tf_learns_from_prioritized_replay_and_updates_its_target(tmp_path):
    config = resolve(
        tmp_path,
        "dqn",
        {
            "env_steps_per_training_step": 16,
            "learning_starts": 16,
            "train_batch_size": 16,
            "buffer_size": 200,
            "target_network_update_freq": 16,
            "prioritized_replay": True,
        },
        {"hidden_sizes": [16]},
    )
    trainer = registry.load_algorithm("dqn")(config)
    try:
        for _ in range(3):
            result = trainer.train()
        policy = trainer.policy
        assert type(policy).__name__ == "DQNTFPolicy"
        assert result["learner/num_grad_updates"] >= 3 and result["learner/num_target_updates"] >= 2
        assert policy.td_errors.shape == (16,) and np.all(policy.td_errors > 0)
        target = policy.get_target_weights()
        assert set(target) == set(policy.get_weights())
    finally:
        trainer.stop()


# ----------------------------------------------------------------------------- custom models


@pytest.fixture
def tf_custom_models(monkeypatch):
    """``tests/`` on sys.path so ``model.custom: tf_custom_models:<Class>`` resolves."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))


@needs_tf
def test_a_custom_tf_model_is_trained_and_exported_under_its_names(tmp_path, tf_custom_models):
    config = resolve(
        tmp_path,
        training={"sgd_minibatch_size": 32, "num_sgd_iter": 2},
        model={"custom": "tf_custom_models:TinyTFActorCritic", "custom_options": {"hidden": 6}},
    )
    trainer = registry.load_algorithm("ppo")(config)
    try:
        before = trainer.policy.get_weights()
        assert {k: v.shape for k, v in before.items()} == {
            "tiny/body": (4, 6),
            "tiny/pi": (6, 2),
            "tiny/vf": (6, 1),
        }
        assert trainer.policy.fast_actor is None  # the numpy twin mirrors the catalog MLP only
        trainer.train()
        after = trainer.policy.get_weights()
        assert all(not np.array_equal(before[k], after[k]) for k in before)
    finally:
        trainer.stop()


@needs_tf
def test_a_custom_model_that_is_not_a_tf_model_is_a_plugin_error(tmp_path, tf_custom_models):
    config = resolve(tmp_path, model={"custom": "tf_custom_models:NotAModel"})
    with pytest.raises(PluginError, match=r"NotAModel' must be a tf\.Module or Keras model"):
        make_policy(config)
