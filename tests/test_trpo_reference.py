"""TRPO's policy step and value fit on both backends against an independent float64 numpy reference.

The reference follows Schulman et al. 2015 (eq. 14 and appendix C) from the equations, not from
either backend: the surrogate ``mean(pi/pi_old * A)``, its gradient by central finite differences,
the mean ``KL(pi_old || pi)``, and the Fisher matrix built explicitly as
``F = 1/N sum_i J_i^T M_i J_i`` (``J_i``: the Jacobian of row i's distribution inputs in the policy
weights, by finite differences; ``M_i``: the Hessian of the KL in those inputs, ``diag(p) - p p^T``
for a softmax, ``diag(1/sigma^2)`` for the means and 2 for the log standard deviations of a diagonal
Gaussian). The whole step is then solved in numpy with ``np.linalg.solve`` (CG with enough
iterations converges to it) and the line search replayed on the reference functions.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.plugins.algorithms.trpo.natural_gradient import backtracking_line_search, conjugate_gradient
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
    actor_critic,
    assert_update_is_sgd_on,
    dense,
    finite_difference_gradient,
    kl_divergence,
    logp_and_entropy,
    make_policy,
    mlp_body,
    normalized,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_vision import conv2d

N = 24
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def build(tmp_path, backend: str, continuous: bool, training: dict | None = None):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    base = {"optimizer": "sgd", "lr": 0.5, "vf_num_sgd_iter": 1, "vf_sgd_minibatch_size": N}
    env = "Pendulum-v1" if continuous else "CartPole-v1"
    config = resolve(tmp_path, "trpo", {**base, **(training or {})}, {}, env=env, backend=backend)
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


def trpo_batch(policy, continuous: bool, seed: int = 0) -> SB:
    """Old log-probabilities off the current ones (ratios about 0.6-1.6), advantages with a non-zero
    mean and scale (so normalising them matters)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N, policy.observation_space.size)).astype(np.float32)
    if continuous:
        actions = rng.normal(size=(N, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=N).astype(np.int64)
    dist_inputs, values = actor_critic(policy.get_weights(), obs)
    logp, _ = logp_and_entropy(dist_inputs, actions, continuous)
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            SB.ACTION_LOGP: (logp + 0.25 * rng.normal(size=N)).astype(np.float32),
            SB.ADVANTAGES: (0.7 + 2.0 * rng.normal(size=N)).astype(np.float32),
            SB.VALUE_TARGETS: (values + rng.normal(size=N)).astype(np.float32),
        }
    )


# ----------------------------------------------------------------------------- the reference


def policy_names(weights) -> list[str]:
    """The policy step's weights: the policy net's and, with image observations, the conv trunk's."""
    return [name for name in sorted(weights) if name.startswith(("policy/", "shared/conv_"))]


def with_policy(weights, policy_weights):
    return {**weights, **policy_weights}


def surrogate(weights, batch: SB, continuous: bool, advantages: np.ndarray, forward=actor_critic) -> float:
    dist_inputs, _ = forward(weights, batch[SB.OBS])
    logp, _ = logp_and_entropy(dist_inputs, batch[SB.ACTIONS], continuous)
    return float((np.exp(logp - batch[SB.ACTION_LOGP].astype(np.float64)) * advantages).mean())


def mean_kl(old_weights, weights, obs, continuous: bool, forward=actor_critic) -> float:
    old_inputs, _ = forward(old_weights, obs)
    new_inputs, _ = forward(weights, obs)
    return float(kl_divergence(old_inputs, new_inputs, continuous).mean())


