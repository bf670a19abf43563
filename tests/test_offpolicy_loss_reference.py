"""SAC's, TD3's and DDPG's losses against an independent numpy reference, option by option.

The reference is written from the papers in float64, from the framework-neutral
weights: the actor MLP ``policy/...`` (its output the pre-tanh action, or for SAC
the means then log stds of a Gaussian over it), critics ``q/...`` stacked
``[K, in, out]`` evaluated member by member on ``[obs, action in [-1, 1]]``.

* SAC (Haarnoja et al. 2018): ``a = tanh(mean + std * noise)``, ``log pi(a|s) =
  sum log N(u; mean, std) - sum log(1 - tanh(u)^2)`` (appendix C, written directly);
  critic target ``r + discount (min_k Q'_k(s', a') - alpha log pi(a'|s'))``; critic loss
  ``0.5 sum_k mean((Q_k(s, a) - y)^2)``; actor loss ``mean(alpha log pi(a|s) - min_k Q_k(s, a))``
  with the critics held fixed; alpha loss ``-mean(log alpha (log pi + target entropy))``.
* DDPG (Lillicrap et al. 2016) and TD3 (Fujimoto et al. 2018): target ``r + discount
  min_k Q'_k(s', clip(tanh(mu'(s')) + clip(sigma noise, -c, c), -1, 1))`` (one critic and no
  noise for DDPG); actor loss ``-mean(Q_1(s, tanh(mu(s))))``, only every ``policy_delay``-th step.

The noise draws come from the policy (``last_noise``: the reference checks the math
given the draws). Each case takes one plain-SGD step and compares every statistic,
the per-row ``|TD error|`` and the update of every weight with ``lr x`` the
finite-difference gradient of the loss that weight belongs to (the critic loss for
``q/``, the actor loss for ``policy/``, the alpha loss for ``log_alpha``), then the
Polyak update of the targets.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.ddpg import DDPG
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    PENDULUM_ACT,
    PENDULUM_OBS,
    dense,
    finite_difference_gradient,
    global_norm,
    make_policy,
    mlp_body,
    random_weights,
    resolve,
    sgd_step,
)

N = 24
LOW, HALF_RANGE = -2.0, 2.0  # Pendulum's torque bounds
FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5


# ----------------------------------------------------------------------------- the reference networks


def actor_output(weights, obs):
    return dense(weights, "policy/output", mlp_body(weights, "policy", np.asarray(obs, np.float64), "relu"))


def critic_values(weights, obs, actions):
    """``[K, B]``: each stacked critic on ``[obs, actions]``, one member at a time."""
    x = np.concatenate([np.asarray(obs, np.float64), np.asarray(actions, np.float64)], axis=-1)
    members = np.shape(weights["q/output/kernel"])[0]
    out = []
    for k in range(members):
        member = {name: np.asarray(value)[k] for name, value in weights.items() if name.startswith("q/")}
        out.append(dense(member, "q/output", mlp_body(member, "q", x, "relu"))[:, 0])
    return np.stack(out)


def squashed_gaussian(weights, obs, noise):
    """``(a, log pi(a|s))`` of SAC's actor for the given standard-normal ``noise``."""
    out = actor_output(weights, obs)
    num_actions = out.shape[1] // 2
    mean, log_std = out[:, :num_actions], np.clip(out[:, num_actions:], -20.0, 2.0)
    std = np.exp(log_std)
    u = mean + std * np.asarray(noise, np.float64)
    gaussian = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    correction = np.log(1.0 - np.tanh(u) ** 2)
    return np.tanh(u), (gaussian - correction).sum(axis=-1)


def scaled(env_actions):
    return (np.asarray(env_actions, np.float64) - LOW) / HALF_RANGE - 1.0


def critic_loss_and_td(q_taken, targets, batch):
    td = q_taken - targets
    per_row = 0.5 * (td**2).sum(axis=0)
    if WEIGHTS in batch:
        per_row = per_row * batch[WEIGHTS]
    return per_row.mean(), np.abs(td).mean(axis=0)


