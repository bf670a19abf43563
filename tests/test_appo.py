"""APPO beyond its loss: the target network (hard and Polyak updates, when the trainer makes them),
the adaptive KL coefficient, checkpoints (target weights and coefficient included), torch <-> TF
portability, config errors and in-process training. The loss itself: test_appo_loss_reference.py."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.appo import APPO
from rlgear.plugins.algorithms.appo.kl import adapted_kl_coeff
from tests.conftest import BACKENDS, needs_tf
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy, random_weights, resolve
from tests.test_appo_loss_reference import target_weights
from tests.test_impala_a3c import run_config
from tests.test_impala_loss_reference import sequences

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def policy_on(tmp_path, backend, **training):
    config = resolve(tmp_path, "appo", {"optimizer": "sgd", "lr": 0.1, **training}, backend=backend)
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


def assert_weights_close(got, expected, rtol=1e-6, atol=1e-7):
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


# --- the target network ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_target_network_starts_as_the_learner_and_follows_set_weights(tmp_path, backend):
    policy = policy_on(tmp_path, backend)
    np.testing.assert_equal(policy.get_target_weights(), policy.get_weights())
    policy.learn_on_batch(sequences(policy, False))  # the learner moves, the target stays
    assert any(not np.array_equal(policy.get_target_weights()[k], v) for k, v in policy.get_weights().items())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_update_target_is_a_copy_or_polyak_averaging(tmp_path, backend, tau):
    policy = policy_on(tmp_path, backend)
    online = policy.get_weights()
    old_target = target_weights(online)
    policy.set_target_weights(old_target)
    policy.update_target(tau)
    expected = {k: tau * online[k].astype(np.float64) + (1 - tau) * old_target[k] for k in online}
    assert_weights_close(policy.get_target_weights(), expected, rtol=1e-5, atol=1e-6)
    if tau == 1.0:
        np.testing.assert_equal(policy.get_target_weights(), online)  # exact


@pytest.mark.parametrize("freq, updates_per_target_update", [(32, 1), (96, 3)])
def test_trainer_updates_the_target_every_target_network_update_freq_env_steps(
    tmp_path, freq, updates_per_target_update
):
    """train_batch_size 32: a target update after every 1 or 3 learner updates; a hard copy."""
    training = {"target_network_update_freq": freq, "min_env_steps_per_iteration": 200}
    trainer = APPO(run_config(tmp_path, APPO, training=training))
    try:
        result = trainer.train()
        updates = int(result["learner/num_learner_updates"])
        assert updates >= 3
        assert result["learner/num_target_updates"] == updates // updates_per_target_update
        policy = trainer.policy
        if updates % updates_per_target_update == 0:  # the last update was followed by a copy
            np.testing.assert_equal(policy.get_target_weights(), policy.get_weights())
        else:
            assert any(
                not np.array_equal(policy.get_target_weights()[k], v) for k, v in policy.get_weights().items()
            )
    finally:
        trainer.stop()


# --- the KL coefficient ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "kl, expected", [(0.05, 1.5), (0.021, 1.5), (0.02, 1.0), (0.005, 1.0), (0.0049, 0.5), (0.0, 0.5)]
)
def test_kl_coeff_adapts_as_ppos_adaptive_penalty(kl, expected):
    assert adapted_kl_coeff(1.0, kl, kl_target=0.01) == pytest.approx(expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_adapts_its_kl_coeff_from_its_last_update_only_with_the_kl_loss(tmp_path, backend):
    policy = policy_on(tmp_path, backend, use_kl_loss=True, kl_coeff=0.4, kl_target=1e-6)
    policy.set_target_weights(target_weights(policy.get_weights()))
    policy.adapt_kl_coeff()  # before any update: nothing measured, nothing changes
    assert policy.kl_coeff == pytest.approx(0.4)
    stats = policy.learn_on_batch(sequences(policy, False))
    assert stats["kl"] > 2e-6 and stats["kl_coeff"] == pytest.approx(0.4)
    policy.adapt_kl_coeff()
    assert policy.kl_coeff == pytest.approx(0.6)
    fixed = policy_on(tmp_path / "fixed", backend, use_kl_loss=True, kl_coeff=0.4, kl_target=None)
    fixed.learn_on_batch(sequences(fixed, False))
    fixed.adapt_kl_coeff()
    assert fixed.kl_coeff == pytest.approx(0.4)


# --- checkpoints and portability ------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_state_round_trip_keeps_target_weights_and_kl_coeff(tmp_path, backend):
    policy = policy_on(tmp_path, backend, use_kl_loss=True)
    target = target_weights(policy.get_weights())
    policy.set_target_weights(target)
    policy.kl_coeff = 2.5
    state = policy.get_state()
    restored = policy_on(tmp_path / "restored", backend, use_kl_loss=True)
    restored.set_weights(random_weights(restored.get_weights(), seed=5))
    restored.set_state(state)
    np.testing.assert_equal(restored.get_weights(), policy.get_weights())
    np.testing.assert_equal(restored.get_target_weights(), target)
    assert restored.kl_coeff == pytest.approx(2.5)
    batch = sequences(policy, False)
    assert restored.learn_on_batch(batch) == pytest.approx(policy.learn_on_batch(batch), rel=1e-5)


@needs_tf
def test_torch_weights_and_target_weights_give_the_same_loss_and_gradient_on_tf(tmp_path):
    torch_policy = policy_on(tmp_path, "torch", use_kl_loss=True, kl_coeff=0.7)
    torch_policy.set_target_weights(target_weights(torch_policy.get_weights()))
    tf_policy = policy_on(tmp_path / "tf", "tf", use_kl_loss=True, kl_coeff=0.7)
    tf_policy.set_state(torch_policy.get_state())  # the checkpoint state, target/ arrays included
    np.testing.assert_equal(tf_policy.get_target_weights(), torch_policy.get_target_weights())
    batch = sequences(torch_policy, False)
    torch_grads, torch_stats = torch_policy.compute_gradients(batch)
    tf_grads, tf_stats = tf_policy.compute_gradients(batch)
    assert torch_stats["kl"] > 1e-3
    for key in ("total_loss", "policy_loss", "vf_loss", "kl", "mean_rho", "clip_fraction"):
        assert tf_stats[key] == pytest.approx(torch_stats[key], rel=1e-4, abs=1e-6), key
    assert_weights_close(tf_grads, torch_grads, rtol=1e-3, atol=1e-5)


def test_trainer_checkpoint_round_trip_restores_target_network_and_counters(tmp_path):
    training = {"target_network_update_freq": 96, "use_kl_loss": True, "min_env_steps_per_iteration": 200}
    config = run_config(tmp_path, APPO, training=training)
    trainer, restored = APPO(config), APPO(config)
    try:
        for _ in range(2):
            trainer.train()
        trainer.policy.kl_coeff = 0.123
        path = trainer.save(tmp_path / "ckpt")
        restored.restore(path)
        np.testing.assert_equal(restored.policy.get_target_weights(), trainer.policy.get_target_weights())
        np.testing.assert_equal(restored.policy.get_weights(), trainer.policy.get_weights())
        assert restored.policy.kl_coeff == pytest.approx(0.123)
        assert restored.num_target_updates == trainer.num_target_updates > 0
        assert restored._env_steps_since_target_update == trainer._env_steps_since_target_update
    finally:
        trainer.stop()
        restored.stop()


# --- config and training --------------------------------------------------------------------
@pytest.mark.parametrize(
    "training, key",
    [
        ({"use_kl_loss": True, "use_target_network": False}, "training.use_kl_loss"),
        ({"tau": 0.0}, "training.tau"),
        ({"clip_param": 0.0}, "training.clip_param"),
        ({"target_network_update_freq": 0}, "training.target_network_update_freq"),
        ({"kl_target": -1.0}, "training.kl_target"),
        ({"kl_coeff": -0.1}, "training.kl_coeff"),
        ({"vtrace_lambda": 1.5}, "training.vtrace_lambda"),  # the shared V-trace keys are checked too
    ],
)
def test_appo_config_errors_name_the_key(tmp_path, training, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        run_config(tmp_path, APPO, training=training)


def test_appo_refuses_complete_episodes(tmp_path):
    config = run_config(tmp_path, APPO, workers={"batch_mode": "complete_episodes"})
    with pytest.raises(ConfigError, match=r"workers\.batch_mode: appo learns on fixed-length fragments"):
        APPO(config)


@pytest.mark.parametrize("backend", BACKENDS)
def test_appo_trains_in_process_and_reports_its_learner_stats(tmp_path, backend):
    training = {"use_kl_loss": True, "min_env_steps_per_iteration": 200}
    trainer = APPO(run_config(tmp_path, APPO, backend=backend, training=training))
    try:
        result = trainer.train()
        for key in ("policy_loss", "vf_loss", "entropy", "kl", "kl_coeff", "clip_fraction", "mean_rho"):
            assert np.isfinite(result[f"learner/{key}"]), key
        assert result["learner/num_learner_updates"] > 0
        assert result["timesteps_total"] > 0
    finally:
        trainer.stop()


# --- what comes with the shared V-trace machinery -------------------------------------------
def test_appo_on_a_multi_agent_env_updates_every_trained_policys_target_network(tmp_path):
    """Late-join env (agent streams of different lengths, padded): each policy learns and copies."""
    from tests.test_impala_multi_agent import impala_config
    from tests.test_multi_agent import independent

    raw = impala_config(
        multiagent=independent(),
        training={"target_network_update_freq": 32, "min_env_steps_per_iteration": 200},
    )
    raw["algorithm"] = "appo"
    raw["logging"] = {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"}
    trainer = APPO(raw)
    try:
        result = trainer.train()
        assert result["learner/num_target_updates"] >= 1
        for pid in ("pa", "pb"):
            policy = trainer.policy_map[pid]
            assert policy.num_grad_updates > 0
            np.testing.assert_equal(policy.get_target_weights(), policy.get_weights())  # copied each update
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_appo_trains_a_recurrent_policy_with_a_recurrent_target_network(tmp_path, backend):
    config = run_config(
        tmp_path, APPO, backend=backend,
        training={"use_kl_loss": True, "target_network_update_freq": 64, "min_env_steps_per_iteration": 200},
    )  # fmt: skip
    config.model.lstm = True
    trainer = APPO(config)
    try:
        policy = trainer.policy
        assert policy.recurrent
        assert any("lstm" in name for name in policy.get_target_weights())
        result = trainer.train()
        assert result["learner/num_target_updates"] >= 1
        assert np.isfinite(result["learner/kl"]) and np.isfinite(result["learner/total_loss"])
    finally:
        trainer.stop()