def fisher_matrix(
    weights, obs, continuous: bool, names: list[str], eps: float = 1e-6, forward=actor_critic
) -> np.ndarray:
    """``1/N sum_i J_i^T M_i J_i`` over the policy weights ``names`` (flattened in that order, each
    in the neutral layout, row-major)."""
    point = {k: np.array(v, np.float64) for k, v in weights.items()}
    inputs, _ = forward(point, obs)
    columns = []
    for name in names:
        flat = point[name].reshape(-1)
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            up, _ = forward(point, obs)
            flat[i] = original - eps
            down, _ = forward(point, obs)
            flat[i] = original
            columns.append((up - down) / (2 * eps))
    jacobian = np.stack(columns, axis=-1)  # [N, k, P]
    if continuous:
        k = inputs.shape[1] // 2
        std = np.exp(inputs[:, k:])
        hessians = np.zeros((len(obs), 2 * k, 2 * k))
        for j in range(k):
            hessians[:, j, j] = 1.0 / std[:, j] ** 2
            hessians[:, k + j, k + j] = 2.0
    else:
        p = np.exp(inputs - inputs.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        hessians = np.einsum("ij,jk->ijk", p, np.eye(p.shape[1])) - np.einsum("ij,ik->ijk", p, p)
    return np.einsum("nkp,nkl,nlq->pq", jacobian, hessians, jacobian) / len(obs)


def flat(weights, names) -> np.ndarray:
    return np.concatenate([np.asarray(weights[n], np.float64).reshape(-1) for n in names])


def unflat(vector, template, names) -> dict[str, np.ndarray]:
    out, start = {}, 0
    for name in names:
        size = np.size(template[name])
        out[name] = vector[start : start + size].reshape(np.shape(template[name]))
        start += size
    return out


def reference_step(weights, batch: SB, training, continuous: bool, forward=actor_critic):
    """The policy weights after TRPO's step, and its statistics, in float64."""
    names = policy_names(weights)
    advantages = batch[SB.ADVANTAGES].astype(np.float64)
    if training.normalize_advantages:
        advantages = normalized(advantages)
    obs = batch[SB.OBS]

    def surrogate_of(policy_weights):
        return surrogate(with_policy(weights, policy_weights), batch, continuous, advantages, forward)

    before = surrogate_of({n: weights[n] for n in names})
    gradient = flat(finite_difference_gradient(surrogate_of, {n: weights[n] for n in names}), names)
    damped = fisher_matrix(weights, obs, continuous, names, forward=forward) + training.cg_damping * np.eye(
        gradient.size
    )
    direction = np.linalg.solve(damped, gradient)
    full_step = np.sqrt(2 * training.max_kl / (direction @ damped @ direction)) * direction
    theta = flat(weights, names)
    fraction = 1.0
    for steps in range(1, training.line_search_max_iter + 1):
        candidate = unflat(theta + fraction * full_step, weights, names)
        value = surrogate_of(candidate)
        kl = mean_kl(weights, with_policy(weights, candidate), obs, continuous, forward)
        if kl <= training.max_kl and value > before:
            return candidate, {"kl": kl, "surrogate_improvement": value - before, "line_search_steps": steps,
                               "step_accepted": 1.0, "surrogate": before}  # fmt: skip
        fraction *= training.line_search_shrink
    return {n: weights[n] for n in names}, {
        "kl": 0.0,
        "surrogate_improvement": 0.0,
        "line_search_steps": training.line_search_max_iter,
        "step_accepted": 0.0,
        "surrogate": before,
    }


# ----------------------------------------------------------------------------- the backends' parts


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "gaussian"])
def test_surrogate_gradient_kl_and_fisher_vector_product_match_the_reference(tmp_path, backend, continuous):
    policy = build(tmp_path, backend, continuous)
    batch = trpo_batch(policy, continuous)
    weights = policy.get_weights()
    problem = policy.policy_step_problem(batch)
    names = problem.names
    assert sorted(names) == policy_names(weights)
    advantages = batch[SB.ADVANTAGES].astype(np.float64)  # the problem takes the batch as given

    def surrogate_of(policy_weights):
        return surrogate(with_policy(weights, policy_weights), batch, continuous, advantages)

    value, gradient, entropy = problem.surrogate_and_gradient()
    assert value == pytest.approx(surrogate_of({}), rel=1e-5)
    expected = finite_difference_gradient(surrogate_of, {n: weights[n] for n in names})
    got = problem.unflatten(gradient)
    for name in names:
        np.testing.assert_allclose(got[name], expected[name], rtol=2e-3, atol=2e-6, err_msg=name)
    _, expected_entropy = logp_and_entropy(
        actor_critic(weights, batch[SB.OBS])[0], batch[SB.ACTIONS], continuous
    )
    assert entropy == pytest.approx(expected_entropy.mean(), rel=1e-5)

    # F v against the explicit Fisher matrix, for a few random directions
    fisher = fisher_matrix(weights, batch[SB.OBS], continuous, names)
    rng = np.random.default_rng(7)
    for _ in range(3):
        v = {n: rng.normal(size=np.shape(weights[n])) for n in names}
        product = problem.unflatten(problem.fisher_vector_product(problem.flatten(v)))
        expected_product = unflat(fisher @ flat(v, names), weights, names)
        for name in names:
            np.testing.assert_allclose(
                product[name], expected_product[name], rtol=2e-3, atol=2e-5, err_msg=name
            )
    # the Fisher is what it claims to be: positive semi-definite and not trivially zero
    eigenvalues = np.linalg.eigvalsh(fisher)
    assert eigenvalues.min() > -1e-6 and eigenvalues.max() > 1e-2

    # the KL at moved weights; 0 at the old ones
    assert problem.surrogate_and_kl()[1] == pytest.approx(0.0, abs=1e-6)
    delta = {n: 0.05 * rng.normal(size=np.shape(weights[n])) for n in names}
    moved = {n: np.asarray(weights[n], np.float64) + delta[n] for n in names}
    problem.set_params(problem.flatten(moved))
    value, kl = problem.surrogate_and_kl()
    assert kl == pytest.approx(
        mean_kl(weights, with_policy(weights, moved), batch[SB.OBS], continuous), rel=1e-3
    )
    assert value == pytest.approx(surrogate_of(moved), rel=1e-4)