def sac_reference(weights, target, batch, training, noise, next_noise):
    """``(losses by parameter group, stats, |td errors|)``."""
    log_alpha = float(np.asarray(weights["log_alpha"], np.float64)[0])
    alpha = np.exp(log_alpha)
    num_actions = np.shape(noise)[1]
    target_entropy = -num_actions if training.target_entropy is None else training.target_entropy
    next_actions, next_logp = squashed_gaussian(weights, batch[NEXT_OBS], next_noise)
    next_q = critic_values(target, batch[NEXT_OBS], next_actions).min(axis=0)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * (next_q - alpha * next_logp)
    q_taken = critic_values(weights, batch[SB.OBS], scaled(batch[SB.ACTIONS]))
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    actions, logp = squashed_gaussian(weights, batch[SB.OBS], noise)
    actor_loss = (alpha * logp - critic_values(weights, batch[SB.OBS], actions).min(axis=0)).mean()
    alpha_loss = -(log_alpha * (logp + target_entropy)).mean()
    losses = {"q/": critic_loss, "policy/": actor_loss}
    if training.tune_alpha:
        losses["log_alpha"] = alpha_loss
    stats = {
        "critic_loss": critic_loss,
        "actor_loss": actor_loss,
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": -logp.mean(),
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
        "total_loss": sum(losses.values()),
    }
    return losses, stats, td


def td3_reference(weights, target, batch, training, noise, update_actor):
    next_actions = np.tanh(actor_output(target, batch[NEXT_OBS]))
    if training.target_noise > 0:
        smoothing = np.clip(
            training.target_noise * np.asarray(noise, np.float64),
            -training.target_noise_clip,
            training.target_noise_clip,
        )
        next_actions = np.clip(next_actions + smoothing, -1.0, 1.0)
    next_q = critic_values(target, batch[NEXT_OBS], next_actions).min(axis=0)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * next_q
    q_taken = critic_values(weights, batch[SB.OBS], scaled(batch[SB.ACTIONS]))
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    losses = {"q/": critic_loss}
    stats = {
        "critic_loss": critic_loss,
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
    }
    if update_actor:
        actions = np.tanh(actor_output(weights, batch[SB.OBS]))
        losses["policy/"] = stats["actor_loss"] = -critic_values(weights, batch[SB.OBS], actions)[0].mean()
    stats["total_loss"] = sum(losses.values())
    return losses, stats, td


# ----------------------------------------------------------------------------- checking one step


def grouped_gradient(losses: Callable[[dict], dict], weights: dict) -> dict:
    """Each weight's finite-difference gradient of the loss of its group (the name's prefix); 0 for a
    weight no loss reaches (e.g. a fixed ``log_alpha``)."""
    grads = {name: np.zeros(np.shape(value)) for name, value in weights.items()}
    for prefix in losses(weights):
        names = [name for name in weights if name.startswith(prefix)]
        subset = {name: weights[name] for name in names}
        grads.update(finite_difference_gradient(lambda w, p=prefix: losses({**weights, **w})[p], subset))
    return grads


def transitions(seed=0, weights=False, actions_at_bounds=False):
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-2.0, 2.0, size=(N, 1))
    if actions_at_bounds:
        actions[:4] = [[-2.0], [2.0], [-2.0], [2.0]]
    columns = {
        SB.OBS: rng.normal(size=(N, 3)).astype(np.float32),
        SB.ACTIONS: actions.astype(np.float32),
        SB.REWARDS: (3.0 * rng.normal(size=N)).astype(np.float32),
        NEXT_OBS: rng.normal(size=(N, 3)).astype(np.float32),
        # gamma**k after k steps, 0 after a terminal
        SB.DISCOUNTS: (0.97 * (rng.random(N) > 0.25)).astype(np.float32),
    }
    if weights:
        columns[WEIGHTS] = rng.uniform(0.1, 1.0, size=N).astype(np.float32)
    return SB(columns)


def build(tmp_path, algorithm, training, hidden_sizes=(8, 6), backend="torch"):
    base = {"optimizer": "sgd", "lr": 0.05, "grad_clip": None, "train_batch_size": N, "learning_starts": 0}
    config = resolve(
        tmp_path,
        algorithm,
        {**base, **training},
        {"activation": "relu", "hidden_sizes": list(hidden_sizes)},
        env="Pendulum-v1",
    )
    policy = make_policy(config, backend, PENDULUM_OBS, PENDULUM_ACT)
    weights = random_weights(policy.get_weights(), seed=1, gain=1.5)
    if "log_alpha" in weights:
        weights["log_alpha"] = np.array([np.log(training.get("initial_alpha", 0.7))], np.float32)
    policy.set_weights(weights)
    # Targets that differ from the online networks.
    policy.set_target_weights(random_weights(policy.get_target_weights(), seed=2, gain=1.5))
    return policy


