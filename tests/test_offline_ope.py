"""Off-policy estimates: each estimator against hand-written formulas, unbiasedness on-policy, accuracy
on a small MDP with known values, the target policy's probabilities, and the trainer's results."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rlgear.plugins.families.offline import ope
from rlgear.plugins.families.offline.fqe import FittedQEvaluation
from rlgear.plugins.families.offline.target_policy import TargetPolicy, discrete_log_probs
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType, TimeStep
from tests.offline_data import InMemoryData, record_cartpole, use_data

GAMMA = 0.9
# Two tiny episodes: rewards and per-step ratios pi_e / pi_b.
REWARDS = [np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0])]
RATIOS = [np.array([2.0, 0.5, 1.5]), np.array([0.25, 4.0])]


def test_trajectory_wise_is_and_wis_match_hand_computed_values():
    g1 = 1.0 + 0.9 * 2.0 + 0.81 * 3.0  # 5.23
    g2 = 0.5 - 0.9  # -0.4
    w1, w2 = 2.0 * 0.5 * 1.5, 0.25 * 4.0  # 1.5, 1.0
    assert ope.importance_sampling(REWARDS, RATIOS, GAMMA) == pytest.approx((w1 * g1 + w2 * g2) / 2)
    assert ope.weighted_importance_sampling(REWARDS, RATIOS, GAMMA) == pytest.approx(
        (w1 * g1 + w2 * g2) / (w1 + w2)
    )


def test_per_decision_is_and_wis_match_hand_computed_values():
    # cumulative ratios p_t: episode 1: 2, 1, 1.5; episode 2: 0.25, 1.
    v1 = 2.0 * 1.0 + 0.9 * 1.0 * 2.0 + 0.81 * 1.5 * 3.0
    v2 = 0.25 * 0.5 + 0.9 * 1.0 * -1.0
    assert ope.per_decision_importance_sampling(REWARDS, RATIOS, GAMMA) == pytest.approx((v1 + v2) / 2)
    # w_t: mean p_t over episodes longer than t: (2 + .25) / 2, (1 + 1) / 2, 1.5 / 1.
    w = [1.125, 1.0, 1.5]
    u1 = 2.0 / w[0] * 1.0 + 0.9 * 1.0 / w[1] * 2.0 + 0.81 * 1.5 / w[2] * 3.0
    u2 = 0.25 / w[0] * 0.5 + 0.9 * 1.0 / w[1] * -1.0
    assert ope.weighted_per_decision_importance_sampling(REWARDS, RATIOS, GAMMA) == pytest.approx(
        (u1 + u2) / 2
    )


def test_doubly_robust_matches_jiang_and_li_recursion_written_out():
    q = [np.array([1.0, 0.5, 2.0]), np.array([0.0, 1.0])]
    v = [np.array([0.8, 0.7, 1.9]), np.array([0.2, 0.6])]
    # Episode 1, from the end: V_3 = 0.
    v1_2 = 1.9 + 1.5 * (3.0 + 0.0 - 2.0)
    v1_1 = 0.7 + 0.5 * (2.0 + GAMMA * v1_2 - 0.5)
    v1_0 = 0.8 + 2.0 * (1.0 + GAMMA * v1_1 - 1.0)
    v2_1 = 0.6 + 4.0 * (-1.0 - 1.0)
    v2_0 = 0.2 + 0.25 * (0.5 + GAMMA * v2_1 - 0.0)
    assert ope.doubly_robust(REWARDS, RATIOS, q, v, GAMMA) == pytest.approx((v1_0 + v2_0) / 2)


def test_doubly_robust_with_a_perfect_model_and_no_reward_noise_is_the_model_value():
    # Q exact and deterministic rewards: every correction term is 0 whatever the ratios.
    rewards = [np.array([1.0, 1.0])]
    q = [np.array([1.0 + GAMMA * 1.0, 1.0])]
    v = [q[0].copy()]
    assert ope.doubly_robust(rewards, [np.array([3.0, 0.1])], q, v, GAMMA) == pytest.approx(1.9)


def test_on_policy_ratios_give_the_empirical_mean_return():
    rng = np.random.default_rng(3)
    rewards = [rng.normal(size=rng.integers(1, 20)) for _ in range(30)]
    ones = [np.ones(len(r)) for r in rewards]
    mean_return = np.mean([sum(GAMMA**t * x for t, x in enumerate(r)) for r in rewards])
    for estimator in ope.RATIO_ESTIMATORS.values():
        assert estimator(rewards, ones, GAMMA) == pytest.approx(mean_return)
    logp = [np.log(rng.uniform(0.1, 1.0, len(r))) for r in rewards]  # the same log-probabilities
    ratios = [ope.importance_ratios(lp, lp) for lp in logp]
    assert ope.importance_sampling(rewards, ratios, GAMMA) == pytest.approx(mean_return)


def test_wis_of_long_episodes_does_not_overflow():
    rewards = [np.ones(2000), np.zeros(2000)]
    ratios = [np.full(2000, 2.0), np.full(2000, 1.5)]  # products overflow float64
    assert ope.weighted_importance_sampling(rewards, ratios, 1.0) == pytest.approx(2000.0)


# --- a two-state MDP with known values -------------------------------------------------------
# The action picks the next state (s' = a); reward R[s, a]; after every step the episode
# terminates with probability P_END. Start state 0. Behaviour: uniform; target: PI_E.
R = np.array([[1.0, 0.0], [0.0, 3.0]])
P_END = 0.5
PI_B = np.array([[0.5, 0.5], [0.5, 0.5]])
PI_E = np.array([[0.2, 0.8], [0.2, 0.8]])


def true_value(pi: np.ndarray) -> float:
    """V(0) of policy ``pi``: ``V = r_pi + gamma (1 - P_END) P_pi V``, with ``P_pi[s, s'] = pi(s'|s)``."""
    values = np.linalg.solve(np.eye(2) - GAMMA * (1 - P_END) * pi, (pi * R).sum(axis=1))
    return float(values[0])


@pytest.fixture(scope="module")
def chain_episodes():
    """16000 behaviour episodes: (states [T + 1], actions [T], rewards [T])."""
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(16000):
        states, actions, rewards = [0], [], []
        while True:
            s = states[-1]
            a = int(rng.choice(2, p=PI_B[s]))
            actions.append(a)
            rewards.append(R[s, a])
            states.append(a)
            if rng.random() < P_END:
                break
        episodes.append((np.array(states), np.array(actions), np.array(rewards)))
    return episodes


def chain_fqe(episodes, hidden_sizes):
    onehot = np.eye(2)
    ends = [np.arange(len(a)) == len(a) - 1 for _, a, _ in episodes]
    return FittedQEvaluation(2, GAMMA, 150, hidden_sizes, seed=0).fit(
        np.concatenate([onehot[s[:-1]] for s, _, _ in episodes]),
        np.concatenate([a for _, a, _ in episodes]),
        np.concatenate([r for _, _, r in episodes]),
        np.concatenate([onehot[s[1:]] for s, _, _ in episodes]),
        np.concatenate(ends),
        np.concatenate([PI_E[s[1:]] for s, _, _ in episodes]),
    )


def test_estimates_of_another_policy_are_close_to_its_true_value(chain_episodes):
    target = true_value(PI_E)
    assert abs(target - true_value(PI_B)) > 0.4  # the estimators must move away from the data's policy
    rewards = [r for _, _, r in chain_episodes]
    ratios = [PI_E[s[:-1], a] / PI_B[s[:-1], a] for s, a, _ in chain_episodes]
    # Tolerances: about 3 standard errors at 16000 episodes (seeds 0-5 of this MDP; IS's spread is
    # the largest, about 0.06).
    assert ope.importance_sampling(rewards, ratios, GAMMA) == pytest.approx(target, abs=0.2)
    assert ope.weighted_importance_sampling(rewards, ratios, GAMMA) == pytest.approx(target, abs=0.2)
    assert ope.per_decision_importance_sampling(rewards, ratios, GAMMA) == pytest.approx(target, abs=0.12)
    assert ope.weighted_per_decision_importance_sampling(rewards, ratios, GAMMA) == pytest.approx(
        target, abs=0.12
    )
    fqe = chain_fqe(chain_episodes, [])
    assert fqe.state_values(np.eye(2)[[0]], PI_E[[0]])[0] == pytest.approx(target, abs=0.05)
    onehot = np.eye(2)
    q_taken = [fqe.q_values(onehot[s[:-1]])[np.arange(len(a)), a] for s, a, _ in chain_episodes]
    state_values = [fqe.state_values(onehot[s[:-1]], PI_E[s[:-1]]) for s, _, _ in chain_episodes]
    assert ope.doubly_robust(rewards, ratios, q_taken, state_values, GAMMA) == pytest.approx(target, abs=0.05)


def test_fqe_with_the_mlp_model_reaches_the_linear_models_values(chain_episodes):
    episodes = chain_episodes[:4000]  # the MLP's passes cost more than the least squares
    linear, mlp = chain_fqe(episodes, []), chain_fqe(episodes, [16])
    # Adam on minibatches of noisy targets (the termination is random): within 3%, not exactly.
    np.testing.assert_allclose(mlp.q_values(np.eye(2)), linear.q_values(np.eye(2)), rtol=0.03)


def test_fqe_solves_a_deterministic_chain_exactly():
    # s0 -a0-> s1 -a0-> end, rewards 1 then 2; the target policy always takes a0.
    fqe = FittedQEvaluation(2, 0.5, 3).fit(
        np.eye(2), np.array([0, 0]), np.array([1.0, 2.0]), np.eye(2)[[1, 0]], np.array([False, True]),
        np.array([[1.0, 0.0], [1.0, 0.0]]),
    )  # fmt: skip
    np.testing.assert_allclose(fqe.q_values(np.eye(2))[:, 0], [1.0 + 0.5 * 2.0, 2.0], atol=1e-4)


# --- the learner's probabilities ----------------------------------------------------------------
def test_discrete_log_probs_are_a_masked_log_softmax():
    logits = np.array([[1.0, 2.0, 3.0]])
    expected = np.log(np.exp([1.0, 3.0]) / np.exp([1.0, 3.0]).sum())
    out = discrete_log_probs(logits, np.array([[True, False, True]]))
    np.testing.assert_allclose(out[0, [0, 2]], expected)
    assert out[0, 1] == -np.inf


# --- the offline trainer's results ------------------------------------------------------------
def random_data(with_logp: bool) -> InMemoryData:
    data = record_cartpole(lambda obs, rng: int(rng.integers(2)), episodes=6, seed=1)
    if with_logp:  # the uniform policy's log-probability, as offline.output records it
        episodes = [
            dataclasses.replace(e, action_logp=np.full(len(e.actions), math.log(0.5), np.float32))
            for e in data._episodes
        ]
        data = InMemoryData(episodes, data.observation_space, data.action_space)
    return data


def trainer_for(tmp_path, monkeypatch, data, **training):
    from rlgear.discovery import registry

    use_data(monkeypatch, data)
    raw = {
        "algorithm": "bc",
        "seed": 5,
        "offline": {"input": "tests/in-memory-v0"},
        "training": {
            "num_gradient_steps_per_iteration": 2, "train_batch_size": 32, "ope_interval": 2,
            "ope_episodes": 4, "fqe_iterations": 20, **training,
        },
        "model": {"hidden_sizes": [16]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }  # fmt: skip
    return registry.load_algorithm("bc")(raw)


def test_trainer_reports_every_estimate_with_action_logp(tmp_path, monkeypatch):
    trainer = trainer_for(tmp_path, monkeypatch, random_data(with_logp=True))
    try:
        first, second = trainer.train(), trainer.train()
    finally:
        trainer.stop()
    assert not any(key.startswith("offline/ope/") for key in first)  # ope_interval: 2
    keys = {f"offline/ope/{m}" for m in ("is", "wis", "pdis", "pdwis", "dr", "fqe")}
    assert keys <= set(second) and all(np.isfinite(second[k]) for k in keys)
    # Rewards are 1 per step and gamma < 1: every estimate of the discounted return is below 1/(1-gamma).
    assert all(0 < second[k] < 1 / (1 - trainer.config.training.gamma) for k in keys - {"is", "pdis", "dr"})


def test_trainer_without_action_logp_warns_once_and_reports_fqe(tmp_path, monkeypatch):
    trainer = trainer_for(tmp_path, monkeypatch, random_data(with_logp=False), ope_interval=1)
    try:
        with pytest.warns(UserWarning, match="no action_logp") as caught:
            first = trainer.train()
        second = trainer.train()
    finally:
        trainer.stop()
    assert len([w for w in caught if "action_logp" in str(w.message)]) == 1
    for result in (first, second):
        assert [k for k in result if k.startswith("offline/ope/")] == ["offline/ope/fqe"]
        assert np.isfinite(result["offline/ope/fqe"])


def test_target_policy_gives_the_policy_own_log_probabilities(tmp_path, monkeypatch):
    trainer = trainer_for(tmp_path, monkeypatch, random_data(with_logp=True))
    try:
        policy = trainer.learner.policy
        obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
        timestep = TimeStep(
            step_type=np.full(8, StepType.MID, np.int32), reward=np.zeros(8, np.float32),
            discount=np.ones(8, np.float32), observation=obs, prev_action=np.zeros(8, np.float32),
            env_id=np.arange(8, dtype=np.int32),
        )  # fmt: skip
        actions, _, extras = policy.compute_actions(timestep, None, explore=True)
        target = TargetPolicy(policy, trainer.action_space)
        np.testing.assert_allclose(target.logp(obs, actions), extras[SB.ACTION_LOGP], atol=1e-5)
        np.testing.assert_allclose(np.exp(target.log_probs(obs)).sum(axis=1), 1.0, atol=1e-6)
    finally:
        trainer.stop()


def test_unknown_ope_method_names_the_key(tmp_path, monkeypatch):
    from rlgear.errors import ConfigError

    with pytest.raises(ConfigError, match=r"training\.ope_methods"):
        trainer_for(tmp_path, monkeypatch, random_data(with_logp=True), ope_methods=["is", "magic"])
