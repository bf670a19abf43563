"""MASAC's losses against an independent float64 numpy reference, option by option.

The reference is written from Haarnoja et al. 2018 (SAC) and Lowe et al. 2017 (MADDPG's centralised
critic, a shared team reward), from the framework-neutral weights, on the team of
``tests/test_maddpg_loss_reference.py`` (``n = 3`` agents, two-dimensional actions, some agents
absent in some rows), written as loops over agents:

* the shared actor's squashed Gaussian per agent, ``a_i = tanh(mean + std noise)`` on
  ``(o_i, onehot(i))``, its log-probability ``log N(u) - log(1 - tanh(u)^2)`` summed over the agent's
  own action columns (a narrower agent's padding column: action 0, no log-probability);
* the critic target ``r + discount (min_k Q'_k(s', a'_1..a'_n) - alpha sum_j present'_j log pi(a'_j))``,
  ``a'_j`` sampled by the online actor (SAC has no target actor), absent agents' actions zeroed; the
  critic loss ``0.5 sum_k mean((Q_k(s, a) - y)^2)`` (importance weights per row);
* the actor loss: for each agent ``i``, the joint action with ``i``'s replayed action replaced by its
  sample and the others kept as replayed, ``mean over rows and present agents of alpha log pi(a_i) -
  min_k Q_k(s, that joint action)``;
* the temperature loss ``-mean over rows and present agents of log alpha (log pi(a_i) + H_i)``, with
  ``H_i`` minus agent ``i``'s own action columns (or ``training.target_entropy``).

Each case takes one plain-SGD step and compares every statistic, the ``|TD error|`` per row and the
update of every weight with ``lr x`` the finite-difference gradient of the loss that weight belongs
to, then the Polyak update of the target critics (``check_step``). A planted bug, "every agent's
action sampled at once" (single-agent SAC on the joint action), gives another actor gradient, which
the reference tells apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import sgd_step
from tests.test_maddpg_loss_reference import (
    AGENTS,
    HIGH,
    LOW,
    UNEQUAL_HIGH,
    UNEQUAL_LOW,
    build,
    scaled,
    split,
    team_q,
    transitions,
)
from tests.test_offpolicy_loss_reference import actor_output, check_step, critic_loss_and_td, grouped_gradient


def agent_sample(weights, inputs, noise, own):
    """``(a [B, n, A], log pi(a_i) [B, n])``, one agent at a time."""
    actions, logps = [], []
    for i in range(AGENTS):
        out = actor_output(weights, inputs[:, i])
        width = out.shape[1] // 2
        mean, log_std = out[:, :width], np.clip(out[:, width:], -20.0, 2.0)
        std = np.exp(log_std)
        u = mean + std * np.asarray(noise[:, i], np.float64)
        gaussian = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
        # log(1 - tanh(u)^2) = -2 log cosh(u), written through |u| so that it keeps float64's precision
        # where tanh saturates (1 - tanh^2 itself cancels: the finite differences would see its rounding)
        correction = -2.0 * (np.abs(u) + np.log1p(np.exp(-2.0 * np.abs(u))) - np.log(2.0))
        actions.append(np.tanh(u) * own[i])
        logps.append(((gaussian - correction) * own[i]).sum(axis=-1))
    return np.stack(actions, axis=1), np.stack(logps, axis=1)


def masac_actor_loss(weights, state, present, replayed, actions, logp, alpha):
    """Per agent, only its own action sampled; the others' as replayed."""
    total = 0.0
    for i in range(AGENTS):
        joint = replayed.copy()
        joint[:, i] = actions[:, i]
        q = team_q(weights, state, joint).min(axis=0)
        total += ((alpha * logp[:, i] - q) * present[:, i]).sum()
    return total / max(present.sum(), 1.0)


def joint_sac_actor_loss(weights, state, present, replayed, actions, logp, alpha):
    """The planted bug: single-agent SAC on the joint action, every agent's action sampled at once."""
    q = team_q(weights, state, actions * present[..., None]).min(axis=0)
    return (alpha * (logp * present).sum(axis=1) - q).mean()