def check_step(policy, batch, reference, tau):
    """One learn_on_batch against ``reference(weights, target, noise...)``; returns the stats."""
    training = policy.config.training
    weights, target = policy.get_weights(), policy.get_target_weights()
    stats, update = sgd_step(policy, batch)
    _, expected, td = reference(weights, target)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    np.testing.assert_allclose(policy.td_errors, td, rtol=1e-4, atol=1e-5, err_msg="td_errors")
    grads = grouped_gradient(lambda w: reference(w, target)[0], weights)
    scale = 1.0
    if training.grad_clip is not None:
        assert global_norm(grads) > training.grad_clip  # the clip is active
        scale = training.grad_clip / (global_norm(grads) + 1e-6)
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    for name, grad in grads.items():
        np.testing.assert_allclose(
            update[name] / training.lr, scale * grad, rtol=2e-3, atol=2e-5, err_msg=f"gradient of {name}"
        )
    # The targets moved towards the new online weights by tau (or not at all).
    after, new_target = policy.get_weights(), policy.get_target_weights()
    for name, value in new_target.items():
        expected_target = (1 - tau) * target[name].astype(np.float64) + tau * after[name]
        np.testing.assert_allclose(value, expected_target, rtol=1e-5, atol=1e-6, err_msg=f"target {name}")
    return stats


# ----------------------------------------------------------------------------- SAC

SAC_CASES = {
    "tuned-alpha": {},
    "fixed-alpha": {"tune_alpha": False, "initial_alpha": 0.3},
    "target-entropy": {"target_entropy": 0.5, "initial_alpha": 1.3},
    "importance-weights": {"prioritized_replay": True},
    "grad-clip-active": {"grad_clip": 0.5},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(SAC_CASES))
def test_sac_losses_td_errors_and_update_match_the_numpy_reference(tmp_path, case, backend):
    training = {"tau": 0.1, **SAC_CASES[case]}
    policy = build(tmp_path, "sac", training, backend=backend)
    batch = transitions(weights=training.get("prioritized_replay", False), actions_at_bounds=True)
    config = policy.config.training

    def reference(weights, target):
        noise, next_noise = (t.numpy() for t in policy.last_noise)
        return sac_reference(weights, target, batch, config, noise, next_noise)

    log_alpha = policy.get_weights()["log_alpha"].copy()
    stats = check_step(policy, batch, reference, tau=0.1)
    if not config.tune_alpha:
        assert policy.get_weights()["log_alpha"] == log_alpha  # a fixed alpha stays fixed
        assert stats["alpha"] == pytest.approx(0.3)
    else:
        assert policy.get_weights()["log_alpha"] != log_alpha


def test_sac_log_prob_correction_is_the_change_of_variables_of_tanh():
    """The reference's log-probability integrates to 1 over [-1, 1] (1 action dimension): the tanh
    correction is what makes it a density of the squashed action."""
    weights = {
        "policy/output/kernel": np.zeros((3, 2)),
        "policy/output/bias": np.array([0.4, np.log(0.8)]),
    }
    u = np.linspace(-8, 8, 200_001)[:, None]
    mean, std = 0.4, 0.8
    actions, logp = squashed_gaussian(weights, np.zeros((len(u), 3)), (u - mean) / std)
    density = np.exp(logp)
    assert np.trapezoid(density, actions[:, 0]) == pytest.approx(1.0, abs=1e-3)


# ----------------------------------------------------------------------------- TD3 and DDPG

