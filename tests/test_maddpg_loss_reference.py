"""MADDPG's and MATD3's losses against an independent float64 numpy reference, option by option.

The reference is written from Lowe et al. 2017 (MADDPG) with a shared team reward, from the
framework-neutral weights, on a team of ``n = 3`` agents with two-dimensional actions:

* the shared actor ``tanh(mu(o_a, onehot(a)))`` (``agent_id``; without it ``mu(o_a)``), one call per
  agent row;
* the centralised critics ``Q_k(s, a_1, ..., a_n)`` on the state row and the joint action in
  ``[-1, 1]`` (absent agents' actions zeroed), stacked ``[K, in, out]`` as DDPG's;
* the critic target ``r + discount min_k Q'_k(s', a'_1..a'_n)`` with ``a'_j = tanh(mu'(o'_j))``
  (plus TD3's clipped smoothing noise per agent and action component; zeros for an agent absent at
  s'), the critic loss ``0.5 sum_k mean((Q_k(s, a) - y)^2)`` (importance weights per row);
* the actor loss, written as a loop over agents: for each agent ``a``, the joint action with
  ``a``'s replayed action replaced by ``tanh(mu(o_a))`` and the others kept as replayed, ``-mean
  over rows and present agents of Q_1(s, that joint action)``, every ``policy_delay``-th step.

Each case takes one plain-SGD step on both backends and compares every statistic, the ``|TD
error|`` per row and the update of every weight with ``lr x`` the finite-difference gradient of the
loss that weight belongs to, then the Polyak update of the targets (``check_step``). A planted bug,
"DDPG on the joint action" (every agent's action replaced by the actor's at once), gives a
different actor gradient, which the reference tells apart from MADDPG's.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.agent_groups import team_layout
from rlgear.spaces import Box
from tests.conftest import BACKENDS
from tests.numpy_reference import make_policy, random_weights, resolve, sgd_step
from tests.test_offpolicy_loss_reference import (
    actor_output,
    check_step,
    critic_loss_and_td,
    critic_values,
    grouped_gradient,
)

N, AGENTS, OBS_DIM, STATE_DIM, ACTIONS = 20, 3, 2, 5, 2
WIDTH = 1 + max(OBS_DIM, STATE_DIM)
LOW = np.tile([-2.0, -1.0], (AGENTS, 1))  # each agent's action bounds [n, A] (A = 2)
HIGH = np.tile([2.0, 3.0], (AGENTS, 1))
#: Agents of different action widths, as agent grouping pads them: the last agent acts in one
#: dimension, its second column padding pinned to [0, 0] (and other bounds than the first agents').
UNEQUAL_LOW = np.array([[-2.0, -1.0], [-2.0, -1.0], [-0.5, 0.0]])
UNEQUAL_HIGH = np.array([[2.0, 3.0], [2.0, 3.0], [1.5, 0.0]])


def team_spaces(low_actions=LOW, high_actions=HIGH) -> tuple[Box, Box]:
    """A team observation ``[n + 1, W]`` as agent grouping makes it, and the team's Box ``[n, A]``."""
    low, high = np.zeros((AGENTS + 1, WIDTH)), np.zeros((AGENTS + 1, WIDTH))
    high[:AGENTS, 0] = 1.0
    low[:AGENTS, 1 : 1 + OBS_DIM], high[:AGENTS, 1 : 1 + OBS_DIM] = -np.inf, np.inf
    low[AGENTS, 1 : 1 + STATE_DIM], high[AGENTS, 1 : 1 + STATE_DIM] = -np.inf, np.inf
    return Box(low, high), Box(low_actions, high_actions)


def team_observations(rng: np.random.Generator) -> np.ndarray:
    obs = np.zeros((N, AGENTS + 1, WIDTH), np.float32)
    present = rng.random((N, AGENTS)) > 0.25
    present[:, 0] |= ~present.any(axis=1)  # every row has an agent (an empty row would be a LAST)
    obs[:, :AGENTS, 0] = present
    obs[:, :AGENTS, 1 : 1 + OBS_DIM] = rng.normal(size=(N, AGENTS, OBS_DIM)) * present[..., None]
    obs[:, AGENTS, 1 : 1 + STATE_DIM] = rng.normal(size=(N, STATE_DIM))
    return obs