def masac_reference(
    weights, target, batch, training, noise, next_noise, actor_loss=masac_actor_loss, low=LOW, high=HIGH
):
    own = high > low
    log_alpha = float(np.asarray(weights["log_alpha"], np.float64)[0])
    alpha = np.exp(log_alpha)
    inputs, state, present = split(batch[SB.OBS], training.agent_id)
    next_inputs, next_state, next_present = split(batch[NEXT_OBS], training.agent_id)
    next_actions, next_logp = agent_sample(weights, next_inputs, next_noise, own)
    next_q = team_q(target, next_state, next_actions * next_present[..., None]).min(axis=0)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * (
        next_q - alpha * (next_logp * next_present).sum(axis=1)
    )
    replayed = scaled(batch[SB.ACTIONS], low, high) * present[..., None]
    q_taken = team_q(weights, state, replayed)
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    actions, logp = agent_sample(weights, inputs, noise, own)
    entropy_targets = (
        -own.sum(axis=1) if training.target_entropy is None else np.full(AGENTS, training.target_entropy)
    )
    agents = max(present.sum(), 1.0)
    alpha_loss = -(log_alpha * ((logp + entropy_targets) * present).sum()) / agents
    losses = {
        "q/": critic_loss,
        "policy/": actor_loss(weights, state, present, replayed, actions, logp, alpha),
    }
    if training.tune_alpha:
        losses["log_alpha"] = alpha_loss
    stats = {
        "critic_loss": critic_loss,
        "actor_loss": losses["policy/"],
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": -(logp * present).sum() / agents,
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
        "total_loss": sum(losses.values()),
    }
    return losses, stats, td


CASES = {
    # name: (training[, (low, high) of the team's actions])
    "tuned-alpha": ({},),
    "no-agent-id": ({"agent_id": False},),
    "fixed-alpha": ({"tune_alpha": False, "initial_alpha": 0.3},),
    "target-entropy": ({"target_entropy": 0.5, "initial_alpha": 1.3},),
    "importance-weights": ({"prioritized_replay": True},),
    "unequal-action-widths": ({}, (UNEQUAL_LOW, UNEQUAL_HIGH)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_masac_losses_td_errors_and_update_match_the_numpy_reference(tmp_path, case, backend):
    training, (low, high) = (*CASES[case], (LOW, HIGH))[:2]
    policy = build(tmp_path, "masac", {"tau": 0.1, **training}, backend, low, high)
    config = policy.config.training
    batch = transitions(weights=config.prioritized_replay, low=low, high=high)

    def reference(weights, target):
        noise, next_noise = (np.asarray(t) for t in policy.last_noise)
        return masac_reference(weights, target, batch, config, noise, next_noise, low=low, high=high)

    log_alpha = policy.get_weights()["log_alpha"].copy()
    check_step(policy, batch, reference, tau=0.1)
    assert np.shape(policy.last_noise[0]) == (len(batch[SB.OBS]), AGENTS, 2)  # per agent and action component
    moved = not np.array_equal(policy.get_weights()["log_alpha"], log_alpha)
    assert moved == config.tune_alpha
    expected_in = 2 + (AGENTS if config.agent_id else 0)
    assert policy.get_weights()["policy/hidden_0/kernel"].shape == (expected_in, 8)
    assert policy.get_weights()["policy/output/kernel"].shape == (6, 4)  # an agent's 2 means, 2 log stds
    assert policy.get_weights()["q/hidden_0/kernel"].shape == (2, 5 + AGENTS * 2, 8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_reference_tells_masacs_actor_gradient_from_sac_on_the_joint_action(tmp_path, backend):
    """Planted bug: sampling every agent's action at once (single-agent SAC on the joint action) gives
    another actor gradient; the policy's update matches MASAC's and not that one."""
    policy = build(tmp_path, "masac", {"tau": 0.1}, backend)
    config = policy.config.training
    batch = transitions(seed=4)
    weights, target = policy.get_weights(), policy.get_target_weights()
    _, update = sgd_step(policy, batch)
    noise, next_noise = (np.asarray(t) for t in policy.last_noise)
    actor_weights = {n: w for n, w in weights.items() if n.startswith("policy/")}

    def gradient(actor_loss):
        def losses(w):
            return masac_reference(w, target, batch, config, noise, next_noise, actor_loss)[0]

        return {n: g for n, g in grouped_gradient(losses, weights).items() if n in actor_weights}

    masac, joint = gradient(masac_actor_loss), gradient(joint_sac_actor_loss)
    applied = {n: update[n] / config.lr for n in actor_weights}
    difference = max(float(np.abs(masac[n] - joint[n]).max()) for n in actor_weights)
    scale = max(float(np.abs(masac[n]).max()) for n in actor_weights)
    assert difference > 0.05 * scale  # the bug is visible at the reference's precision
    for name in actor_weights:
        np.testing.assert_allclose(applied[name], masac[name], rtol=2e-3, atol=2e-5, err_msg=name)
    assert any(not np.allclose(applied[n], joint[n], rtol=2e-3, atol=2e-5) for n in actor_weights)
