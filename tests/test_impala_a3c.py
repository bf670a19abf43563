"""Fast tests of ``impala`` and ``a3c`` without Ray (``workers.num_workers: 0``).

The async ops fall back to the driver's own evaluator, so everything here runs
in one process: the V-trace loss (torch and TF) against numpy ``value_ops.vtrace``,
the policies' compute/apply gradients against ``learn_on_batch`` on both backends,
the loss's direction, config checks, checkpoints, a few iterations on TF.
Agreement of the TF and torch losses and gradients is in ``test_tf_parity.py``;
learning to a target return (with remote workers on a real local Ray) is in
``test_learning_impala_a3c.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlgear import value_ops
from rlgear.config import resolve
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.a3c import A3C
from rlgear.plugins.algorithms.impala import IMPALA
from rlgear.plugins.backends.torch.vtrace import vtrace as torch_vtrace
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType
from tests.conftest import BACKENDS, needs_tf
from tests.test_vtrace import random_episodes

# TF is imported above, before a TF trainer sizes its thread pools (which then warns).
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

LAST = int(StepType.LAST)
VTRACE_CLIPS = [(1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 0.9, 0.95), (None, None, None, 0.7)]


def run_config(tmp_path, trainer_cls, env="CartPole-v1", training=None, workers=None, backend="torch"):
    raw = {
        "algorithm": trainer_cls.name,
        "backend": backend,
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 8, **(workers or {})},
        "training": {"train_batch_size": 32, **(training or {})},
        "model": {"hidden_sizes": [16, 16]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    return resolve(raw, training_class=trainer_cls.config_class)


@pytest.fixture
def impala(tmp_path):
    trainer = IMPALA(run_config(tmp_path, IMPALA))
    yield trainer
    trainer.stop()


# --- V-trace in the loss --------------------------------------------------------------------
@pytest.mark.parametrize("clips", VTRACE_CLIPS)
def test_torch_vtrace_matches_numpy_value_ops(clips):
    rho, pg_rho, c, lam = clips
    log_rhos, rewards, values, step_types, discounts = random_episodes(np.random.default_rng(7), T=11, B=4)
    kwargs = dict(clip_rho_threshold=rho, clip_pg_rho_threshold=pg_rho, clip_c_threshold=c, lambda_=lam)
    expected = value_ops.vtrace(log_rhos, rewards, values, step_types, discounts, **kwargs)
    got = torch_vtrace(
        *(torch.from_numpy(x) for x in (log_rhos, rewards, values, step_types, discounts)), **kwargs
    )
    np.testing.assert_allclose(got[0].numpy(), expected[0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[1].numpy(), expected[1], rtol=1e-10, atol=1e-10)


@needs_tf
@pytest.mark.parametrize("clips", VTRACE_CLIPS)
def test_tf_vtrace_matches_numpy_value_ops_eagerly_and_compiled_for_any_batch_size(clips):
    from rlgear.plugins.backends.tf import tf
    from rlgear.plugins.backends.tf.vtrace import vtrace as tf_vtrace

    rho, pg_rho, c, lam = clips
    kwargs = dict(clip_rho_threshold=rho, clip_pg_rho_threshold=pg_rho, clip_c_threshold=c, lambda_=lam)
    float_spec = tf.TensorSpec([11, None], tf.float64)
    compiled = tf.function(
        lambda *inputs: tf_vtrace(*inputs, **kwargs),
        input_signature=[float_spec] * 3 + [tf.TensorSpec([11, None], tf.int32), float_spec],
    )
    for seed, batch_size in ((7, 4), (8, 1)):
        inputs = random_episodes(np.random.default_rng(seed), T=11, B=batch_size)
        expected = value_ops.vtrace(*inputs, **kwargs)
        for run in (tf_vtrace, compiled):
            tensors = [tf.constant(x) for x in inputs]
            got = run(*tensors, **kwargs) if run is tf_vtrace else run(*tensors)
            np.testing.assert_allclose(got[0].numpy(), expected[0], rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(got[1].numpy(), expected[1], rtol=1e-10, atol=1e-10)
    assert compiled.experimental_get_tracing_count() == 1  # one graph for every batch size


@needs_tf
def test_no_gradient_flows_through_tf_vtrace():
    from rlgear.plugins.backends.tf import tf
    from rlgear.plugins.backends.tf.vtrace import vtrace as tf_vtrace

    log_rhos, rewards, values, step_types, discounts = (
        tf.constant(x) for x in random_episodes(np.random.default_rng(0), T=6, B=2)
    )
    with tf.GradientTape(persistent=True) as tape:
        for x in (log_rhos, rewards, values, discounts):
            tape.watch(x)
        vs, pg = tf_vtrace(log_rhos, rewards, values, step_types, discounts)
        total = tf.reduce_sum(vs) + tf.reduce_sum(pg)
    assert all(tape.gradient(total, x) is None for x in (log_rhos, rewards, values, discounts))


def test_postprocessing_keeps_fragments_as_sequences_with_the_bootstrap_step(impala):
    batch, steps = impala.workers.local_worker.sample_with_count()
    assert batch[SB.OBS].shape == (2, 9, 4)  # [envs, fragment length + 1, obs]
    assert batch[SB.ACTION_LOGP].shape == batch[SB.STEP_TYPES].shape == (2, 9)
    # the next fragment starts with this one's bootstrap step (nothing lost or duplicated)
    following, _ = impala.workers.local_worker.sample_with_count()
    np.testing.assert_array_equal(following[SB.OBS][:, 0], batch[SB.OBS][:, -1])
    assert steps <= 16


def test_impala_loss_learns_vtrace_targets_of_the_learners_own_values(impala):
    """vf_loss and policy_loss equal what numpy V-trace gives on the same network outputs, off-policy."""
    policy = impala.policy
    batch, _ = impala.workers.local_worker.sample_with_count()
    batch = SB(batch)
    rng = np.random.default_rng(0)
    # pretend a lagging behaviour policy: log mu differs from log pi by up to +-1.5
    batch[SB.ACTION_LOGP] = (
        batch[SB.ACTION_LOGP] + rng.uniform(-1.5, 1.5, batch[SB.ACTION_LOGP].shape)
    ).astype(np.float32)
    training = policy.config.training
    n, steps = batch[SB.STEP_TYPES].shape
    with torch.no_grad():
        dist_inputs, values = policy.model(policy.preprocess(batch[SB.OBS].reshape(n * steps, -1)))
        logp = policy.dist_class(dist_inputs).logp(torch.from_numpy(batch[SB.ACTIONS].reshape(-1)))
    values = values.numpy().reshape(n, steps).T.astype(np.float64)
    logp = logp.numpy().reshape(n, steps).T.astype(np.float64)
    step_types = batch[SB.STEP_TYPES].T
    vs, pg = value_ops.vtrace(
        log_rhos=logp - batch[SB.ACTION_LOGP].T,
        rewards=batch[SB.REWARDS].T,
        values=values,
        step_types=step_types,
        discounts=batch[SB.DISCOUNTS].T * training.gamma,
        clip_rho_threshold=training.vtrace_clip_rho_threshold,
        clip_pg_rho_threshold=training.vtrace_clip_pg_rho_threshold,
        clip_c_threshold=training.vtrace_clip_c_threshold,
        lambda_=training.vtrace_lambda,
    )
    learned = step_types[:-1] != LAST
    expected_vf = 0.5 * np.mean(((values[:-1] - vs) ** 2)[learned])
    expected_pg = -np.mean((logp[:-1] * pg)[learned])
    _, stats = policy.loss(policy.to_tensors(batch, policy.loss_columns))
    assert float(stats["vf_loss"]) == pytest.approx(expected_vf, rel=1e-4)
    assert float(stats["policy_loss"]) == pytest.approx(expected_pg, rel=1e-4, abs=1e-6)
    assert float(stats["mean_rho"]) != pytest.approx(1.0)  # the batch really was off-policy


def test_impala_trains_without_ray_and_reports_its_learner_stats(tmp_path):
    trainer = IMPALA(run_config(tmp_path, IMPALA, training={"min_env_steps_per_iteration": 64}))
    try:
        before = trainer.policy.get_weights()
        result = trainer.train()
        assert result["timesteps_total"] >= 64
        assert result["learner/num_learner_updates"] >= 1
        for key in ("vf_loss", "policy_loss", "entropy", "mean_rho", "learner_queue_env_steps"):
            assert f"learner/{key}" in result
        # on-policy without remote workers: target and behaviour log-probs agree
        assert result["learner/mean_rho"] == pytest.approx(1.0, abs=1e-3)
        after = trainer.policy.get_weights()
        assert any(not np.allclose(after[k], before[k]) for k in after)
    finally:
        trainer.stop()


def test_impala_batches_arriving_fragments_up_to_train_batch_size(tmp_path):
    trainer = IMPALA(run_config(tmp_path, IMPALA, training={"train_batch_size": 40}))
    try:
        stats = trainer.training_step()  # one fragment of 16 env steps: queued, no update yet
        assert stats["num_learner_updates"] == 0
        assert stats["learner_queue_env_steps"] > 0
        for _ in range(2):
            stats = trainer.training_step()
        assert stats["num_learner_updates"] == 1  # 3 fragments >= 40 env steps: one update
        assert stats["learner_queue_env_steps"] == 0
    finally:
        trainer.stop()


def test_impala_broadcasts_every_broadcast_interval_updates_and_reports_the_policy_lag(tmp_path):
    """A stand-in sampler plays remote worker 1 (two requests in flight), so no Ray is needed."""
    trainer = IMPALA(run_config(tmp_path, IMPALA, training={"train_batch_size": 8, "broadcast_interval": 3}))
    local = trainer.workers.local_worker

    class OneRemoteWorker:
        def get_ready(self, timeout_s=None):
            return [(*local.sample_with_count(), 1)]

    trainer.sampler = OneRemoteWorker()
    synced = []
    trainer.workers.sync_weights = lambda ids=None: synced.append((trainer.num_learner_updates, list(ids)))
    try:
        lags = [trainer.training_step()["policy_lag"] for _ in range(7)]
        assert trainer.num_learner_updates == 7  # every fragment (>= 8 env steps) is one update
        assert synced == [(3, [1]), (6, [1])]
        # The batch arriving at step k was requested when the one two arrivals earlier came
        # back (two in flight), with the weights the worker held then: updates 0, 0, 0, 3, 3.
        assert lags == [0, 1, 2, 3, 4, 2, 3]
    finally:
        trainer.stop()


def test_impala_refuses_complete_episodes(tmp_path):
    config = run_config(tmp_path, IMPALA, workers={"batch_mode": "complete_episodes"})
    with pytest.raises(ConfigError, match=r"workers\.batch_mode.*truncate_episodes"):
        IMPALA(config)


@pytest.mark.parametrize(
    "training, key",
    [
        ({"vtrace_lambda": 1.5}, "training.vtrace_lambda"),
        ({"vtrace_clip_rho_threshold": 0}, "training.vtrace_clip_rho_threshold"),
        ({"broadcast_interval": 0}, "training.broadcast_interval"),
        ({"entropy_coeff": -1}, "training.entropy_coeff"),
    ],
)
def test_impala_config_errors_name_the_key(tmp_path, training, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        run_config(tmp_path, IMPALA, training=training)


def test_a3c_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"training\.gae_lambda"):
        run_config(tmp_path, A3C, training={"gae_lambda": -0.1})


@needs_tf
def test_impala_trains_on_tf_without_ray_and_reports_its_learner_stats(tmp_path):
    config = run_config(
        tmp_path, IMPALA, training={"min_env_steps_per_iteration": 64},
        workers={"num_workers": 0}, backend="tf",
    )  # fmt: skip
    trainer = IMPALA(config)
    try:
        assert type(trainer.policy).__name__ == "IMPALATFPolicy"
        before = trainer.policy.get_weights()
        for _ in range(2):
            result = trainer.train()
        assert result["timesteps_total"] >= 128
        # an update takes queued fragments (at most 16 env steps each) once they hold 32 env steps
        learned_on = result["timesteps_total"] - result["learner/learner_queue_env_steps"]
        assert learned_on / 47 <= result["learner/num_learner_updates"] <= learned_on / 32
        for key in ("total_loss", "grad_gnorm", "vf_loss", "policy_loss", "entropy", "mean_rho"):
            assert np.isfinite(result[f"learner/{key}"]), key
        # on-policy without remote workers: target and behaviour log-probs agree
        assert result["learner/mean_rho"] == pytest.approx(1.0, abs=1e-3)
        after = trainer.policy.get_weights()
        assert any(not np.allclose(after[k], before[k]) for k in after)
    finally:
        trainer.stop()


@needs_tf
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_a3c_trains_on_tf_without_ray_and_reports_its_learner_stats(tmp_path, env):
    config = run_config(
        tmp_path, A3C, env=env, training={"min_env_steps_per_iteration": 32},
        workers={"num_workers": 0}, backend="tf",
    )  # fmt: skip
    trainer = A3C(config)
    try:
        assert type(trainer.policy).__name__ == "A3CTFPolicy"
        before = trainer.policy.get_weights()
        results = [trainer.train() for _ in range(2)]
        result = results[-1]
        assert all(r["timesteps_this_iter"] >= 32 for r in results)  # min_env_steps_per_iteration
        assert result["timesteps_total"] == sum(r["timesteps_this_iter"] for r in results)
        # One gradient per 16-row fragment (2 envs x 8 steps). A row that starts an episode after an
        # autoreset is no env step, so the fragments hold the env steps plus one row per episode end.
        updates = result["learner/num_grad_updates"]
        assert 0 <= 16 * updates - result["timesteps_total"] <= result["episodes_total"] + 2, result
        assert 16 * (updates - 1) < result["timesteps_total"]  # no fragment more than needed
        for key in ("total_loss", "grad_gnorm", "vf_loss", "policy_loss", "entropy", "cur_lr"):
            assert np.isfinite(result[f"learner/{key}"]), key
        after = trainer.policy.get_weights()
        assert any(not np.allclose(after[k], before[k]) for k in after)
    finally:
        trainer.stop()


# --- A3C: gradients computed apart from where they are applied ----------------------------
def a3c_policy_and_batch(tmp_path, env="CartPole-v1", backend="torch", **training):
    trainer = A3C(run_config(tmp_path, A3C, env=env, training=training, backend=backend))
    batch, _ = trainer.workers.local_worker.sample_with_count()
    return trainer, batch


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "env, grad_clip", [("CartPole-v1", 0.5), ("CartPole-v1", None), ("Pendulum-v1", 0.5)]
)
def test_compute_then_apply_gradients_equals_learn_on_batch(tmp_path, env, grad_clip, backend):
    learner, batch = a3c_policy_and_batch(tmp_path, env=env, backend=backend, grad_clip=grad_clip)
    twin = A3C(run_config(tmp_path, A3C, env=env, training={"grad_clip": grad_clip}, backend=backend))
    try:
        twin.policy.set_weights(learner.policy.get_weights())
        before = learner.policy.get_weights()
        grads, stats = twin.policy.compute_gradients(batch)
        assert set(grads) == set(before)
        assert all(grads[k].shape == before[k].shape for k in grads)  # neutral layout, as weights
        np.testing.assert_equal(twin.policy.get_weights(), before)  # computing changes nothing
        assert stats["total_loss"] == pytest.approx(
            stats["policy_loss"] + 0.5 * stats["vf_loss"], rel=1e-5, abs=1e-6
        )
        learner.policy.learn_on_batch(batch)
        twin.policy.apply_gradients(grads)
        expected, got = learner.policy.get_weights(), twin.policy.get_weights()
        for key in expected:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-6)
        assert any(not np.allclose(expected[k], before[k]) for k in expected)
        assert twin.policy.num_grad_updates == learner.policy.num_grad_updates == 1
    finally:
        learner.stop()
        twin.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_gradients_checks_names_and_shapes_before_changing_anything(tmp_path, backend):
    trainer, batch = a3c_policy_and_batch(tmp_path, backend=backend)
    try:
        grads, _ = trainer.policy.compute_gradients(batch)
        before = trainer.policy.get_weights()
        optimizer_before = trainer.policy.get_state().arrays
        first = next(iter(grads))
        missing = {k: v for k, v in grads.items() if k != first}
        with pytest.raises(ValueError, match=f"missing.*{first}"):
            trainer.policy.apply_gradients(missing)
        # every gradient but the last is good: a check that stopped early would have changed them
        last = list(grads)[-1]
        wrong = {k: (v[:-1] if k == last else v) for k, v in grads.items()}
        with pytest.raises(ValueError, match=f"'{last}' has shape"):
            trainer.policy.apply_gradients(wrong)
        np.testing.assert_equal(trainer.policy.get_weights(), before)
        np.testing.assert_equal(trainer.policy.get_state().arrays, optimizer_before)
        assert trainer.policy.num_grad_updates == 0
        trainer.policy.apply_gradients({k: v.copy() for k, v in grads.items()})  # read-only-safe copy path
        assert trainer.policy.num_grad_updates == 1
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_weight_the_loss_does_not_reach_gets_a_zero_gradient_that_applies(tmp_path, backend):
    pg_cls = registry.load_algorithm("pg")
    config = run_config(
        tmp_path, pg_cls, backend=backend, training={"use_baseline": False},
        workers={"batch_mode": "complete_episodes"},
    )  # fmt: skip
    trainer = pg_cls(config)
    try:
        batch, _ = trainer.workers.local_worker.sample_with_count()
        before = trainer.policy.get_weights()
        grads, _ = trainer.policy.compute_gradients(batch)
        assert set(grads) == set(before)  # the value head too, though REINFORCE never uses it
        value_head = [k for k in grads if k.startswith("value/")]
        assert value_head and all(not grads[k].any() for k in value_head)
        assert any(grads[k].any() for k in grads if k.startswith("policy/"))
        trainer.policy.apply_gradients(grads)
        after = trainer.policy.get_weights()
        assert all(np.array_equal(after[k], before[k]) for k in value_head)
        assert any(not np.array_equal(after[k], before[k]) for k in grads if k.startswith("policy/"))
    finally:
        trainer.stop()


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a3c_gradient_step_moves_logp_with_the_advantage(tmp_path, env, sign):
    """A positive advantage makes the taken actions more likely, a negative one less (plain SGD step)."""
    trainer, batch = a3c_policy_and_batch(
        tmp_path, env=env, vf_loss_coeff=0.0, grad_clip=None, optimizer="sgd", lr=1e-2
    )
    try:
        policy = trainer.policy
        batch = SB(batch)
        batch[SB.ADVANTAGES] = np.full(len(batch), sign, dtype=np.float32)

        def mean_logp():
            with torch.no_grad():
                inputs, _ = policy.model(policy.preprocess(batch[SB.OBS]))
                return float(policy.dist_class(inputs).logp(torch.from_numpy(batch[SB.ACTIONS])).mean())

        before = mean_logp()
        grads, _ = policy.compute_gradients(batch)
        policy.apply_gradients(grads)
        assert np.sign(mean_logp() - before) == sign
    finally:
        trainer.stop()


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_a3c_trains_without_ray_on_discrete_and_continuous_actions(tmp_path, env):
    trainer = A3C(run_config(tmp_path, A3C, env=env))
    try:
        before = trainer.policy.get_weights()
        result = trainer.train()
        assert result["learner/num_grad_updates"] == 1
        assert result["timesteps_total"] == 16
        assert np.isfinite(result["learner/total_loss"])
        after = trainer.policy.get_weights()
        assert any(not np.allclose(after[k], before[k]) for k in after)
    finally:
        trainer.stop()


# --- checkpoints ----------------------------------------------------------------------------
@pytest.mark.parametrize("trainer_cls", [IMPALA, A3C])
def test_checkpoint_round_trip_continues_exactly(tmp_path, trainer_cls):
    config = run_config(tmp_path, trainer_cls)
    trainer = trainer_cls(config)
    restored = trainer_cls(config)
    try:
        for _ in range(3):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        restored.restore(path)
        np.testing.assert_equal(restored.policy.get_weights(), trainer.policy.get_weights())
        assert restored.iteration == trainer.iteration == 3
        assert restored.timesteps_total == trainer.timesteps_total
        assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
        if trainer_cls is IMPALA:
            assert restored.num_learner_updates == trainer.num_learner_updates > 0
        # both go on from the same state: identical optimizer steps give identical weights
        batch, _ = trainer.workers.local_worker.sample_with_count()
        trainer.policy.learn_on_batch(batch)
        restored.policy.learn_on_batch(batch)
        np.testing.assert_allclose(
            np.concatenate([v.ravel() for v in restored.policy.get_weights().values()]),
            np.concatenate([v.ravel() for v in trainer.policy.get_weights().values()]),
            rtol=1e-6,
        )
        assert restored.train()["training_iteration"] == 4
    finally:
        trainer.stop()
        restored.stop()


@pytest.mark.parametrize("algorithm", ["impala", "a3c"])
def test_runs_with_no_workers_where_ray_cannot_be_imported(tmp_path, algorithm):
    from tests.test_ray_optional import run_without_ray

    out = run_without_ray(
        f"""
        import json, sys
        from rlgear.discovery import registry
        trainer_cls = registry.load_algorithm({algorithm!r})
        trainer = trainer_cls({{"algorithm": {algorithm!r}, "seed": 0, "env": {{"name": "CartPole-v1"}},
                                "workers": {{"num_workers": 0, "num_envs_per_worker": 2,
                                            "rollout_fragment_length": 8}},
                                "training": {{"train_batch_size": 16, "min_env_steps_per_iteration": 48}},
                                "logging": {{"dir": {str(tmp_path)!r}, "tensorboard": False,
                                            "progress": "none"}}}})
        result = trainer.train()
        trainer.stop()
        print(json.dumps({{"steps": result["timesteps_total"], "ray": "ray" in sys.modules,
                          "updates": result["learner/num_grad_updates"]}}))
        """,
        tmp_path,
    )
    assert out["steps"] >= 48
    assert out["updates"] >= 3
    assert out["ray"] is False