def transitions(seed=0, weights=False, low=LOW, high=HIGH):
    rng = np.random.default_rng(seed)
    columns = {
        SB.OBS: team_observations(rng),
        SB.ACTIONS: rng.uniform(low, high, size=(N, AGENTS, ACTIONS)).astype(np.float32),
        SB.REWARDS: (3.0 * rng.normal(size=N)).astype(np.float32),
        NEXT_OBS: team_observations(rng),
        SB.DISCOUNTS: (0.97 * (rng.random(N) > 0.25)).astype(np.float32),  # gamma**k, 0 after a terminal
    }
    if weights:
        columns[WEIGHTS] = rng.uniform(0.1, 1.0, size=N).astype(np.float32)
    return SB(columns)


# ----------------------------------------------------------------------------- the reference


def split(obs, agent_id):
    """``(actor inputs [B, n, in], state [B, s], presence [B, n])``, written from the layout above."""
    obs = np.asarray(obs, np.float64)
    agents = obs[:, :AGENTS, 1 : 1 + OBS_DIM]
    if agent_id:
        agents = np.concatenate([agents, np.broadcast_to(np.eye(AGENTS), (len(obs), AGENTS, AGENTS))], -1)
    return agents, obs[:, AGENTS, 1 : 1 + STATE_DIM], obs[:, :AGENTS, 0]


def actor(weights, inputs, low=LOW, high=HIGH):
    """``[B, n, A]``: the shared actor on every agent's row, one agent at a time; an agent's padding
    columns (bounds ``[0, 0]``) are zeros."""
    out = np.stack([np.tanh(actor_output(weights, inputs[:, a])) for a in range(AGENTS)], axis=1)
    return out * (high > low)


def scaled(env_actions, low=LOW, high=HIGH):
    """Env actions in ``[-1, 1]``, padding columns zero."""
    own = high > low
    half = np.where(own, (high - low) / 2, 1.0)
    return np.where(own, (np.asarray(env_actions, np.float64) - low) / half - 1.0, 0.0)


def team_q(weights, state, joint):
    return critic_values(weights, state, joint.reshape(len(joint), -1))


def maddpg_actor_loss(weights, inputs, state, present, replayed, low=LOW, high=HIGH):
    """MADDPG: per agent, only its own action from the actor; the others' as replayed."""
    mu = actor(weights, inputs, low, high)
    total = 0.0
    for a in range(AGENTS):
        joint = replayed.copy()
        joint[:, a] = mu[:, a]
        total += (team_q(weights, state, joint)[0] * present[:, a]).sum()
    return -total / max(present.sum(), 1.0)


def joint_ddpg_actor_loss(weights, inputs, state, present, replayed, low=LOW, high=HIGH):
    """The planted bug: DDPG on the joint action, every agent's action replaced by the actor's at once."""
    joint = actor(weights, inputs) * present[..., None]
    return -team_q(weights, state, joint)[0].mean()


def maddpg_reference(
    weights, target, batch, training, noise, update_actor, actor_loss=maddpg_actor_loss, low=LOW, high=HIGH
):
    inputs, state, present = split(batch[SB.OBS], training.agent_id)
    next_inputs, next_state, next_present = split(batch[NEXT_OBS], training.agent_id)
    next_actions = actor(target, next_inputs, low, high)
    if training.target_noise > 0:
        clip = training.target_noise_clip
        smoothing = np.clip(training.target_noise * np.asarray(noise, np.float64), -clip, clip)
        next_actions = np.clip(next_actions + smoothing, -1.0, 1.0) * (high > low)  # padding stays 0
    next_actions = next_actions * next_present[..., None]
    next_q = team_q(target, next_state, next_actions).min(axis=0)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * next_q
    replayed = scaled(batch[SB.ACTIONS], low, high) * present[..., None]
    q_taken = team_q(weights, state, replayed)
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    losses = {"q/": critic_loss}
    stats = {
        "critic_loss": critic_loss,
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
    }
    if update_actor:
        losses["policy/"] = stats["actor_loss"] = actor_loss(
            weights, inputs, state, present, replayed, low, high
        )
    stats["total_loss"] = sum(losses.values())
    return losses, stats, td


# ----------------------------------------------------------------------------- the cases


def build(tmp_path, algorithm, training, backend, low=LOW, high=HIGH):
    base = {"optimizer": "sgd", "lr": 0.05, "grad_clip": None, "train_batch_size": N, "learning_starts": 0}
    config = resolve(
        tmp_path, algorithm, {**base, **training}, {"activation": "relu", "hidden_sizes": [8, 6]}, env="x"
    )
    policy = make_policy(config, backend, *team_spaces(low, high))
    policy.set_weights(random_weights(policy.get_weights(), seed=1, gain=1.5))
    policy.set_target_weights(random_weights(policy.get_target_weights(), seed=2, gain=1.5))
    return policy


