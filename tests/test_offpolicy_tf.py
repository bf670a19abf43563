"""SAC, TD3 and DDPG on the TF backend: the stacked critics, acting, the training step, checkpoints,
and checkpoints moved between the torch and TF backends (same greedy actions and Q-values).

The losses are checked against numpy on both backends in test_offpolicy_loss_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.policy import PolicyState
from tests.conftest import needs_tf
from tests.test_offpolicy import (
    ALGORITHMS,
    ASYMMETRIC_ACT,
    PENDULUM_OBS,
    make_trainer,  # noqa: F401 (the fixture)
    observations,
    raw_config,
    resolve,
    timestep_of,
)

pytestmark = needs_tf


def make_tf_policy(tmp_path, algorithm, **training):
    config = resolve(raw_config(tmp_path, algorithm, training, backend="tf"))
    return registry.load_algorithm(algorithm).policy_class("tf")(PENDULUM_OBS, ASYMMETRIC_ACT, config)


def numpy_q(weights, obs, actions):
    """``[K, B]``: each stacked critic member on ``[obs, actions]`` (relu MLP), in float64."""
    x = np.concatenate([obs, actions], axis=-1).astype(np.float64)
    layers = [*sorted({n.rsplit("/", 1)[0] for n in weights if n.startswith("q/hidden_")}), "q/output"]
    out = []
    for k in range(weights["q/output/kernel"].shape[0]):
        h = x
        for i, layer in enumerate(layers):
            h = h @ weights[f"{layer}/kernel"][k] + weights[f"{layer}/bias"][k]
            if i < len(layers) - 1:
                h = np.maximum(h, 0.0)
        out.append(h[:, 0])
    return np.stack(out)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tf_stacked_critics_are_one_batched_network_equal_to_separate_mlps(tmp_path, algorithm):
    policy = make_tf_policy(tmp_path, algorithm)
    members = 1 if algorithm == "ddpg" else 2
    weights = policy.get_weights()
    assert weights["q/hidden_0/kernel"].shape == (members, 3 + 2, 16)  # [K, in, out]
    obs, actions = observations(32), np.random.default_rng(1).uniform(-1, 1, (32, 2)).astype(np.float32)
    q = policy.q_values(obs, actions).numpy()
    np.testing.assert_allclose(q, numpy_q(weights, obs, actions), rtol=1e-5, atol=1e-5)
    if members == 2:
        assert not np.allclose(q[0], q[1])  # the members are initialised independently


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tf_numpy_twin_greedy_actions_equal_the_frameworks_and_exploration_stays_in_bounds(
    tmp_path, algorithm
):
    noise = {} if algorithm == "sac" else {"exploration_noise_scale": 0.5}
    policy = make_tf_policy(tmp_path, algorithm, learning_starts=0, **noise)
    obs = observations()
    greedy, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_allclose(greedy, policy.greedy_actions(obs), rtol=1e-5, atol=1e-5)
    explored, _, _ = policy.compute_actions(timestep_of(obs))
    assert (explored >= ASYMMETRIC_ACT.low).all() and (explored <= ASYMMETRIC_ACT.high).all()
    assert np.abs(explored - greedy).mean() > 0.01


def test_tf_fixed_alpha_is_not_a_trained_variable(tmp_path):
    policy = make_tf_policy(tmp_path, "sac", tune_alpha=False, initial_alpha=0.2)
    assert not policy.model.log_alpha.trainable
    assert all(v is not policy.model.log_alpha for v in policy.optimizer.variables)
    assert float(np.exp(policy.get_weights()["log_alpha"][0])) == pytest.approx(0.2)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tf_training_step_learns_after_learning_starts_and_moves_the_targets(
    make_trainer,  # noqa: F811
    tmp_path,
    algorithm,
):
    trainer = make_trainer(raw_config(tmp_path, algorithm, backend="tf"))
    trainer.train()  # 8 env steps < learning_starts: no gradient step
    assert trainer.policy.num_grad_updates == 0
    target = trainer.policy.get_target_weights()
    for _ in range(3):
        result = trainer.train()
    assert trainer.policy.num_grad_updates == 6
    moved = trainer.policy.get_target_weights()
    assert any(not np.array_equal(moved[k], v) for k, v in target.items())
    assert np.isfinite(result["learner/critic_loss"])


def test_tf_td3_delayed_steps_leave_the_actor_and_its_adam_moments_alone(tmp_path):
    """Between delayed updates the actor gets no gradient: Adam neither moves it nor decays its moments
    (torch skips a parameter without .grad; a zero gradient would still move it by momentum)."""
    from tests.test_offpolicy_loss_reference import transitions

    policy = make_tf_policy(tmp_path, "td3", policy_delay=2, train_batch_size=24)
    batch = transitions()
    policy.learn_on_batch(batch)  # step 1: critics only
    policy.learn_on_batch(batch)  # step 2: critics and actor
    before, moments = policy.get_weights(), policy.optimizer.state_arrays()
    policy.learn_on_batch(batch)  # step 3: critics only
    after, moments_after = policy.get_weights(), policy.optimizer.state_arrays()
    for index, (name, _) in enumerate(policy.named_variables):
        same = np.array_equal(before[name], after[name])
        assert same == name.startswith("policy/"), name
        assert np.array_equal(moments[f"exp_avg/{index}"], moments_after[f"exp_avg/{index}"]) == same


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tf_checkpoint_round_trip_restores_weights_targets_optimizer_and_replay(
    make_trainer,  # noqa: F811
    tmp_path,
    algorithm,
):
    raw = raw_config(tmp_path, algorithm, {"prioritized_replay": algorithm == "sac"}, backend="tf")
    trainer = make_trainer(raw)
    for _ in range(5):
        trainer.train()
    path = trainer.save()
    restored = make_trainer(raw)
    restored.restore(path)
    assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
    for getter in ("get_weights", "get_target_weights"):
        expected, actual = getattr(trainer.policy, getter)(), getattr(restored.policy, getter)()
        assert set(actual) == set(expected)
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{getter}: {name}")
    assert len(restored.replay_buffer) == len(trainer.replay_buffer) == 40
    # The same minibatch and the same learner noise (its generator is in the checkpoint): the same step.
    minibatch, restored_minibatch = trainer.replay_buffer.sample(8), restored.replay_buffer.sample(8)
    trainer.policy.learn_on_batch(minibatch)
    restored.policy.learn_on_batch(restored_minibatch)
    for name, value in trainer.policy.get_weights().items():
        np.testing.assert_allclose(restored.policy.get_weights()[name], value, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_checkpoint_of_one_backend_acts_and_values_identically_on_the_other(
    make_trainer,  # noqa: F811
    tmp_path,
    algorithm,
    trained_with,
    evaluated_with,
):
    trainer = make_trainer(raw_config(tmp_path, algorithm, backend=trained_with))
    for _ in range(4):
        trainer.train()
    path = trainer.save()
    moved = make_trainer(raw_config(tmp_path, algorithm, backend=evaluated_with))
    moved.restore(path)
    assert type(moved.policy).__module__.endswith(f"{evaluated_with}_policy")
    original, other = trainer.policy, moved.policy
    obs = np.random.default_rng(0).uniform(-1, 1, size=(32, 3)).astype(np.float32)
    greedy, _, _ = original.compute_actions(timestep_of(obs), explore=False)
    moved_greedy, _, _ = other.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_allclose(moved_greedy, greedy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(other.greedy_actions(obs), original.greedy_actions(obs), rtol=1e-5, atol=1e-6)
    actions = np.random.default_rng(1).uniform(-1, 1, size=(32, 1)).astype(np.float32)
    np.testing.assert_allclose(
        _numpy(other.q_values(*_tensors(other, obs, actions))),
        _numpy(original.q_values(*_tensors(original, obs, actions))),
        rtol=1e-5,
        atol=1e-5,
    )
    # (A trainer restored on another backend takes the weights only; its targets restart from them.)


@pytest.mark.parametrize(("source", "destination"), [("torch", "tf"), ("tf", "torch")])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_policy_state_moves_between_backends_with_its_target_networks(
    make_trainer,  # noqa: F811
    tmp_path,
    algorithm,
    source,
    destination,
):
    """Weights and target copies have one layout on both backends (optimizer state is not portable: torch
    keeps its moments in its own layout, and trainers restore only weights across backends)."""
    trainer = make_trainer(raw_config(tmp_path, algorithm, backend=source))
    for _ in range(4):
        trainer.train()
    original = trainer.policy
    config = resolve(raw_config(tmp_path, algorithm, backend=destination, seed=5))
    other = registry.load_algorithm(algorithm).policy_class(destination)(
        original.observation_space, original.action_space, config
    )
    state = original.get_state()
    arrays = {k: v for k, v in state.arrays.items() if not k.startswith("optimizer/")}
    other.set_state(PolicyState(arrays, {k: v for k, v in state.meta.items() if k != "optimizer"}))
    obs = np.random.default_rng(0).uniform(-1, 1, size=(32, 3)).astype(np.float32)
    actions = np.random.default_rng(1).uniform(-1, 1, size=(32, 1)).astype(np.float32)
    for which in ("online", "target"):
        q = [_numpy(p.q_values(*_tensors(p, obs, actions), which)) for p in (original, other)]
        np.testing.assert_allclose(q[1], q[0], rtol=1e-5, atol=1e-5, err_msg=which)
    target = original.get_target_weights()
    assert any(not np.array_equal(target[k], v) for k, v in original.get_weights().items() if k in target)
    assert other.num_grad_updates == original.num_grad_updates > 0


def _numpy(tensor):
    if isinstance(tensor, np.ndarray):
        return tensor
    return tensor.detach().numpy() if hasattr(tensor, "detach") else tensor.numpy()


def _tensors(policy, obs, actions):
    """``obs`` and ``actions`` in the policy's framework (torch tensors or TF-compatible arrays)."""
    if type(policy).__module__.endswith("torch_policy"):
        import torch

        return torch.from_numpy(obs), torch.from_numpy(actions)
    return obs, actions