CASES = {
    # name: (continuous, training overrides); cg_iters past the weights' count: CG converges to the solve
    "discrete": (False, {"cg_iters": 150}),
    "discrete-no-normalisation-damping": (False, {"cg_iters": 150, "normalize_advantages": False, "cg_damping": 0.5}),
    "gaussian": (True, {"cg_iters": 150, "max_kl": 0.02}),
    # a trust region far past where the quadratic model holds: the full step's surrogate is 0.004 worse,
    # the next fraction's 0.02 better (the reference's numbers on this batch and these weights)
    "discrete-backtracks": (False, {"cg_iters": 150, "max_kl": 13.0}),
    # the policy step on every 3rd row (advantages normalized over those rows), the value fit on all
    "discrete-sub-sampled": (False, {"cg_iters": 150, "sub_sampling_factor": 3}),
}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_learn_on_batch_takes_the_reference_step_and_fits_the_value_function(tmp_path, backend, case):
    continuous, training = CASES[case]
    policy = build(tmp_path, backend, continuous, training)
    training = policy.config.training
    batch = trpo_batch(policy, continuous)
    weights = policy.get_weights()
    factor = training.sub_sampling_factor
    step_batch = SB({k: v[::factor] for k, v in batch.items()})
    expected_policy, expected = reference_step(weights, step_batch, training, continuous)
    if factor > 1:  # the case tells the sub-sampled step from the full batch's
        full_policy, _ = reference_step(weights, batch, training, continuous)
        assert any(not np.allclose(full_policy[n], expected_policy[n], rtol=1e-2) for n in expected_policy)
    if case.endswith("backtracks"):
        assert expected["line_search_steps"] > 1 and expected["step_accepted"] == 1.0

    def value_loss(w):
        _, values = actor_critic(w, batch[SB.OBS])
        return 0.5 * float(((values - batch[SB.VALUE_TARGETS]) ** 2).mean())

    value_names = [n for n in weights if n.startswith("value/")]
    value_grads = finite_difference_gradient(
        lambda v: value_loss({**weights, **v}), {n: weights[n] for n in value_names}
    )

    stats, update = sgd_step(policy, batch)
    after = policy.get_weights()
    for name, value in expected_policy.items():
        np.testing.assert_allclose(after[name], value, rtol=2e-3, atol=2e-5, err_msg=name)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=2e-3, abs=1e-6), key
    # the value fit: one plain-SGD step on 0.5 mean (V - target)^2, on the value net only
    assert stats["vf_loss"] == pytest.approx(value_loss(weights), rel=1e-5)
    assert_update_is_sgd_on({n: update[n] for n in value_names}, value_grads, training.lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_the_line_search_cannot_accept_leaves_the_policy_as_it_was(tmp_path, backend):
    """The backtracking case's full step (its surrogate is worse) tried alone: rejected, and the policy
    weights stay bit for bit; the value function still learns."""
    policy = build(tmp_path, backend, False, {"cg_iters": 150, "max_kl": 13.0, "line_search_max_iter": 1})
    batch = trpo_batch(policy, False)
    weights = policy.get_weights()
    _, expected = reference_step(weights, batch, policy.config.training, False)
    assert expected["step_accepted"] == 0.0
    stats, _ = sgd_step(policy, batch)
    assert stats["step_accepted"] == 0.0 and stats["kl"] == 0.0 and stats["line_search_steps"] == 1.0
    after = policy.get_weights()
    for name in policy_names(weights):
        np.testing.assert_array_equal(after[name], weights[name])
    assert any(not np.array_equal(after[n], weights[n]) for n in weights if n.startswith("value/"))


# ----------------------------------------------------------------------------- framework-free parts


def test_conjugate_gradient_solves_a_known_spd_system():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(12, 12))
    spd = a @ a.T + 0.5 * np.eye(12)
    b = rng.normal(size=12)
    exact = np.linalg.solve(spd, b)
    calls = []

    def matvec(v):
        calls.append(1)
        return spd @ v

    np.testing.assert_allclose(conjugate_gradient(matvec, b, 12), exact, rtol=1e-6, atol=1e-8)
    assert len(calls) == 12  # one product per iteration, no more
    # fewer iterations: a worse solution in the A-norm, never a better one
    errors = []
    for iters in (2, 5, 8, 12):
        e = conjugate_gradient(lambda v: spd @ v, b, iters) - exact
        errors.append(float(e @ spd @ e))
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-10
    # a zero right-hand side stops at once
    assert not conjugate_gradient(lambda v: spd @ v, np.zeros(12), 10).any()


