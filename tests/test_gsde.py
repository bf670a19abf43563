"""gSDE (Raffin et al. 2021) in ppo and sac (torch) against an explicit per-state Gaussian in float64 numpy.

The reference writes the distribution out from the neutral weights: ``z(s)`` the policy's last
hidden features, ``sigma = exp(policy/sde_log_std)`` (``[F, A]``, or ``[F, 1]`` broadcast; expln
with ``use_expln``), per state and action ``var_k(s) = sum_j z_j^2 sigma_jk^2 + 1e-6``, and

    log pi(a|s) = sum_k log N(a_k; mean_k(s), var_k(s)),   H(s) = sum_k 0.5 log(2 pi e var_k(s))

(SAC: of the pre-tanh action, minus the tanh correction; its sample ``u = mean + z^T (sigma * eps)``).
``z`` is detached in the policies (SB3's ``learn_features=False``), so the gradients are compared
with finite differences of the reference with ``z`` computed from the weights before the step.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.plugins.algorithms.sac import SAC
from rlgear.plugins.families.gsde import SDENoise
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from tests.conftest import BACKENDS, needs_tf, train_until_stop
from tests.numpy_reference import (
    PENDULUM_OBS,
    dense,
    finite_difference_gradient,
    make_policy,
    mlp_body,
    random_weights,
    resolve,
)
from tests.test_offpolicy import timestep_of
from tests.test_offpolicy_loss_reference import check_step, critic_loss_and_td, critic_values

torch = pytest.importorskip("torch")

N = 16
TWO_ACTIONS = Box(np.array([-2.0, -1.0]), np.array([2.0, 1.0]))


def sigma_of(weights, num_actions, use_expln):
    log_std = np.asarray(weights["policy/sde_log_std"], np.float64)
    if use_expln:
        sigma = np.where(log_std <= 0, np.exp(np.minimum(log_std, 0)), np.log1p(np.maximum(log_std, 0)) + 1)
    else:
        sigma = np.exp(log_std)
    return np.broadcast_to(sigma, (sigma.shape[0], num_actions))


def gaussian_logp(x, mean, var):
    return (-0.5 * (x - mean) ** 2 / var - 0.5 * np.log(2 * np.pi * var)).sum(axis=-1)


# ----------------------------------------------------------------------------- ppo


def ppo_policy(tmp_path, backend="torch", **training):
    config = resolve(
        tmp_path, "ppo", {"use_sde": True, **training}, {"hidden_sizes": [8, 6], "activation": "tanh"},
        env="Pendulum-v1",
    )  # fmt: skip
    policy = make_policy(config, backend, PENDULUM_OBS, TWO_ACTIONS)
    weights = random_weights(policy.get_weights(), seed=1, gain=1.5)
    weights["policy/sde_log_std"] = (
        np.random.default_rng(4).normal(-0.5, 0.6, np.shape(weights["policy/sde_log_std"])).astype(np.float32)
    )
    policy.set_weights(weights)
    return policy


def ppo_reference(weights, features_weights, obs, actions, use_expln):
    """``(log pi(a|s) [B], entropy [B])`` with ``z`` from ``features_weights`` (held fixed)."""
    z = mlp_body(features_weights, "policy", obs, "tanh")
    mean = dense(weights, "policy/output", mlp_body(weights, "policy", obs, "tanh"))
    var = (z**2) @ sigma_of(weights, mean.shape[1], use_expln) ** 2 + 1e-6
    return gaussian_logp(actions, mean, var), (0.5 * np.log(2 * np.pi * np.e * var)).sum(axis=-1)


def logp_entropy_and_gradients(policy, backend, obs, actions):
    """The policy's ``log pi``, entropy and the gradient of ``mean(log pi) + 0.3 mean(entropy)`` per
    neutral weight name, through its own model and distribution."""
    if backend == "torch":
        policy.model.zero_grad()
        dist = policy.dist_class(policy.model(torch.from_numpy(obs))[0])
        logp, entropy = dist.logp(torch.from_numpy(actions)), dist.entropy()
        (logp.mean() + 0.3 * entropy.mean()).backward()
        grads = {
            policy._weight_names[name]: policy.to_neutral_layout(name, param.grad.numpy())
            for name, param in policy.model.named_parameters()
            if param.grad is not None
        }
        return logp.detach().numpy(), entropy.detach().numpy(), grads
    import tensorflow as tf

    names = [name for name, _ in policy.named_variables]
    with tf.GradientTape() as tape:
        dist = policy.dist_class(policy.model(tf.constant(obs))[0])
        logp, entropy = dist.logp(tf.constant(actions)), dist.entropy()
        objective = tf.reduce_mean(logp) + 0.3 * tf.reduce_mean(entropy)
    grads = tape.gradient(objective, [v for _, v in policy.named_variables])
    return (
        logp.numpy(),
        entropy.numpy(),
        {n: g.numpy() for n, g in zip(names, grads, strict=True) if g is not None},
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "options", [{}, {"full_std": False}, {"use_expln": True}], ids=["full-std", "one-per-feature", "expln"]
)
def test_ppo_gsde_log_prob_and_entropy_values_and_gradients_match_the_per_state_gaussian(
    tmp_path, options, backend
):
    policy = ppo_policy(tmp_path, backend, **options)
    width = 2 if options.get("full_std", True) else 1
    assert policy.get_weights()["policy/sde_log_std"].shape == (6, width)
    assert "policy/log_std" not in policy.get_weights()
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(N, 3)).astype(np.float32)
    actions = rng.normal(size=(N, 2)).astype(np.float32)
    weights = {k: v for k, v in policy.get_weights().items() if k.startswith("policy/")}
    logp_ref, entropy_ref = ppo_reference(weights, weights, obs, actions, bool(options.get("use_expln")))

    logp, entropy, grads = logp_entropy_and_gradients(policy, backend, obs, actions)
    np.testing.assert_allclose(logp, logp_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(entropy, entropy_ref, rtol=1e-4, atol=1e-5)

    def objective(w):
        lp, ent = ppo_reference({**weights, **w}, weights, obs, actions, bool(options.get("use_expln")))
        return lp.mean() + 0.3 * ent.mean()

    expected = finite_difference_gradient(objective, weights)
    for name, value in expected.items():
        np.testing.assert_allclose(grads[name], value, rtol=2e-3, atol=2e-5, err_msg=name)
    assert np.abs(expected["policy/sde_log_std"]).max() > 1e-3  # the std's gradient was exercised


@needs_tf
def test_ppo_gsde_torch_weights_give_the_same_distribution_on_tf(tmp_path):
    torch_policy, tf_policy = ppo_policy(tmp_path / "t"), ppo_policy(tmp_path / "f", "tf")
    assert [name for name, _ in tf_policy.named_variables] == list(torch_policy._weight_names.values())
    tf_policy.set_weights(torch_policy.get_weights())
    rng = np.random.default_rng(5)
    obs, actions = rng.normal(size=(N, 3)).astype(np.float32), rng.normal(size=(N, 2)).astype(np.float32)
    torch_out, tf_out = (logp_entropy_and_gradients(p, b, obs, actions) for p, b in
                         ((torch_policy, "torch"), (tf_policy, "tf")))  # fmt: skip
    for a, b in zip(torch_out[:2], tf_out[:2], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for name, grad in torch_out[2].items():
        np.testing.assert_allclose(tf_out[2][name], grad, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ppo_gsde_actions_are_the_mean_plus_the_env_s_matrix_times_the_features(tmp_path, backend):
    policy = ppo_policy(tmp_path, backend, sde_sample_freq=3)
    obs = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    timestep = timestep_of(obs)
    actions, _, extras = policy.compute_actions(timestep, explore=True)
    weights = policy.get_weights()
    z = mlp_body(weights, "policy", obs, "tanh")
    mean = dense(weights, "policy/output", z)
    expected = mean + np.einsum("bf,bfa->ba", z, policy.sde_noise.matrices[:4])
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
    logp_ref, _ = ppo_reference(weights, weights, obs, actions.astype(np.float64), False)
    np.testing.assert_allclose(extras[SB.ACTION_LOGP], logp_ref, rtol=1e-4, atol=1e-4)
    greedy, _, _ = policy.compute_actions(timestep, explore=False)
    np.testing.assert_allclose(greedy, mean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ppo_gsde_noise_is_fixed_for_sde_sample_freq_steps_then_redrawn(tmp_path, backend):
    policy = ppo_policy(tmp_path, backend, sde_sample_freq=4)
    timestep = timestep_of(np.random.default_rng(1).normal(size=(3, 3)))
    steps = [policy.compute_actions(timestep, explore=True)[0] for _ in range(9)]
    for i in (1, 2, 3, 5, 6, 7):  # same observations, same matrices: same actions
        np.testing.assert_array_equal(steps[i], steps[i - 1])
    assert not np.allclose(steps[4], steps[3]) and not np.allclose(steps[8], steps[7])


def test_sde_noise_redraws_per_env_on_its_own_count_and_all_when_the_weights_change():
    noise = SDENoise(sample_freq=2, seed=0)
    sigma, z = np.full((3, 2), 0.5), np.ones((2, 3), np.float32)
    first = noise.noise(z, np.array([0, 1]), sigma, version=0)
    assert not np.allclose(first[0], first[1])  # independent matrices per env
    np.testing.assert_array_equal(noise.noise(z, np.array([0, 1]), sigma, 0), first)
    third = noise.noise(z, np.array([0, 1]), sigma, 0)
    assert not np.allclose(third, first)  # redrawn after 2 steps
    only_env_1 = noise.noise(z[:1], np.array([1]), sigma, 0)
    np.testing.assert_array_equal(only_env_1[0], third[1])  # env 1 has used its matrix once
    assert noise.noise(z[:1], np.array([0]), sigma, 0)[0] == pytest.approx(third[0])
    never = SDENoise(sample_freq=-1, seed=0)
    a = never.noise(z, np.array([0, 1]), sigma, version=5)
    for _ in range(20):  # -1: never on a count
        np.testing.assert_array_equal(never.noise(z, np.array([0, 1]), sigma, 5), a)
    assert not np.allclose(never.noise(z, np.array([0, 1]), sigma, 6), a)  # new weights: a new rollout
    draws = np.stack([SDENoise(-1, s).noise(z[:1], np.array([0]), sigma, 0)[0] for s in range(4000)])
    np.testing.assert_allclose(draws.std(axis=0), np.sqrt(3 * 0.25), rtol=0.05)  # sum_j z_j^2 sigma^2


@pytest.mark.parametrize(
    "algorithm",
    ["ppo", "sac", pytest.param("ppo-tf", marks=needs_tf), pytest.param("sac-tf", marks=needs_tf)],
)
def test_gsde_policy_state_round_trips_the_exploration_matrices(tmp_path, algorithm):
    def build(folder):
        if algorithm.startswith("ppo"):
            return ppo_policy(folder, "tf" if algorithm == "ppo-tf" else "torch", sde_sample_freq=5)
        return sac_policy(folder, backend="tf" if algorithm == "sac-tf" else "torch", sde_sample_freq=5)

    policy, fresh = build(tmp_path / "a"), build(tmp_path / "b")
    timestep = timestep_of(np.random.default_rng(1).normal(size=(3, 3)))
    for _ in range(2):
        policy.compute_actions(timestep, explore=True)
    state = policy.get_state()
    assert state.arrays["sde_matrices"].shape == (3, 6, 2)
    fresh.set_state(state)
    for _ in range(6):  # within the current matrices, then across a redraw
        np.testing.assert_array_equal(
            fresh.compute_actions(timestep, explore=True)[0],
            policy.compute_actions(timestep, explore=True)[0],
        )


# ----------------------------------------------------------------------------- sac


def sac_policy(tmp_path, backend="torch", **training):
    base = {"optimizer": "sgd", "lr": 0.05, "grad_clip": None, "train_batch_size": N, "learning_starts": 0,
            "use_sde": True, "tau": 0.1, "log_std_init": -1.0}  # fmt: skip
    config = resolve(tmp_path, "sac", {**base, **training}, {"hidden_sizes": [8, 6], "activation": "relu"},
                     env="Pendulum-v1")  # fmt: skip
    policy = make_policy(config, backend, PENDULUM_OBS, TWO_ACTIONS)
    assert type(policy).__name__ == f"SDESAC{'Torch' if backend == 'torch' else 'TF'}Policy"
    weights = random_weights(policy.get_weights(), seed=1, gain=1.5)
    weights["log_alpha"] = np.array([np.log(0.7)], np.float32)
    weights["policy/sde_log_std"] = (
        np.random.default_rng(4).normal(-0.8, 0.4, np.shape(weights["policy/sde_log_std"])).astype(np.float32)
    )
    policy.set_weights(weights)
    policy.set_target_weights(random_weights(policy.get_target_weights(), seed=2, gain=1.5))
    return policy


def sde_squashed(weights, features_weights, obs, eps, use_expln):
    obs = np.asarray(obs, np.float64)
    z = mlp_body(features_weights, "policy", obs, "relu")
    mean = dense(weights, "policy/output", mlp_body(weights, "policy", obs, "relu"))
    sigma = sigma_of(weights, mean.shape[1], use_expln)
    u = mean + z @ (sigma * eps)
    var = (z**2) @ sigma**2 + 1e-6
    return np.tanh(u), gaussian_logp(u, mean, var) - np.log(1 - np.tanh(u) ** 2).sum(axis=-1)


def sac_sde_reference(weights, features_weights, target, batch, training, eps):
    log_alpha = float(np.asarray(weights["log_alpha"], np.float64)[0])
    alpha, use_expln = np.exp(log_alpha), bool(training.use_expln)
    next_actions, next_logp = sde_squashed(weights, features_weights, batch[NEXT_OBS], eps, use_expln)
    next_q = critic_values(target, batch[NEXT_OBS], next_actions).min(axis=0)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * (next_q - alpha * next_logp)
    half = np.array([2.0, 1.0])
    q_taken = critic_values(
        weights, batch[SB.OBS], batch[SB.ACTIONS] / half
    )  # Box [-2, 2] x [-1, 1] -> [-1, 1]
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    actions, logp = sde_squashed(weights, features_weights, batch[SB.OBS], eps, use_expln)
    actor_loss = (alpha * logp - critic_values(weights, batch[SB.OBS], actions).min(axis=0)).mean()
    alpha_loss = -(log_alpha * (logp + (-2.0))).mean()
    losses = {"q/": critic_loss, "policy/": actor_loss, "log_alpha": alpha_loss}
    stats = {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha_loss": alpha_loss,
             "entropy": -logp.mean(), "mean_target_q": targets.mean(), "mean_td_error": td.mean(),
             "total_loss": sum(losses.values())}  # fmt: skip
    return losses, stats, td


@needs_tf
def test_sac_gsde_weights_have_the_same_names_and_shapes_on_both_backends_and_act_alike(tmp_path):
    torch_policy, tf_policy = sac_policy(tmp_path / "t"), sac_policy(tmp_path / "f", backend="tf")
    shapes = {name: np.shape(value) for name, value in torch_policy.get_weights().items()}
    assert shapes == {name: np.shape(value) for name, value in tf_policy.get_weights().items()}
    assert shapes["policy/sde_log_std"] == (6, 2) and shapes["policy/output/kernel"] == (6, 2)
    obs = np.random.default_rng(3).normal(size=(5, 3)).astype(np.float32)
    greedy = [p.compute_actions(timestep_of(obs), explore=False)[0] for p in (torch_policy, tf_policy)]
    np.testing.assert_allclose(greedy[0], greedy[1], rtol=1e-5, atol=1e-6)


def sac_batch(seed=0):
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(N, 3)).astype(np.float32),
            SB.ACTIONS: (rng.uniform(-1, 1, size=(N, 2)) * [2.0, 1.0]).astype(np.float32),
            SB.REWARDS: (3.0 * rng.normal(size=N)).astype(np.float32),
            NEXT_OBS: rng.normal(size=(N, 3)).astype(np.float32),
            SB.DISCOUNTS: (0.97 * (rng.random(N) > 0.25)).astype(np.float32),
        }
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "options", [{}, {"full_std": False, "use_expln": True}], ids=["default", "expln-one"]
)
def test_sac_gsde_losses_and_update_match_the_numpy_reference(tmp_path, options, backend):
    policy = sac_policy(tmp_path, backend=backend, **options)
    batch = sac_batch()
    features_weights = policy.get_weights()

    def reference(weights, target):
        eps = np.asarray(policy.sde_eps if backend == "tf" else policy.sde_eps.numpy(), np.float64)
        return sac_sde_reference(weights, features_weights, target, batch, policy.config.training, eps)

    stats = check_step(policy, batch, reference, tau=0.1)
    assert policy.sde_eps.shape == (6, 2) and stats["sde_std"] > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_sac_gsde_acts_with_the_env_s_matrix_and_greedily_with_tanh_of_the_mean(tmp_path, backend):
    policy = sac_policy(tmp_path, backend=backend, sde_sample_freq=2)
    obs = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32)
    timestep = timestep_of(obs)
    actions, _, _ = policy.compute_actions(timestep, explore=True)
    weights = policy.get_weights()
    z = mlp_body(weights, "policy", obs, "relu")
    mean = dense(weights, "policy/output", z)
    u = mean + np.einsum("bf,bfa->ba", z, policy.sde_noise.matrices[:3])
    np.testing.assert_allclose(actions, np.tanh(u) * [2.0, 1.0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(policy.compute_actions(timestep, explore=True)[0], actions)  # 2nd step
    assert not np.allclose(policy.compute_actions(timestep, explore=True)[0], actions)  # redrawn
    greedy, _, _ = policy.compute_actions(timestep, explore=False)
    np.testing.assert_allclose(greedy, np.tanh(mean) * [2.0, 1.0], rtol=1e-5, atol=1e-5)


def test_sac_gsde_warmup_is_uniform_unless_use_sde_at_warmup(tmp_path):
    timestep = timestep_of(np.zeros((64, 3)))
    uniform = sac_policy(tmp_path / "u", learning_starts=1000).compute_actions(timestep)[0]
    assert uniform[:, 0].std() > 0.8  # uniform on [-2, 2]: std 1.15
    sde = sac_policy(tmp_path / "s", learning_starts=1000, use_sde_at_warmup=True)
    acted = sde.compute_actions(timestep)[0]
    assert acted[:, 0].std() < 0.8  # the same observation in every env: tanh(mean + small noise)


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_use_sde_with_discrete_actions_is_refused_naming_the_key(tmp_path, algorithm, backend):
    config = resolve(tmp_path, algorithm, {"use_sde": True})
    with pytest.raises(TypeError, match=r"training\.use_sde: gSDE needs Box actions"):
        make_policy(config, backend, PENDULUM_OBS, Discrete(2))


def test_sde_sample_freq_zero_is_refused(tmp_path):
    with pytest.raises(Exception, match=r"training\.sde_sample_freq.*-1 or a positive integer"):
        resolve(tmp_path, "ppo", {"use_sde": True, "sde_sample_freq": 0})


# ----------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_ppo_with_gsde_swings_pendulum_up_within_80k_env_steps():
    """configs/ppo-gsde-pendulum.yaml, seed 0, torch: the training return (exploring) reaches -300
    within 80k env steps. Measured on the loaded 2-core machine: -289 at 57k, -250 at 61k env steps
    (-197 at 102k); this test 92 s with other jobs' tests running beside it."""
    result = train_until_stop(
        PPO, "ppo-gsde-pendulum.yaml", "seed=0", "stop={episode_return_mean: -300, timesteps_total: 80000}"
    )
    assert result["episode_return_mean"] >= -300, result
    assert result["timesteps_total"] <= 80_000 + 4096


@pytest.mark.slow
def test_sac_with_gsde_swings_pendulum_up_greedy_evaluation_within_10k_env_steps():
    """configs/sac-gsde-pendulum.yaml, seed 0, torch: greedy evaluation (10 episodes every 1000 env
    steps) reaches -200 within 10k env steps. Measured on the loaded 2-core machine: -198 at 5k env
    steps in 83 s; this test 96 s with other jobs' tests running beside it."""
    result = train_until_stop(SAC, "sac-gsde-pendulum.yaml", "seed=0", "training.evaluation_interval=1")
    assert result["evaluation/episode_return_mean"] >= -200, result
    assert result["timesteps_total"] <= 10_000 + 1_000
