"""TRPO's trainer, config checks, weight layout and checkpoints (the math: test_trpo_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.trpo.learning import split_weight_names
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy, random_weights, resolve
from tests.test_trpo_reference import trpo_batch

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def raw_config(tmp_path, backend: str = "torch", training: dict | None = None, **sections) -> dict:
    raw = {
        "algorithm": "trpo",
        "backend": backend,
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 2},
        "training": {
            "train_batch_size": 64,
            "vf_sgd_minibatch_size": 32,
            "vf_num_sgd_iter": 2,
            **(training or {}),
        },
        "model": {"hidden_sizes": [16]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def make_trainer(raw, logdir):
    trainer_cls = registry.load_algorithm("trpo")
    return trainer_cls(config_mod.resolve(raw, training_class=trainer_cls.config_class), logdir=logdir)


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("training", "sections", "key", "expected"),
    [
        ({"max_kl": 0.0}, {}, "training.max_kl", "expected a positive number"),
        ({"line_search_shrink": 1.0}, {}, "training.line_search_shrink", "expected a number in (0, 1)"),
        ({"cg_iters": 0}, {}, "training.cg_iters", "expected a positive integer"),
        ({"cg_damping": -0.1}, {}, "training.cg_damping", "expected 0 or more"),
        ({"vf_num_sgd_iter": 0}, {}, "training.vf_num_sgd_iter", "expected a positive integer"),
        ({"sub_sampling_factor": 0}, {}, "training.sub_sampling_factor", "expected a positive integer"),
        ({"gae_lambda": 1.5}, {}, "training.gae_lambda", "expected a number in [0, 1]"),
        ({}, {"model": {"vf_share_layers": True}}, "model.vf_share_layers", "expected false"),
        ({}, {"learners": {"num_learners": 2}}, "learners.num_learners", "expected 0 or 1"),
        ({}, {"model": {"lstm": True}}, "model.lstm", "does not support recurrent policies"),
    ],
)
def test_bad_config_is_a_one_line_error_naming_the_key(tmp_path, training, sections, key, expected):
    trainer_cls = registry.load_algorithm("trpo")
    with pytest.raises(ConfigError) as info:
        trainer_cls(config_mod.resolve(raw_config(tmp_path, "torch", training, **sections)))
    message = str(info.value)
    assert key in message and expected in message and "\n" not in message


def test_a_model_without_separate_policy_and_value_weights_is_refused():
    with pytest.raises(
        ConfigError, match=r"trpo needs separate policy and value networks.*shared/hidden_0/kernel"
    ):
        split_weight_names(["shared/hidden_0/kernel", "policy/output/kernel", "value/output/kernel"])
    with pytest.raises(ConfigError, match="no policy/ or value/ weights"):
        split_weight_names(["shared/conv_0/kernel", "value/output/kernel"])  # a trunk alone is no policy
    policy, value = split_weight_names(["policy/hidden_0/kernel", "value/hidden_0/kernel", "policy/log_std"])
    assert policy == ["policy/hidden_0/kernel", "policy/log_std"] and value == ["value/hidden_0/kernel"]
    # an image trunk steps with the policy, never with the value fit
    policy, value = split_weight_names(
        ["shared/conv_0/kernel", "policy/output/kernel", "value/output/kernel"]
    )
    assert policy == ["shared/conv_0/kernel", "policy/output/kernel"] and value == ["value/output/kernel"]


def test_trpo_is_listed_with_its_capabilities():
    caps = registry.load_algorithm("trpo").capabilities()
    assert caps["discrete"] and caps["continuous"] and not caps["recurrent"] and not caps["multi_agent"]
    assert caps["backends"] == ["tf", "torch"]


# ----------------------------------------------------------------------------- weights


@pytest.mark.parametrize("backend", BACKENDS)
def test_weights_have_ppos_names_and_a_ppo_policy_acts_with_them_identically(tmp_path, backend):
    trpo = make_policy(resolve(tmp_path, "trpo", backend=backend), backend, CARTPOLE_OBS, CARTPOLE_ACT)
    ppo = make_policy(resolve(tmp_path, "ppo", backend=backend), backend, CARTPOLE_OBS, CARTPOLE_ACT)
    weights = random_weights(trpo.get_weights(), gain=1.5)
    trpo.set_weights(weights)
    assert {k: v.shape for k, v in trpo.get_weights().items()} == {
        k: v.shape for k, v in ppo.get_weights().items()
    }
    ppo.set_weights(trpo.get_weights())
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    for got, expected in zip(outputs(ppo, obs), outputs(trpo, obs), strict=True):
        np.testing.assert_array_equal(got, expected)


def outputs(policy, obs) -> list[np.ndarray]:
    """``(dist_inputs, values)`` of ``policy``'s model on ``obs``, as numpy."""
    tensors = policy.to_tensors(SB({SB.OBS: obs}), [SB.OBS])
    return [t.detach().numpy() if hasattr(t, "detach") else t.numpy() for t in policy.model_outputs(tensors)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_value_optimizer_holds_only_the_value_net(tmp_path, backend):
    """Adam over the value net only: its state has one pair of buffers per value weight, so no value
    step (nor weight decay) can move the policy."""
    policy = make_policy(resolve(tmp_path, "trpo", backend=backend), backend, CARTPOLE_OBS, CARTPOLE_ACT)
    value_weights = [n for n in policy.get_weights() if n.startswith("value/")]
    buffers = [k for k in policy.get_state().arrays if k.startswith("optimizer/")]
    assert len(buffers) == 2 * len(value_weights)


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_restores_everything_the_next_update_reads(tmp_path, backend):
    """Train, save, restore into a fresh trainer: weights, optimizer, counters and generators come
    back, and both then learn the same update from the same batch (value minibatch order included)."""
    raw = raw_config(tmp_path, backend)
    trainer = make_trainer(raw, tmp_path / "a")
    try:
        trainer.train()
        trainer.train()
        path = trainer.save()
        fresh = make_trainer({**raw, "seed": 1}, tmp_path / "b")
        try:
            assert fresh.policy.rng.bit_generator.state != trainer.policy.rng.bit_generator.state
            fresh.restore(path)
            saved, restored = trainer.policy.get_state(), fresh.policy.get_state()
            assert saved.meta == restored.meta
            assert saved.arrays.keys() == restored.arrays.keys()
            for key, value in saved.arrays.items():
                np.testing.assert_array_equal(
                    np.asarray(restored.arrays[key]), np.asarray(value), err_msg=key
                )
            batch = trpo_batch(trainer.policy, False, seed=3)
            stats_a, stats_b = trainer.policy.learn_on_batch(batch), fresh.policy.learn_on_batch(batch)
            assert stats_a == stats_b
            after_a, after_b = trainer.policy.get_weights(), fresh.policy.get_weights()
            for name, value in after_a.items():
                np.testing.assert_array_equal(after_b[name], value, err_msg=name)
        finally:
            fresh.stop()
    finally:
        trainer.stop()


def test_a_short_run_reports_the_policy_step_and_value_fit_stats(tmp_path):
    trainer = make_trainer(raw_config(tmp_path), tmp_path / "a")
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    for key in ("kl", "surrogate_improvement", "line_search_steps", "step_accepted", "entropy", "vf_loss",
                "vf_grad_gnorm", "policy_grad_norm"):  # fmt: skip
        assert f"learner/{key}" in result, key
    assert 0.0 <= result["learner/kl"] <= 0.01 + 1e-6
    assert result["learner/step_accepted"] in (0.0, 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_finite_policy_gradient_skips_the_policy_step_and_is_counted(tmp_path, backend):
    config = resolve(tmp_path, "trpo", {"vf_sgd_minibatch_size": 24}, backend=backend)
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    batch = trpo_batch(policy, False)
    batch[SB.ADVANTAGES][3] = np.nan
    before = policy.get_weights()
    stats = policy.learn_on_batch(batch)
    after = policy.get_weights()
    assert stats["step_accepted"] == 0.0 and stats["num_nonfinite_updates"] == 1.0
    for name in before:
        if name.startswith("policy/"):
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert np.isfinite(np.concatenate([v.ravel() for v in after.values()])).all()