def test_line_search_takes_the_first_fraction_within_the_region_that_improves():
    tried = []
    outcomes = {1.0: (2.0, 0.05), 0.5: (0.5, 0.005), 0.25: (1.5, 0.004)}  # too far; no better; taken

    def evaluate(fraction):
        tried.append(fraction)
        return outcomes[fraction]

    result = backtracking_line_search(evaluate, surrogate_before=1.0, max_kl=0.01, shrink=0.5, max_iters=10)
    assert tried == [1.0, 0.5, 0.25]
    assert result.accepted and result.steps == 3 and result.fraction == 0.25
    assert (result.surrogate, result.kl) == (1.5, 0.004)


def test_line_search_gives_up_after_max_iters_and_rejects_nan():
    tried = []

    def evaluate(fraction):
        tried.append(fraction)
        return (float("nan"), 0.0) if len(tried) == 1 else (0.0, 0.0)  # then: no improvement

    result = backtracking_line_search(evaluate, surrogate_before=1.0, max_kl=0.01, shrink=0.8, max_iters=4)
    assert not result.accepted and result.steps == 4 and result.fraction == 0.0 and result.kl == 0.0
    np.testing.assert_allclose(tried, [1.0, 0.8, 0.64, 0.512])


# ----------------------------------------------------------------------------- image observations

IMAGE_OBS = Box(np.zeros((6, 6, 1)), np.full((6, 6, 1), 255), np.uint8)
IMAGE_FILTERS = [[2, 3, 1]]  # 6x6x1 -> 4x4x2


