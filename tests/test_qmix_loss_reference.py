"""qmix's and vdn's networks, acting and loss against independent float64 numpy references, on both backends.

- The agent network (``fc -> ReLU -> GRUCell -> fc``, torch's GRU gate order) unrolled over
  each episode from zeros, on inputs built here from the team observation (its column layout read
  off the space: padding columns dropped), the previous action one-hot and the agent's index.
- Acting: the greedy action among the allowed ones at every step of an episode, the GRU state
  carried between the calls by the caller (as the sampler does).
- The mixers: VDN's sum and QMIX's hypernetwork mixer (one- and two-layer hypernetworks).
- The loss: double-Q targets (the online network's best allowed action per agent, valued by the
  target network) and plain ones (the target network's max over allowed actions), absent agents
  adding nothing, unfilled steps not counted, terminal and truncated discounts; the loss statistics
  and one plain-SGD update of every weight (``lr x`` the finite-difference gradient of the reference,
  clipped to ``grad_clip`` where set).
- ``bootstrap_truncated: false``: discount 0 on each episode's last transition (the reference sets it
  per episode from its filled length).
- ``standardise_rewards``: the loss on ``(r - mean) / sqrt(var + 1e-8)`` of the filled rewards seen so
  far (numpy's mean and variance over every minibatch's filled rewards), and the statistics restored
  exactly from a checkpoint.
- Monotonicity: dQ_tot/dQ_a >= 0 for random states and weights, for the reference mixer and both
  backends' mixers; a planted variant without the absolute values fails the same check.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, MultiDiscrete
from rlgear.timestep import TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import assert_update_is_sgd_on as assert_sgd
from tests.numpy_reference import dense, finite_difference_gradient, global_norm, random_weights, sgd_step

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

N_AGENTS, OBS_DIM, STATE_DIM, ACTIONS = 2, 3, 4, 3
MAX_LEN = 6  # the rows hold 7 steps; the longest episode below has 4 transitions (trimmed to 5 steps)
LENGTHS = (4, 2, 3, 1)  # transitions per episode
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5


def team_space() -> Box:
    """The team observation: agent rows ``[flag, obs (3), pad]``, state row ``[pad, state (4)]``."""
    width = 1 + max(OBS_DIM, STATE_DIM)
    low, high = np.zeros((N_AGENTS + 1, width)), np.zeros((N_AGENTS + 1, width))
    high[:N_AGENTS, 0] = 1.0
    low[:N_AGENTS, 1 : 1 + OBS_DIM], high[:N_AGENTS, 1 : 1 + OBS_DIM] = -np.inf, np.inf
    low[N_AGENTS, 1 : 1 + STATE_DIM], high[N_AGENTS, 1 : 1 + STATE_DIM] = -np.inf, np.inf
    return Box(low.astype(np.float32), high.astype(np.float32))


def make_policy(backend: str, algorithm: str, training: dict | None = None):
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 3,
        "env": {"adapter": "vector", "name": "tests.qmix_envs:make_two_step"},
        "workers": {"batch_mode": "complete_episodes"},
        "training": {
            "optimizer": "sgd", "optimizer_kwargs": {}, "lr": 0.5, "grad_clip": None, "gamma": 0.9,
            "rnn_hidden_dim": 4, "mixing_embed_dim": 3, "hypernet_embed": 4, "max_episode_len": MAX_LEN,
            **(training or {}),
        },
        "logging": {"tensorboard": False, "progress": "none"},
    }  # fmt: skip
    trainer_cls = registry.load_algorithm(algorithm)
    resolved = config_mod.resolve(raw, training_class=trainer_cls.config_class)
    policy = trainer_cls.policy_class(backend)(team_space(), MultiDiscrete([ACTIONS] * N_AGENTS), resolved)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))  # the target networks follow
    return policy


# --- the reference ------------------------------------------------------------------------
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru_agent(w, inputs: np.ndarray) -> np.ndarray:
    """Q-values ``[B, L, n, k]`` of inputs ``[B, L, n, in]``, the GRU from zeros (torch's GRUCell)."""
    x = np.maximum(dense(w, "agent/fc", inputs), 0.0)
    hidden_size = w["agent/gru/recurrent_kernel"].shape[0]
    h = np.zeros((*inputs.shape[:1], *inputs.shape[2:-1], hidden_size))
    out = []
    for t in range(inputs.shape[1]):
        gi = dense(w, "agent/gru", x[:, t])
        gh = h @ np.asarray(w["agent/gru/recurrent_kernel"], np.float64) + w["agent/gru/recurrent_bias"]
        r = sigmoid(gi[..., :hidden_size] + gh[..., :hidden_size])
        z = sigmoid(gi[..., hidden_size : 2 * hidden_size] + gh[..., hidden_size : 2 * hidden_size])
        n = np.tanh(gi[..., 2 * hidden_size :] + r * gh[..., 2 * hidden_size :])
        h = (1 - z) * n + z * h
        out.append(dense(w, "agent/output", h))
    return np.stack(out, axis=1)


def hypernet(w, prefix: str, s: np.ndarray) -> np.ndarray:
    if f"{prefix}/hidden/kernel" in w:
        s = np.maximum(dense(w, f"{prefix}/hidden", s), 0.0)
    return dense(w, f"{prefix}/output", s)


def qmix_mixer(w, q: np.ndarray, s: np.ndarray, absolute=np.abs) -> np.ndarray:
    """Rashid et al. 2018, eq. in Sec. 4: ``elu(q @ |W1| + b1) @ |W2| + V(s)``."""
    embed = w["mixer/hyper_b1/bias"].shape[0]
    w1 = absolute(hypernet(w, "mixer/hyper_w1", s)).reshape(*s.shape[:-1], q.shape[-1], embed)
    pre = np.einsum("...a,...ae->...e", q, w1) + dense(w, "mixer/hyper_b1", s)
    hidden = np.where(pre > 0, pre, np.expm1(np.minimum(pre, 0.0)))
    w2 = absolute(hypernet(w, "mixer/hyper_w2", s))
    return (hidden * w2).sum(-1) + hypernet(w, "mixer/value", s)[..., 0]


def mix(w, q, s):
    return q.sum(-1) if "mixer/hyper_b1/bias" not in w else qmix_mixer(w, q, s)


def inputs_of(batch: dict, training) -> np.ndarray:
    obs = batch["ep_obs"].astype(np.float64)
    parts = [obs[:, :, :N_AGENTS, 1 : 1 + OBS_DIM]]
    if training.obs_last_action:
        one_hot = np.eye(ACTIONS)[batch["ep_actions"]]
        parts.append(np.concatenate([np.zeros_like(one_hot[:, :1]), one_hot[:, :-1]], axis=1))
    if training.obs_agent_id:
        parts.append(np.broadcast_to(np.eye(N_AGENTS), (*obs.shape[:2], N_AGENTS, N_AGENTS)))
    return np.concatenate(parts, axis=-1)


def loss_reference(w, target_w, batch: dict, training) -> tuple[float, dict]:
    if not training.bootstrap_truncated:  # every episode's return ends at its last transition
        discounts = batch["ep_discounts"].copy()
        for row, steps in enumerate(batch["ep_filled"].sum(axis=1).astype(int)):
            discounts[row, steps - 1] = 0.0
        batch = {**batch, "ep_discounts": discounts}
    obs = batch["ep_obs"].astype(np.float64)
    present = obs[:, :, :N_AGENTS, 0]
    state = obs[:, :, N_AGENTS, 1 : 1 + STATE_DIM]
    allowed = batch["ep_action_mask"].astype(bool)
    inputs = inputs_of(batch, training)
    q, target_q = gru_agent(w, inputs), gru_agent(target_w, inputs)
    if training.double_q:
        best = np.where(allowed[:, 1:], q[:, 1:], -np.inf).argmax(-1)
        q_next = np.take_along_axis(target_q[:, 1:], best[..., None], -1)[..., 0]
    else:
        q_next = np.where(allowed[:, 1:], target_q[:, 1:], -np.inf).max(-1)
    targets = batch["ep_rewards"][:, :-1] + training.gamma * batch["ep_discounts"][:, :-1] * mix(
        target_w, q_next * present[:, 1:], state[:, 1:]
    )
    q_taken = np.take_along_axis(q[:, :-1], batch["ep_actions"][:, :-1, :, None], -1)[..., 0]
    q_tot = mix(w, q_taken * present[:, :-1], state[:, :-1])
    filled = batch["ep_filled"][:, :-1].astype(np.float64)
    td = (q_tot - targets) * filled
    count = filled.sum()
    loss = float((td**2).sum() / count)
    return loss, {
        "mean_q_tot": (q_tot * filled).sum() / count,
        "mean_target": (targets * filled).sum() / count,
        "mean_td_error": np.abs(td).sum() / count,
        "total_loss": loss,
    }


def episode_batch(seed: int = 0) -> dict:
    """Four padded episodes with absent agents, action masks, a terminal and a truncated end."""
    rng = np.random.default_rng(seed)
    rows, length = len(LENGTHS), MAX_LEN + 1
    obs = np.zeros((rows, length, N_AGENTS + 1, 1 + STATE_DIM), np.float32)
    present = (rng.random((rows, length, N_AGENTS)) < 0.75).astype(np.float32)
    present[:, 0] = 1.0
    obs[:, :, :N_AGENTS, 0] = present
    obs[:, :, :N_AGENTS, 1 : 1 + OBS_DIM] = (
        rng.normal(size=(rows, length, N_AGENTS, OBS_DIM)) * present[..., None]
    )
    obs[:, :, N_AGENTS, 1 : 1 + STATE_DIM] = rng.normal(size=(rows, length, STATE_DIM))
    mask = rng.random((rows, length, N_AGENTS, ACTIONS)) < 0.6
    mask[..., 0] |= ~mask.any(-1)  # at least one allowed action
    filled = np.zeros((rows, length), np.float32)
    discounts = np.zeros((rows, length), np.float32)
    for i, steps in enumerate(LENGTHS):
        filled[i, :steps] = 1.0
        discounts[i, :steps] = 1.0
        if i % 2 == 0:
            discounts[i, steps - 1] = 0.0  # terminated; odd episodes were truncated (bootstrap)
        obs[i, steps + 1 :] = 0.0
        mask[i, steps + 1 :] = True
    return {
        "ep_obs": obs,
        "ep_actions": rng.integers(ACTIONS, size=(rows, length, N_AGENTS)).astype(np.int64),
        "ep_action_mask": mask,
        "ep_rewards": (rng.normal(size=(rows, length)) * filled).astype(np.float32),
        "ep_discounts": discounts,
        "ep_filled": filled,
    }


def trimmed(batch: dict) -> dict:
    steps = max(LENGTHS) + 1
    return {k: v[:, :steps] for k, v in batch.items()}


CASES = {
    "qmix": ("qmix", {}),
    "qmix-plain-q": ("qmix", {"double_q": False}),
    "qmix-one-layer-hypernets": ("qmix", {"hypernet_layers": 1}),
    "qmix-no-last-action-no-id": ("qmix", {"obs_last_action": False, "obs_agent_id": False}),
    "qmix-grad-clip": ("qmix", {"grad_clip": 0.5}),
    "qmix-time-limits-end-the-return": ("qmix", {"bootstrap_truncated": False}),
    "vdn": ("vdn", {}),
    "vdn-plain-q": ("vdn", {"double_q": False}),
    "vdn-time-limits-end-the-return": ("vdn", {"bootstrap_truncated": False}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_stats_and_sgd_update_match_the_reference(backend, case):
    algorithm, training = CASES[case]
    policy = make_policy(backend, algorithm, training)
    batch = episode_batch()
    weights = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    reference_batch = trimmed(batch)
    _, expected = loss_reference(weights, weights, reference_batch, policy.config.training)
    grads = finite_difference_gradient(
        lambda w: loss_reference(w, weights, reference_batch, policy.config.training)[0], weights
    )
    stats, update = sgd_step(policy, SB(batch))
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    training = policy.config.training
    if training.grad_clip is not None:
        assert global_norm(grads) > training.grad_clip  # the case clips
    assert_sgd(update, grads, training.lr, training.grad_clip)
    if algorithm == "qmix":
        assert any(np.abs(grads[k]).max() > 0 for k in grads if k.startswith("mixer/"))
    else:
        assert not any(k.startswith("mixer/") for k in weights)


def test_double_q_and_plain_targets_differ_on_this_batch():
    """The cases above tell the two target rules apart: the same weights give different losses."""
    weights = {k: v.astype(np.float64) for k, v in make_policy("torch", "qmix").get_weights().items()}
    target = random_weights(weights, seed=9, gain=1.5)  # a target network apart from the online one
    batch = trimmed(episode_batch())
    double = make_policy("torch", "qmix").config.training
    plain = make_policy("torch", "qmix", {"double_q": False}).config.training
    assert loss_reference(weights, target, batch, double)[0] != pytest.approx(
        loss_reference(weights, target, batch, plain)[0], rel=1e-3
    )


def offset_rewards(batch: dict, scale: float, offset: float) -> dict:
    """The batch with rewards ``scale * r + offset`` on its filled steps: far from mean 0 and std 1, so
    standardising them changes the loss."""
    filled = batch["ep_filled"]
    return {**batch, "ep_rewards": ((batch["ep_rewards"] * scale + offset) * filled).astype(np.float32)}


def standardised(batch: dict, seen: np.ndarray) -> dict:
    """The reference: the filled rewards standardised by the mean and variance of ``seen``."""
    filled = batch["ep_filled"] > 0
    rewards = batch["ep_rewards"].astype(np.float64)
    scaled = np.where(filled, (rewards - seen.mean()) / np.sqrt(seen.var() + 1e-8), 0.0)
    return {**batch, "ep_rewards": scaled}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["qmix", "vdn"])
def test_standardised_rewards_match_the_reference_and_survive_a_checkpoint(backend, algorithm):
    policy = make_policy(backend, algorithm, {"standardise_rewards": True})
    training = policy.config.training
    weights = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    batch = offset_rewards(episode_batch(), scale=4.0, offset=-3.0)
    seen = batch["ep_rewards"][batch["ep_filled"] > 0].astype(np.float64)
    reference_batch = standardised(trimmed(batch), seen)
    _, expected = loss_reference(weights, weights, reference_batch, training)
    unscaled_loss, _ = loss_reference(weights, weights, trimmed(batch), training)
    assert unscaled_loss != pytest.approx(expected["total_loss"], rel=1e-2)  # the option matters here
    grads = finite_difference_gradient(
        lambda w: loss_reference(w, weights, reference_batch, training)[0], weights
    )
    stats, update = sgd_step(policy, SB(batch))
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["reward_mean"] == pytest.approx(seen.mean(), rel=1e-9)
    assert stats["reward_std"] == pytest.approx(seen.std(), rel=1e-9)
    assert_sgd(update, grads, training.lr, training.grad_clip)

    # a second minibatch: the statistics are those of every filled reward seen so far
    second = offset_rewards(episode_batch(1), scale=2.0, offset=5.0)
    seen = np.concatenate([seen, second["ep_rewards"][second["ep_filled"] > 0]])
    policy.learn_on_batch(SB(second))
    assert policy.reward_stats.count == seen.size
    assert float(policy.reward_stats.mean) == pytest.approx(seen.mean(), rel=1e-9)
    assert float(policy.reward_stats.var) == pytest.approx(seen.var(), rel=1e-9)

    # a checkpoint restores them exactly: the restored policy's next step is the original's
    restored = make_policy(backend, algorithm, {"standardise_rewards": True})
    restored.set_state(policy.get_state())
    assert restored.reward_stats.count == policy.reward_stats.count
    assert float(restored.reward_stats.m2) == float(policy.reward_stats.m2)
    third = offset_rewards(episode_batch(2), scale=3.0, offset=1.0)
    expected_stats = policy.learn_on_batch(SB(third))
    restored_stats = restored.learn_on_batch(SB(third))
    assert restored_stats["total_loss"] == pytest.approx(expected_stats["total_loss"], rel=1e-6)
    assert restored_stats["reward_mean"] == expected_stats["reward_mean"]


def test_time_limit_ends_and_bootstrapped_ones_differ_on_this_batch():
    """The batch's odd episodes were truncated (discount 1 at their end): with bootstrap_truncated
    false their last targets lose the bootstrapped value, so the losses differ."""
    weights = {k: v.astype(np.float64) for k, v in make_policy("torch", "qmix").get_weights().items()}
    batch = trimmed(episode_batch())
    assert batch["ep_discounts"][1, LENGTHS[1] - 1] == 1.0  # truncated
    bootstrapped = make_policy("torch", "qmix").config.training
    ended = make_policy("torch", "qmix", {"bootstrap_truncated": False}).config.training
    assert loss_reference(weights, weights, batch, bootstrapped)[0] != pytest.approx(
        loss_reference(weights, weights, batch, ended)[0], rel=1e-3
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_target_network_values_the_targets_and_is_copied_on_update(backend):
    """With a target network apart from the online one, the loss uses it; update_target copies."""
    policy = make_policy(backend, "qmix")
    weights = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    target = random_weights(weights, seed=9, gain=1.5)
    policy.set_target_weights({k: v.astype(np.float32) for k, v in target.items()})
    batch = episode_batch(1)
    _, expected = loss_reference(weights, target, trimmed(batch), policy.config.training)
    stats, _ = sgd_step(policy, SB(batch))
    assert stats["total_loss"] == pytest.approx(expected["total_loss"], rel=STAT_RTOL)
    policy.update_target(1.0)
    for name, value in policy.get_target_weights().items():
        np.testing.assert_array_equal(value, policy.get_weights()[name])


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_acting_and_gru_state_match_the_reference(backend):
    policy = make_policy(backend, "qmix")
    weights = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    batch = episode_batch(2)
    episode = {k: v[:1, : LENGTHS[0] + 1] for k, v in batch.items()}
    q = gru_agent(weights, inputs_of(episode, policy.config.training))[0]  # [L, n, k]
    state = policy.get_initial_state(1)
    for t in range(LENGTHS[0] + 1):
        allowed = episode["ep_action_mask"][0, t]
        timestep = TimeStep(
            step_type=np.array([0 if t == 0 else 1], np.int32),
            reward=np.zeros(1, np.float32),
            discount=np.ones(1, np.float32),
            observation=episode["ep_obs"][:, t],
            prev_action=episode["ep_actions"][:, t - 1] if t else np.zeros((1, N_AGENTS), np.int64),
            env_id=np.zeros(1, np.int32),
            action_mask=allowed.reshape(1, -1),
        )
        actions, state, _ = policy.compute_actions(timestep, state, explore=False)
        np.testing.assert_array_equal(actions[0], np.where(allowed, q[t], -np.inf).argmax(-1))
    assert np.asarray(state[0]).shape == (1, N_AGENTS, 4)


# --- monotonicity ---------------------------------------------------------------------------
def min_mixer_slope(mix_fn, seed: int = 0, samples: int = 64, eps: float = 1e-4) -> float:
    """The smallest dQ_tot/dQ_a over random states, agent values and agents (central differences)."""
    rng = np.random.default_rng(seed)
    q = rng.normal(scale=3.0, size=(samples, N_AGENTS))
    s = rng.normal(scale=2.0, size=(samples, STATE_DIM))
    slopes = []
    for agent in range(N_AGENTS):
        step = np.zeros(N_AGENTS)
        step[agent] = eps
        slopes.append((mix_fn(q + step, s) - mix_fn(q - step, s)) / (2 * eps))
    return float(np.min(slopes))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("layers", [1, 2])
def test_the_reference_mixer_is_monotonic_and_a_planted_non_monotonic_one_is_caught(seed, layers):
    w = random_weights(
        make_policy("torch", "qmix", {"hypernet_layers": layers}).get_weights(), seed=seed, gain=2.0
    )
    assert min_mixer_slope(lambda q, s: qmix_mixer(w, q, s), seed) >= 0.0
    # the planted bug: without the absolute values the same check finds a negative slope
    assert min_mixer_slope(lambda q, s: qmix_mixer(w, q, s, absolute=lambda x: x), seed) < 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_backends_mixers_are_monotonic_and_equal_the_reference(backend):
    policy = make_policy(backend, "qmix")
    w = random_weights(policy.get_weights(), seed=5, gain=2.0)
    policy.set_weights(w)
    if backend == "torch":
        import torch

        def backend_mix(q, s):
            with torch.no_grad():
                return policy.model.mixer(
                    torch.tensor(q, dtype=torch.float64).float(), torch.tensor(s).float()
                ).numpy()
    else:
        from rlgear.plugins.backends.tf import tf

        def backend_mix(q, s):
            return policy.model.mixer(tf.constant(q, tf.float32), tf.constant(s, tf.float32)).numpy()

    rng = np.random.default_rng(7)
    q, s = rng.normal(size=(16, N_AGENTS)), rng.normal(size=(16, STATE_DIM))
    np.testing.assert_allclose(backend_mix(q, s), qmix_mixer(w, q, s), rtol=1e-4, atol=1e-5)
    assert min_mixer_slope(backend_mix, eps=1e-2) >= -1e-4  # float32 differences