TD3_CASES = {
    # name: (algorithm, training)
    "ddpg": ("ddpg", {}),
    "td3": ("td3", {}),
    "td3-noise-clipped": ("td3", {"target_noise": 0.8, "target_noise_clip": 0.3}),
    "ddpg-twin-importance-weights": ("ddpg", {"twin_q": True, "prioritized_replay": True}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(TD3_CASES))
def test_td3_ddpg_losses_td_errors_and_update_match_the_numpy_reference(tmp_path, case, backend):
    algorithm, training = TD3_CASES[case]
    policy = build(tmp_path, algorithm, {"tau": 0.1, **training}, backend=backend)
    config = policy.config.training
    batch = transitions(weights=config.prioritized_replay)
    for step in range(config.policy_delay + 1):
        update_actor = (step + 1) % config.policy_delay == 0

        def reference(weights, target, update_actor=update_actor):
            noise = None if policy.last_noise is None else policy.last_noise.numpy()
            return td3_reference(weights, target, batch, config, noise, update_actor)

        before = policy.get_weights()
        stats = check_step(policy, batch, reference, tau=0.1 if update_actor else 0.0)
        actor_moved = any(
            not np.array_equal(before[n], w)
            for n, w in policy.get_weights().items()
            if n.startswith("policy/")
        )
        assert actor_moved == update_actor, step  # TD3 delays the actor (and the targets)
        assert ("actor_loss" in stats) == update_actor
    if config.target_noise > 0:  # the smoothing noise was drawn
        assert policy.last_noise.shape == (N, 1)
    if case == "td3-noise-clipped":  # the clip was exercised: some draws were beyond it
        smoothing = np.abs(config.target_noise * policy.last_noise.numpy())
        assert (smoothing > config.target_noise_clip).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_td3_target_takes_the_smaller_critic_row_by_row_and_ddpg_has_one_critic(tmp_path, backend):
    ddpg = build(tmp_path / "ddpg", "ddpg", {}, backend=backend)
    assert ddpg.get_weights()["q/output/kernel"].shape[0] == 1
    td3 = build(tmp_path / "td3", "td3", {"policy_delay": 1, "tau": 0.1}, backend=backend)
    assert td3.get_weights()["q/output/kernel"].shape[0] == 2
    batch = transitions()
    # Shift the second target critic so that each critic is the smaller one on about half the rows.
    target = td3.get_target_weights()
    next_actions = np.tanh(actor_output(target, batch[NEXT_OBS]))
    values = critic_values(target, batch[NEXT_OBS], next_actions)
    target["q/output/bias"][1] += np.median(values[0] - values[1])
    td3.set_target_weights(target)
    values = critic_values(td3.get_target_weights(), batch[NEXT_OBS], next_actions)
    assert (values[0] < values[1]).sum() >= 4 and (values[0] > values[1]).sum() >= 4

    def reference(weights, target):
        return td3_reference(weights, target, batch, td3.config.training, td3.last_noise.numpy(), True)

    check_step(td3, batch, reference, tau=0.1)


def fragment_with_both_episode_ends(seed=0):
    """``[T+1=6, B=2]``: env 0 terminates at t=3; env 1 is truncated at t=3 (discount 1)."""
    rng = np.random.default_rng(seed)
    step_types = np.array(
        [[FIRST, FIRST], [MID, MID], [MID, MID], [LAST, LAST], [FIRST, FIRST], [MID, MID]], dtype=np.int32
    )
    discounts = np.ones((6, 2), dtype=np.float32)
    discounts[3, 0] = 0.0  # terminated; env 1's LAST keeps discount 1 (truncated by a time limit)
    rewards = rng.normal(size=(6, 2)).astype(np.float32)
    rewards[step_types == FIRST] = 0.0
    return SB(
        {
            SB.OBS: rng.normal(size=(6, 2, 3)).astype(np.float32),
            SB.ACTIONS: rng.uniform(-2, 2, size=(6, 2, 1)).astype(np.float32),
            SB.REWARDS: rewards,
            SB.DISCOUNTS: discounts,
            SB.STEP_TYPES: step_types,
        }
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_ddpg_critic_target_bootstraps_a_truncated_last_and_not_a_terminated_one(tmp_path, backend):
    gamma = 0.9
    policy = build(tmp_path, "ddpg", {"gamma": gamma, "tau": 0.1}, backend=backend)
    fragment = fragment_with_both_episode_ends()
    rows = DDPG.postprocess(fragment, policy, policy.config)
    weights, target = policy.get_weights(), policy.get_target_weights()

    def next_value(obs):
        return critic_values(target, obs[None], np.tanh(actor_output(target, obs[None])))[0, 0]

    # Written from the raw fragment: the rows of t = 2 lead into the LAST steps at t = 3.
    obs, rewards = fragment[SB.OBS], fragment[SB.REWARDS].astype(np.float64)
    terminated = rewards[3, 0]  # no bootstrap
    truncated = rewards[3, 1] + gamma * next_value(obs[3, 1])
    assert abs(truncated - terminated) > 1e-3
    expected = {}
    for t in range(5):
        for b in range(2):
            if fragment[SB.STEP_TYPES][t, b] == LAST:
                continue
            if t == 2:
                expected[(t, b)] = terminated if b == 0 else truncated
            else:
                expected[(t, b)] = rewards[t + 1, b] + gamma * next_value(obs[t + 1, b])
    expected_targets = np.array([expected[key] for key in sorted(expected)])  # time-major row order
    batch = SB({k: rows[k] for k in (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS)})
    q_taken = critic_values(weights, batch[SB.OBS], scaled(batch[SB.ACTIONS]))[0]
    policy.learn_on_batch(batch)
    np.testing.assert_allclose(policy.td_errors, np.abs(q_taken - expected_targets), rtol=1e-4, atol=1e-5)

    def reference(weights, target):
        return td3_reference(weights, target, batch, policy.config.training, None, True)

    fresh = build(tmp_path / "again", "ddpg", {"gamma": gamma, "tau": 0.1}, backend=backend)
    check_step(fresh, batch, reference, tau=0.1)  # and learns from those rows as the reference says