def image_forward(weights, images):
    """The conv trunk (uint8 / 255, no padding, ReLU, flattened in HWC order: rlgear.config.conv's
    contract, written in tests/test_vision.py), then separate ReLU policy and value MLPs."""
    x = np.asarray(images, np.float64) / 255.0
    x = np.maximum(conv2d(x, weights["shared/conv_0/kernel"], weights["shared/conv_0/bias"], 1), 0.0)
    features = x.reshape(len(x), -1)
    policy_h = mlp_body(weights, "policy", features, "relu")
    value_h = mlp_body(weights, "value", features, "relu")
    return dense(weights, "policy/output", policy_h), dense(weights, "value/output", value_h)[:, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_image_trunk_steps_with_the_policy_inside_the_trust_region_and_the_value_fit_leaves_it(
    tmp_path, backend
):
    """With image observations the conv trunk both heads read belongs to the policy step: the natural
    gradient over trunk and policy net matches the reference (its Fisher matrix over both), the KL
    line search bounds the change of the policy, and the value fit moves the value net only."""
    base = {"optimizer": "sgd", "lr": 0.5, "vf_num_sgd_iter": 1, "vf_sgd_minibatch_size": N, "cg_iters": 250}
    model = {"conv_filters": IMAGE_FILTERS, "hidden_sizes": [4], "activation": "relu"}
    config = resolve(tmp_path, "trpo", base, model, env="tests.image_env:QuadrantEnv", backend=backend)
    policy = make_policy(config, backend, IMAGE_OBS, Discrete(3))
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    weights = policy.get_weights()
    names = policy_names(weights)
    assert sorted(policy.policy_step_problem(SB({SB.OBS: np.zeros((1, 6, 6, 1), np.uint8)})).names) == names
    assert any(n.startswith("shared/conv_") for n in names)

    rng = np.random.default_rng(3)
    images = (rng.integers(0, 256, size=(N, 6, 6, 1)) * (rng.random((N, 6, 6, 1)) < 0.6)).astype(np.uint8)
    actions = rng.integers(3, size=N).astype(np.int64)
    dist_inputs, values = image_forward(weights, images)
    logp, _ = logp_and_entropy(dist_inputs, actions, False)
    batch = SB(
        {
            SB.OBS: images,
            SB.ACTIONS: actions,
            SB.ACTION_LOGP: (logp + 0.25 * rng.normal(size=N)).astype(np.float32),
            SB.ADVANTAGES: (0.7 + 2.0 * rng.normal(size=N)).astype(np.float32),
            SB.VALUE_TARGETS: (values + rng.normal(size=N)).astype(np.float32),
        }
    )
    training = policy.config.training
    expected_policy, expected = reference_step(weights, batch, training, False, image_forward)
    assert expected["step_accepted"] == 1.0

    def value_loss(w):
        return 0.5 * float(((image_forward(w, images)[1] - batch[SB.VALUE_TARGETS]) ** 2).mean())

    value_names = [n for n in weights if n.startswith("value/")]
    stats, update = sgd_step(policy, batch)
    after = policy.get_weights()
    for name, value in expected_policy.items():
        np.testing.assert_allclose(after[name], value, rtol=2e-3, atol=2e-5, err_msg=name)
    assert any(np.abs(update[n]).max() > 1e-4 for n in names if n.startswith("shared/conv_"))
    for key in ("kl", "surrogate_improvement", "step_accepted"):
        assert stats[key] == pytest.approx(expected[key], rel=2e-3, abs=1e-6), key
    assert stats["kl"] <= training.max_kl
    # the value fit: one plain-SGD step on the value net, at the trunk the policy step left
    moved = {**weights, **expected_policy}
    value_grads = finite_difference_gradient(
        lambda v: value_loss({**moved, **v}), {n: weights[n] for n in value_names}
    )
    assert_update_is_sgd_on({n: update[n] for n in value_names}, value_grads, training.lr)
