"""TQC and CrossQ (SAC's variants): config errors, shapes and names on both backends, the training
step, checkpoints and reset_config. Their losses are checked against numpy in
test_tqc_loss_reference.py / test_crossq_loss_reference.py; learning in test_learning_offpolicy.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.errors import ConfigError
from tests.conftest import BACKENDS
from tests.test_offpolicy import ASYMMETRIC_ACT, PENDULUM_OBS, raw_config, resolve

pytest.importorskip("torch")


@pytest.fixture
def make_trainer(tmp_path):
    trainers = []

    def make(raw):
        trainer = registry.load_algorithm(raw["algorithm"])(
            resolve(raw), logdir=tmp_path / f"run{len(trainers)}"
        )
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


#: CrossQ's critics are 2048 wide by default: the tests' are as small as the actor
SMALL = {"tqc": {}, "crossq": {"critic_hidden_sizes": [16, 16]}, "sac": {}}


def small_raw(tmp_path, algorithm, training=None, **sections):
    return raw_config(tmp_path, algorithm, {**SMALL[algorithm], **(training or {})}, **sections)


def policy_on(tmp_path, algorithm, backend, **training):
    config = resolve(small_raw(tmp_path, algorithm, training, backend=backend))
    return registry.load_algorithm(algorithm).policy_class(backend)(PENDULUM_OBS, ASYMMETRIC_ACT, config)


@pytest.mark.parametrize(
    ("algorithm", "key", "value", "message"),
    [
        ("tqc", "n_critics", 0, "training.n_critics: expected a positive integer, got 0"),
        ("tqc", "n_quantiles", 0, "training.n_quantiles: expected a positive integer, got 0"),
        ("tqc", "top_quantiles_to_drop_per_net", 25, "training.top_quantiles_to_drop_per_net: expected 0 to"),
        ("tqc", "top_quantiles_to_drop_per_net", -1, "training.top_quantiles_to_drop_per_net"),
        ("tqc", "tau", 0.0, "training.tau"),
        ("tqc", "use_sde", True, "training.use_sde: expected false: tqc has no gSDE exploration"),
        ("crossq", "tau", 0.005, "training.tau"),  # no target network, no tau
        ("crossq", "policy_delay", 0, "training.policy_delay: expected a positive integer, got 0"),
        ("crossq", "critic_hidden_sizes", [], "training.critic_hidden_sizes: expected a non-empty list"),
        ("crossq", "batch_norm_momentum", 0.0, "training.batch_norm_momentum: expected a number in"),
        ("crossq", "batch_norm_eps", 0.0, "training.batch_norm_eps: expected a positive number"),
        ("crossq", "train_batch_size", 1, "training.train_batch_size: expected 2 or more"),
    ],
)
def test_config_values_out_of_range_are_one_line_errors_naming_the_key(
    tmp_path, algorithm, key, value, message
):
    with pytest.raises(ConfigError, match=message) as raised:
        resolve(raw_config(tmp_path, algorithm, {key: value}))
    assert "\n" not in str(raised.value)


def test_defaults_are_the_papers():
    config = registry.load_algorithm("tqc").config_class()
    assert (config.n_critics, config.n_quantiles, config.top_quantiles_to_drop_per_net) == (5, 25, 2)
    assert config.kept_atoms() == 115
    crossq = registry.load_algorithm("crossq").config_class()
    assert (crossq.lr, crossq.policy_delay, crossq.critic_hidden_sizes) == (1e-3, 3, [2048, 2048])
    assert crossq.optimizer_kwargs == {"betas": [0.5, 0.999]}
    assert (crossq.batch_norm_momentum, crossq.batch_norm_eps) == (0.01, 1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_crossq_critics_are_batch_normalized_without_targets_and_the_names_match(tmp_path, backend):
    policy = policy_on(tmp_path, "crossq", backend, critic_hidden_sizes=[12, 10])
    weights = policy.get_weights()
    sac = policy_on(tmp_path, "sac", backend).get_weights()
    assert {k for k in sac if not k.startswith("q/")} == {k for k in weights if not k.startswith("q/")}
    for i, width in enumerate([3 + 2, 12, 10]):
        for key, fill in (("scale", 1.0), ("offset", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
            np.testing.assert_array_equal(weights[f"q/bn_{i}/{key}"], np.full((2, width), fill))
    assert weights["q/hidden_1/kernel"].shape == (2, 12, 10) and weights["q/output/kernel"].shape == (
        2,
        10,
        1,
    )
    assert policy.get_target_weights() == {}
    assert not any(k.startswith("target/") for k in policy.get_state().arrays)
    trained = {id(v) for v in (policy.optimizer.params if backend == "torch" else policy.variables)}
    named = policy.model.critic.named("q") if backend == "tf" else None
    if backend == "torch":
        running = [*policy.model.critic.running_means, *policy.model.critic.running_vars]
    else:
        running = [v for name, v in named if "running" in name]
    assert running and not any(id(v) in trained for v in running)  # the optimizer never moves them


@pytest.mark.parametrize("backend", BACKENDS)
def test_tqc_critics_have_one_output_per_atom_and_the_names_of_sacs(tmp_path, backend):
    policy = policy_on(tmp_path, "tqc", backend, n_critics=3, n_quantiles=7)
    weights = policy.get_weights()
    sac = policy_on(tmp_path, "sac", backend).get_weights()
    assert set(weights) == set(sac)
    assert weights["q/output/kernel"].shape == (3, 16, 7) and weights["q/output/bias"].shape == (3, 7)
    assert weights["q/hidden_0/kernel"].shape == (3, 3 + 2, 16)
    assert set(policy.get_target_weights()) == {k for k in weights if k.startswith("q/")}


def test_weights_move_between_backends_and_give_the_same_values(tmp_path):
    tf = pytest.importorskip("tensorflow")
    import torch

    obs = np.random.default_rng(0).uniform(-1, 1, (6, 3)).astype(np.float32)
    actions = np.random.default_rng(1).uniform(-1, 1, (6, 2)).astype(np.float32)
    for algorithm, training in (("tqc", {"n_critics": 2, "n_quantiles": 3}), ("crossq", {})):
        torch_policy = policy_on(tmp_path, algorithm, "torch", **training)
        tf_policy = policy_on(tmp_path, algorithm, "tf", **training)
        weights = torch_policy.get_weights()
        rng = np.random.default_rng(2)
        for name in [n for n in weights if "running" in n or "/scale" in n]:  # not the initial 0s and 1s
            weights[name] = rng.uniform(0.5, 1.5, weights[name].shape).astype(np.float32)
        torch_policy.set_weights(weights)
        tf_policy.set_weights(weights)
        x = np.concatenate([obs, actions], axis=-1)
        if algorithm == "tqc":
            theirs = tf_policy.quantiles(tf.constant(obs), tf.constant(actions)).numpy()
            with torch.no_grad():
                ours = torch_policy.quantiles(torch.from_numpy(obs), torch.from_numpy(actions)).numpy()
            np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
        else:
            for training in (False, True):  # running statistics, then the rows' own
                theirs, tf_stats = tf_policy.model.critic(tf.constant(x), training=training)
                with torch.no_grad():
                    ours, torch_stats = torch_policy.model.critic(torch.from_numpy(x), training=training)
                np.testing.assert_allclose(theirs.numpy(), ours.numpy(), rtol=1e-5, atol=1e-5)
                for (tf_mean, tf_var), (mean, var) in zip(tf_stats, torch_stats, strict=True):
                    np.testing.assert_allclose(tf_mean.numpy(), mean.numpy(), rtol=1e-5, atol=1e-6)
                    np.testing.assert_allclose(tf_var.numpy(), var.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            tf_policy.greedy_actions(obs), torch_policy.greedy_actions(obs), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["tqc", "crossq"])
def test_training_steps_learn_and_feed_prioritized_replay(make_trainer, tmp_path, algorithm, backend):
    raw = small_raw(tmp_path, algorithm, {"prioritized_replay": True}, backend=backend)
    trainer = make_trainer(raw)
    for _ in range(4):
        result = trainer.train()
    assert trainer.policy.num_grad_updates == 6
    assert np.isfinite(result["learner/critic_loss"]) and np.isfinite(result["learner/actor_loss"])
    assert len(np.unique(trainer.replay_buffer.priorities())) > 8  # |TD errors| came back


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["tqc", "crossq"])
def test_checkpoint_round_trip_restores_everything_and_the_next_step(
    make_trainer, tmp_path, algorithm, backend
):
    raw = small_raw(tmp_path, algorithm, backend=backend)
    trainer = make_trainer(raw)
    for _ in range(5):
        trainer.train()
    if algorithm == "crossq":  # the running statistics moved, and are what the checkpoint must hold
        assert np.abs(trainer.policy.get_weights()["q/bn_1/running_mean"]).max() > 1e-3
    path = trainer.save()
    restored = make_trainer(raw)
    restored.restore(path)
    assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
    for getter in ("get_weights", "get_target_weights"):
        expected, actual = getattr(trainer.policy, getter)(), getattr(restored.policy, getter)()
        assert set(actual) == set(expected)
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{getter}: {name}")
    # The same minibatch and the same learner noise: the same step (optimizer state included).
    minibatch = trainer.replay_buffer.sample(8)
    restored_minibatch = restored.replay_buffer.sample(8)
    np.testing.assert_array_equal(minibatch["obs"], restored_minibatch["obs"])
    trainer.policy.learn_on_batch(minibatch)
    restored.policy.learn_on_batch(restored_minibatch)
    for name, value in trainer.policy.get_weights().items():
        np.testing.assert_allclose(restored.policy.get_weights()[name], value, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(("key", "value"), [("n_critics", 3), ("n_quantiles", 9), ("tune_alpha", False)])
def test_tqc_reset_config_refuses_keys_that_shape_the_critics(make_trainer, tmp_path, key, value):
    raw = raw_config(tmp_path, "tqc")
    trainer = make_trainer(raw)
    assert trainer.reset_config({**raw, "training": {**raw["training"], key: value}}) is False
    assert trainer.reset_config({**raw, "training": {**raw["training"], "top_quantiles_to_drop_per_net": 1}})
    assert trainer.policy.config.training.top_quantiles_to_drop_per_net == 1


@pytest.mark.parametrize(
    ("key", "value"), [("critic_hidden_sizes", [8, 8]), ("batch_norm_momentum", 0.1), ("initial_alpha", 0.5)]
)
def test_crossq_reset_config_refuses_keys_its_critics_are_built_with(make_trainer, tmp_path, key, value):
    raw = small_raw(tmp_path, "crossq")
    trainer = make_trainer(raw)
    assert trainer.reset_config({**raw, "training": {**raw["training"], key: value}}) is False
    assert trainer.reset_config({**raw, "training": {**raw["training"], "policy_delay": 2}})
    assert trainer.policy.config.training.policy_delay == 2


def test_crossq_refuses_data_parallel_learners_naming_the_key(tmp_path):
    config = resolve(small_raw(tmp_path, "crossq", learners={"num_learners": 2}))
    with pytest.raises(ConfigError, match=r"learners\.num_learners: crossq's batch-normalized critics"):
        registry.load_algorithm("crossq").policy_class("torch")(PENDULUM_OBS, ASYMMETRIC_ACT, config)