CASES = {
    # name: (algorithm, training[, (low, high) of the team's actions])
    "maddpg": ("maddpg", {}),
    "maddpg-no-agent-id": ("maddpg", {"agent_id": False}),
    "matd3": ("matd3", {}),
    "matd3-noise-clipped": ("matd3", {"target_noise": 0.8, "target_noise_clip": 0.3}),
    "maddpg-twin-importance-weights": ("maddpg", {"twin_q": True, "prioritized_replay": True}),
    "maddpg-unequal-action-widths": ("maddpg", {}, (UNEQUAL_LOW, UNEQUAL_HIGH)),
    "matd3-unequal-action-widths": ("matd3", {"target_noise": 0.8}, (UNEQUAL_LOW, UNEQUAL_HIGH)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_maddpg_losses_td_errors_and_update_match_the_numpy_reference(tmp_path, case, backend):
    algorithm, training, (low, high) = (*CASES[case], (LOW, HIGH))[:3]
    policy = build(tmp_path, algorithm, {"tau": 0.1, **training}, backend, low, high)
    config = policy.config.training
    batch = transitions(weights=config.prioritized_replay, low=low, high=high)
    for step in range(config.policy_delay + 1):
        update_actor = (step + 1) % config.policy_delay == 0

        def reference(weights, target, update_actor=update_actor):
            noise = None if policy.last_noise is None else np.asarray(policy.last_noise)
            return maddpg_reference(weights, target, batch, config, noise, update_actor, low=low, high=high)

        before = policy.get_weights()
        stats = check_step(policy, batch, reference, tau=0.1 if update_actor else 0.0)
        actor_moved = any(
            not np.array_equal(before[n], w)
            for n, w in policy.get_weights().items()
            if n.startswith("policy/")
        )
        assert actor_moved == update_actor, step  # MATD3 delays the actor (and the targets)
        assert ("actor_loss" in stats) == update_actor
    if config.target_noise > 0:  # per agent and action component
        assert np.shape(policy.last_noise) == (N, AGENTS, ACTIONS)
    if case == "matd3-noise-clipped":  # the clip was exercised
        assert (np.abs(config.target_noise * np.asarray(policy.last_noise)) > config.target_noise_clip).any()
    expected_in = OBS_DIM + (AGENTS if config.agent_id else 0)
    assert policy.get_weights()["policy/hidden_0/kernel"].shape == (expected_in, 8)
    assert policy.get_weights()["q/hidden_0/kernel"].shape[1] == STATE_DIM + AGENTS * ACTIONS


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_reference_tells_maddpgs_actor_gradient_from_ddpg_on_the_joint_action(tmp_path, backend):
    """Planted bug: replacing every agent's action at once (single-agent DDPG on the joint action)
    gives another actor gradient; the policy's update matches MADDPG's and not that one."""
    policy = build(tmp_path, "maddpg", {"tau": 0.1}, backend)
    config = policy.config.training
    batch = transitions(seed=4)
    weights, target = policy.get_weights(), policy.get_target_weights()
    _, update = sgd_step(policy, batch)
    actor_weights = {n: w for n, w in weights.items() if n.startswith("policy/")}

    def gradient(actor_loss):
        losses = lambda w: maddpg_reference(w, target, batch, config, None, True, actor_loss)[0]  # noqa: E731
        return {n: g for n, g in grouped_gradient(losses, weights).items() if n in actor_weights}

    maddpg, joint = gradient(maddpg_actor_loss), gradient(joint_ddpg_actor_loss)
    applied = {n: update[n] / config.lr for n in actor_weights}
    difference = max(float(np.abs(maddpg[n] - joint[n]).max()) for n in actor_weights)
    scale = max(float(np.abs(maddpg[n]).max()) for n in actor_weights)
    assert difference > 0.05 * scale  # the bug is visible at the reference's precision
    for name in actor_weights:
        np.testing.assert_allclose(applied[name], maddpg[name], rtol=2e-3, atol=2e-5, err_msg=name)
    assert any(not np.allclose(applied[n], joint[n], rtol=2e-3, atol=2e-5) for n in actor_weights)


def test_the_reference_layout_is_what_agent_grouping_reads():
    """The hand-built team space reads as agent grouping's (so the reference's split is the policy's)."""
    layout = team_layout(team_spaces()[0])
    assert (layout.n_agents, layout.obs_dim, layout.state_dim) == (AGENTS, OBS_DIM, STATE_DIM)
