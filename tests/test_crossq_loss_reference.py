"""CrossQ's losses, batch statistics and running statistics against an independent float64 numpy
reference, option by option, on both backends.

Written from Bhatt et al. 2024 (algorithm 1) with sb3-contrib's reductions, from the framework-neutral
weights: twin critics ``q/...`` where layer ``i`` is ``batch norm (q/bn_<i>/...) -> dense`` with ReLU
between; SAC's actor ``policy/...`` and ``log_alpha``. Per step, with ``a'`` from the actor at ``s'``::

    one pass of the 2B rows [(s, a); (s', a')] through each critic, every batch norm using the mean
    and unbiased variance of all 2B rows:  -> Q_k(s, a), Q_k(s', a')
    y = r + discount (min_k Q_k(s', a') - alpha log pi(a'|s'))            (a constant)
    critic loss = 0.5 sum_k mean((Q_k(s, a) - y)^2)  (gradient through the batch statistics too)
    running <- running + 0.01 (batch statistics - running)
    every policy_delay-th step: actor loss = mean(alpha log pi(a|s) - min_k Q_k(s, a)) with the critics
    in evaluation mode (the running statistics just updated) and fixed; SAC's alpha loss.

Each step (plain SGD) is checked for every statistic, the per-row ``|TD error|``, the update of every
learned weight against ``lr x`` the finite-difference gradient of its loss, and the new running
statistics. There are no target networks.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    PENDULUM_ACT,
    PENDULUM_OBS,
    global_norm,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_offpolicy_loss_reference import (
    STAT_ATOL,
    STAT_RTOL,
    N,
    critic_loss_and_td,
    grouped_gradient,
    scaled,
    squashed_gaussian,
    transitions,
)
from tests.test_tqc_loss_reference import n_step_transitions

EPS = 1e-3


def bn_critics(weights, x, running=None):
    """``([K, rows], per layer [(mean, var) per critic])``: batch statistics when ``running`` is None,
    else the running ones (``{name: [K, width]}``), written one critic and one layer at a time."""
    layers = len([n for n in weights if n.startswith("q/bn_") and n.endswith("/scale")])
    members = np.shape(weights["q/output/kernel"])[0]
    out, stats = [], [[] for _ in range(layers)]
    for k in range(members):
        h = np.asarray(x, np.float64)
        for i in range(layers):
            if running is None:
                mean, var = h.mean(axis=0), h.var(axis=0, ddof=1)
                stats[i].append((mean, var))
            else:
                mean, var = running[f"q/bn_{i}/running_mean"][k], running[f"q/bn_{i}/running_var"][k]
            scale = np.asarray(weights[f"q/bn_{i}/scale"], np.float64)[k]
            offset = np.asarray(weights[f"q/bn_{i}/offset"], np.float64)[k]
            h = (h - mean) / np.sqrt(var + EPS) * scale + offset
            layer = "output" if i == layers - 1 else f"hidden_{i}"
            h = (
                h @ np.asarray(weights[f"q/{layer}/kernel"], np.float64)[k]
                + np.asarray(weights[f"q/{layer}/bias"], np.float64)[k]
            )
            if i < layers - 1:
                h = np.maximum(h, 0.0)
        out.append(h[:, 0])
    return np.stack(out), stats


def joint_inputs(batch, next_actions):
    current = np.concatenate([batch[SB.OBS], scaled(batch[SB.ACTIONS])], axis=-1)
    following = np.concatenate([batch[NEXT_OBS], next_actions], axis=-1)
    return np.concatenate([current, following], axis=0)


def fixed_part(weights, batch, next_noise, momentum=0.01):
    """What the step computes without gradient, from the weights before it: a', the targets' pieces and
    the new running statistics."""
    alpha = float(np.exp(np.asarray(weights["log_alpha"], np.float64)[0]))
    next_actions, next_logp = squashed_gaussian(weights, batch[NEXT_OBS], next_noise)
    values, stats = bn_critics(weights, joint_inputs(batch, next_actions))
    next_q = values[:, N:].min(axis=0)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * (next_q - alpha * next_logp)
    running = {}
    for i, per_critic in enumerate(stats):
        for key, j in (("running_mean", 0), ("running_var", 1)):
            old = np.asarray(weights[f"q/bn_{i}/{key}"], np.float64)
            batch_stat = np.stack([s[j] for s in per_critic])
            running[f"q/bn_{i}/{key}"] = old + momentum * (batch_stat - old)
    return {"next_actions": next_actions, "targets": targets, "running": running, "batch_stats": stats}


def crossq_reference(weights, batch, training, noise, fixed, update_actor):
    log_alpha = float(np.asarray(weights["log_alpha"], np.float64)[0])
    alpha = np.exp(log_alpha)
    values, _ = bn_critics(weights, joint_inputs(batch, fixed["next_actions"]))
    q_taken, targets = values[:, :N], fixed["targets"]
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    losses = {"q/": critic_loss}
    stats = {
        "critic_loss": critic_loss,
        "alpha": alpha,
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
    }
    if update_actor:
        actions, logp = squashed_gaussian(weights, batch[SB.OBS], noise)
        x = np.concatenate([batch[SB.OBS], actions], axis=-1)
        q_policy = bn_critics(weights, x, running=fixed["running"])[0].min(axis=0)
        target_entropy = -np.shape(noise)[1] if training.target_entropy is None else training.target_entropy
        losses["policy/"] = stats["actor_loss"] = (alpha * logp - q_policy).mean()
        stats["alpha_loss"] = -(log_alpha * (logp + target_entropy)).mean()
        stats["entropy"] = -logp.mean()
        if training.tune_alpha:
            losses["log_alpha"] = stats["alpha_loss"]
    stats["total_loss"] = sum(losses.values())
    return losses, stats, td


def build(tmp_path, training, backend):
    base = {
        "optimizer": "sgd",
        "optimizer_kwargs": {},
        "lr": 0.05,
        "grad_clip": None,
        "train_batch_size": N,
        "learning_starts": 0,
        "critic_hidden_sizes": [8, 6],
    }
    config = resolve(
        tmp_path,
        "crossq",
        {**base, **training},
        {"activation": "relu", "hidden_sizes": [8, 6]},
        "Pendulum-v1",
    )
    policy = make_policy(config, backend, PENDULUM_OBS, PENDULUM_ACT)
    weights = random_weights(policy.get_weights(), seed=1, gain=1.5)
    rng = np.random.default_rng(5)
    for name, value in weights.items():  # batch norm: running statistics a critic could have, scales near 1
        if name.endswith("running_var"):
            weights[name] = rng.uniform(0.5, 2.0, value.shape).astype(np.float32)
        elif name.endswith("running_mean"):
            weights[name] = (0.3 * rng.normal(size=value.shape)).astype(np.float32)
        elif name.endswith("/scale"):
            weights[name] = (1.0 + 0.2 * rng.normal(size=value.shape)).astype(np.float32)
    weights["log_alpha"] = np.array([np.log(training.get("initial_alpha", 0.7))], np.float32)
    policy.set_weights(weights)
    return policy


def check_crossq_step(policy, batch, update_actor):
    training = policy.config.training
    weights = policy.get_weights()
    stats, update = sgd_step(policy, batch)
    noise, next_noise = (t.numpy() for t in policy.last_noise)
    fixed = fixed_part(weights, batch, next_noise)
    _, expected, td = crossq_reference(weights, batch, training, noise, fixed, update_actor)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert ("actor_loss" in stats) == update_actor
    np.testing.assert_allclose(policy.td_errors, td, rtol=1e-4, atol=1e-5, err_msg="td_errors")
    learned = {name: value for name, value in weights.items() if "/running_" not in name}
    grads = grouped_gradient(
        lambda w: crossq_reference({**weights, **w}, batch, training, noise, fixed, update_actor)[0], learned
    )
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    for name, grad in grads.items():
        np.testing.assert_allclose(
            update[name] / training.lr, grad, rtol=2e-3, atol=2e-5, err_msg=f"gradient of {name}"
        )
    after = policy.get_weights()
    for name, value in fixed["running"].items():
        np.testing.assert_allclose(after[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert policy.get_target_weights() == {}  # no target networks
    return fixed


CROSSQ_CASES = {
    # name: (training, batch); the delayed actor steps are in the first (3 steps), the rest take one step
    "tuned-alpha-delay-3": ({}, "plain"),
    "fixed-alpha": ({"tune_alpha": False, "initial_alpha": 0.3, "policy_delay": 1}, "plain"),
    "importance-weights": ({"prioritized_replay": True, "policy_delay": 1}, "weights"),
    "n-step-discounts": ({"n_step": 3, "policy_delay": 1}, "n_step"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CROSSQ_CASES))
def test_crossq_losses_batch_statistics_and_update_match_the_numpy_reference(tmp_path, case, backend):
    training, kind = CROSSQ_CASES[case]
    policy = build(tmp_path, training, backend)
    config = policy.config.training
    if kind == "n_step":
        batch = n_step_transitions()
    else:
        batch = transitions(weights=kind == "weights", actions_at_bounds=True)
    assert (batch[SB.DISCOUNTS] == 0).any()  # terminal rows: no bootstrap
    log_alpha = policy.get_weights()["log_alpha"].copy()
    for step in range(config.policy_delay):
        update_actor = (step + 1) % config.policy_delay == 0
        before = policy.get_weights()
        fixed = check_crossq_step(policy, batch, update_actor)
        actor_moved = any(
            not np.array_equal(before[n], w)
            for n, w in policy.get_weights().items()
            if n.startswith("policy/")
        )
        assert actor_moved == update_actor, step
    # The batch statistics were the 2B joint rows' (the reference's), not the current rows' alone.
    current_only = np.concatenate([batch[SB.OBS], scaled(batch[SB.ACTIONS])], axis=-1)
    joint_mean = fixed["batch_stats"][0][0][0]
    assert np.abs(joint_mean - current_only.mean(axis=0)).max() > 0.05
    assert (policy.get_weights()["log_alpha"] == log_alpha).all() == (not config.tune_alpha)


@pytest.mark.parametrize("backend", BACKENDS)
def test_td_errors_without_learning_leave_the_running_statistics_alone(tmp_path, backend):
    policy = build(tmp_path, {}, backend)
    before = policy.get_weights()
    td = policy.compute_td_errors(transitions())
    assert td.shape == (N,) and np.isfinite(td).all()
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
