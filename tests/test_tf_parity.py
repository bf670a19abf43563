"""The TF backend against the torch backend: same weights and batch, same numbers.

Issue 3's parity contract: for every algorithm, the same weights and the same
batch give the same loss and the same global gradient norm on both backends
(and, for the policies A3C splits between workers and a learner, the same
``compute_gradients`` arrays and the same ``apply_gradients`` update);
weights moved either way give the same action probabilities / Gaussian means;
and a checkpoint written by one backend is evaluated by the other through the
CLI. Float32 on both sides; tolerances are 1e-5 relative with a 1e-5 absolute
floor (``assert_close``), i.e. 1e-5 absolute for the O(1) quantities compared.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.cli import main as cli_main
from rlgear.discovery import registry
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType
from tests.conftest import needs_tf
from tests.test_vtrace import random_episodes

# Policies built directly (without a trainer) start TF before any backend setup in this process.
# Every test here compares the TF backend with torch: each is skipped, with the reason, without TF.
pytestmark = [pytest.mark.filterwarnings("ignore:TensorFlow was already initialized"), needs_tf]

CARTPOLE_OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))
PENDULUM_OBS = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
PENDULUM_ACT = Box(np.array([-2.0]), np.array([2.0]))
CARTPOLE_ACT = Discrete(2)
RTOL = ATOL = 1e-5


def assert_close(a, b, what=""):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL, err_msg=what)


def resolve(tmp_path, algorithm, training=None, model=None, env="CartPole-v1"):
    raw = {
        "algorithm": algorithm,
        "seed": 3,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2},
        "training": training or {},
        "model": {"hidden_sizes": [32, 16], **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer_cls = registry.load_algorithm(algorithm)
    return config_mod.resolve(raw, training_class=trainer_cls.config_class)


def policy_pair(config, obs_space, act_space):
    """A torch and a TF policy of ``config.algorithm`` holding the torch policy's weights.

    torch's global RNG is seeded first: the initial weights must not depend on which tests ran
    before in the same process (thresholds on gradient norms below depend on them).
    """
    import torch

    torch.manual_seed(0)
    trainer_cls = registry.load_algorithm(config.algorithm)
    torch_policy = trainer_cls.policy_class("torch")(obs_space, act_space, config)
    tf_policy = trainer_cls.policy_class("tf")(obs_space, act_space, config)
    tf_policy.set_weights(torch_policy.get_weights())
    return torch_policy, tf_policy


def on_policy_batch(obs_space, act_space, n=48, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, obs_space.size)).astype(np.float32)
    if isinstance(act_space, Discrete):
        actions = rng.integers(act_space.n, size=n).astype(np.int64)
    else:
        actions = rng.normal(size=(n, act_space.size)).astype(np.float32)
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            # Old log-probabilities near the current ones, so some ratios are clipped and some not.
            SB.ACTION_LOGP: (np.log(0.5) + 0.3 * rng.normal(size=n)).astype(np.float32),
            SB.VF_PREDS: rng.normal(size=n).astype(np.float32),
            SB.ADVANTAGES: rng.normal(size=n).astype(np.float32),
            SB.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )


def dqn_batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(n, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=n).astype(np.int64),
            SB.REWARDS: rng.normal(size=n).astype(np.float32),
            NEXT_OBS: rng.normal(size=(n, 4)).astype(np.float32),
            SB.DISCOUNTS: (0.99 * (rng.random(n) > 0.2)).astype(np.float32),
            WEIGHTS: rng.uniform(0.2, 1.0, size=n).astype(np.float32),
        }
    )


def impala_batch(obs_space, act_space, n=6, steps=10, seed=0):
    """``n`` sequences ``[n, T+1]`` with terminated and truncated episode ends inside the unroll.

    Behaviour log-probabilities are off from the current policy's (about log 0.5
    for two actions near uniform, -1.4 for a unit Gaussian) by 0.3 + 0.5 * noise,
    so importance weights fall on both sides of every clipping threshold.
    """
    rng = np.random.default_rng(seed)
    _, rewards, _, step_types, discounts = random_episodes(rng, T=steps, B=n, gamma=1.0)  # time-major
    if isinstance(act_space, Discrete):
        actions = rng.integers(act_space.n, size=(n, steps)).astype(np.int64)
        current_logp = np.log(0.5)
    else:
        actions = rng.normal(size=(n, steps, act_space.size)).astype(np.float32)
        current_logp = -1.4
    return SB(
        {
            SB.OBS: rng.normal(size=(n, steps, obs_space.size)).astype(np.float32),
            SB.ACTIONS: actions,
            SB.REWARDS: rewards.T.astype(np.float32),
            SB.DISCOUNTS: discounts.T.astype(np.float32),
            SB.STEP_TYPES: step_types.T.astype(np.int32),
            SB.ACTION_LOGP: (current_logp + 0.3 + 0.5 * rng.normal(size=(n, steps))).astype(np.float32),
        }
    )


def assert_same_gradients(torch_policy, tf_policy, batch):
    """compute_gradients on each: the same arrays under the same names and the same stats; no update."""
    before = tf_policy.get_weights()
    torch_grads, torch_stats = torch_policy.compute_gradients(batch)
    tf_grads, tf_stats = tf_policy.compute_gradients(batch)
    assert set(tf_grads) == set(torch_grads) == set(before)
    for name, value in torch_grads.items():
        assert tf_grads[name].shape == value.shape == before[name].shape, name
        assert_close(tf_grads[name], value, f"gradient of {name}")
    assert set(tf_stats) == set(torch_stats)
    for key, value in torch_stats.items():
        assert_close(tf_stats[key], value, key)
    assert torch_stats["grad_gnorm"] > 1e-3  # a real gradient, not two zeros
    np.testing.assert_equal(tf_policy.get_weights(), before)  # computing changes nothing
    return torch_grads, torch_stats


def assert_same_step(torch_policy, tf_policy, batch):
    """One learn_on_batch on each: every stat (loss, gradient norm ...) and the new weights agree."""
    torch_stats = torch_policy.learn_on_batch(batch)
    tf_stats = tf_policy.learn_on_batch(batch)
    assert set(torch_stats) == set(tf_stats)
    assert torch_stats["grad_gnorm"] > 1e-3  # a real gradient, not two zeros
    for key in torch_stats:
        assert_close(tf_stats[key], torch_stats[key], key)
    # The updated weights too (optimizer parity). Adam and RMSprop divide each element's
    # gradient by its own running magnitude, which amplifies float32 rounding in elements
    # whose gradient is ~0 (the two frameworks sum in different orders), hence 1e-4 here.
    torch_weights, tf_weights = torch_policy.get_weights(), tf_policy.get_weights()
    for name in torch_weights:
        np.testing.assert_allclose(tf_weights[name], torch_weights[name], rtol=1e-4, atol=1e-4, err_msg=name)
    return torch_stats


# ----------------------------------------------------------------------------- loss parity

PPO_CASES = {
    "discrete": (CARTPOLE_OBS, CARTPOLE_ACT, {}, {}),
    "continuous-vf-clip": (PENDULUM_OBS, PENDULUM_ACT, {"vf_clip_param": 0.5, "entropy_coeff": 0.01}, {}),
    "shared-layers-relu": (CARTPOLE_OBS, CARTPOLE_ACT, {}, {"vf_share_layers": True, "activation": "relu"}),
}


@pytest.mark.parametrize("case", sorted(PPO_CASES))
def test_ppo_loss_and_gradient_norm_match_torch(tmp_path, case):
    obs_space, act_space, training, model = PPO_CASES[case]
    config = resolve(
        tmp_path,
        "ppo",
        {"sgd_minibatch_size": 48, "num_sgd_iter": 1, "grad_clip": 0.5, "clip_param": 0.1, **training},
        model,
    )
    torch_policy, tf_policy = policy_pair(config, obs_space, act_space)
    stats = assert_same_step(torch_policy, tf_policy, on_policy_batch(obs_space, act_space))
    assert 0.0 < stats["clip_fraction"] < 1.0  # both branches of the clipped surrogate are exercised


def test_ppo_epochs_of_minibatches_with_a_partial_last_one_match_torch(tmp_path):
    # 48 rows in minibatches of 20: 20, 20, 8, three epochs; both draw the order from the same seed.
    config = resolve(tmp_path, "ppo", {"sgd_minibatch_size": 20, "num_sgd_iter": 3, "lr": 1e-3})
    torch_policy, tf_policy = policy_pair(config, CARTPOLE_OBS, CARTPOLE_ACT)
    stats = assert_same_step(torch_policy, tf_policy, on_policy_batch(CARTPOLE_OBS, CARTPOLE_ACT))
    assert stats["num_grad_updates"] == 9


@pytest.mark.parametrize("algorithm", ["pg", "a2c"])
@pytest.mark.parametrize("continuous", [False, True])
def test_pg_and_a2c_loss_and_gradient_norm_match_torch(tmp_path, algorithm, continuous):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    training = {"entropy_coeff": 0.01}
    if algorithm == "a2c":
        training["optimizer"] = "rmsprop"  # A2C's usual optimizer: its update must match too
        training["grad_clip"] = 0.5
    env = "Pendulum-v1" if continuous else "CartPole-v1"
    config = resolve(tmp_path, algorithm, training, env=env)
    torch_policy, tf_policy = policy_pair(config, obs_space, act_space)
    assert_same_step(torch_policy, tf_policy, on_policy_batch(obs_space, act_space))


def test_pg_without_baseline_and_with_sgd_matches_torch(tmp_path):
    config = resolve(tmp_path, "pg", {"use_baseline": False, "optimizer": "sgd", "lr": 0.1})
    torch_policy, tf_policy = policy_pair(config, CARTPOLE_OBS, CARTPOLE_ACT)
    value_before = tf_policy.get_weights()["value/output/kernel"]
    assert_same_step(torch_policy, tf_policy, on_policy_batch(CARTPOLE_OBS, CARTPOLE_ACT))
    # no gradient reaches the unused value function on either backend
    np.testing.assert_array_equal(tf_policy.get_weights()["value/output/kernel"], value_before)


DQN_CASES = {
    "double-dueling-huber": {"double_q": True, "dueling": True, "td_error_loss_fn": "huber"},
    "plain-mse": {"double_q": False, "dueling": False, "td_error_loss_fn": "mse"},
}


@pytest.mark.parametrize("case", sorted(DQN_CASES))
def test_dqn_loss_gradient_norm_and_td_errors_match_torch(tmp_path, case):
    config = resolve(tmp_path, "dqn", {"train_batch_size": 32, "grad_clip": 1.0, **DQN_CASES[case]})
    torch_policy, tf_policy = policy_pair(config, CARTPOLE_OBS, CARTPOLE_ACT)
    # A target network that differs from the online one, the same on both sides.
    target = {k: v * 0.9 for k, v in torch_policy.get_weights().items()}
    torch_policy.set_target_weights(target)
    tf_policy.set_target_weights(target)
    batch = dqn_batch()
    assert_same_step(torch_policy, tf_policy, batch)
    assert_close(tf_policy.td_errors, torch_policy.td_errors, "td_errors")
    assert np.all(tf_policy.td_errors > 0)


LAST = int(StepType.LAST)
NO_VTRACE_CLIPS = {
    "vtrace_clip_rho_threshold": None,
    "vtrace_clip_pg_rho_threshold": None,
    "vtrace_clip_c_threshold": None,
}
IMPALA_CASES = {
    "default-clips": (False, {}),
    "clipping-off": (False, {**NO_VTRACE_CLIPS, "vtrace_lambda": 0.9, "grad_clip": None}),
    "other-thresholds-two-passes": (
        False,
        {
            "vtrace_clip_rho_threshold": 2.0,
            "vtrace_clip_pg_rho_threshold": 0.5,
            "vtrace_clip_c_threshold": 0.9,
            "vtrace_lambda": 0.95,
            "grad_clip": 0.1,  # below the gradient norm: the step is clipped
            "num_sgd_iter": 2,  # the second pass recomputes V-trace with the updated weights
            # Plain SGD moves the weights in proportion to the clipped gradient (the first step
            # of Adam or RMSprop is scale-free and would hide a wrong clip).
            "optimizer": "sgd",
            "lr": 0.05,
        },
    ),
    "continuous": (True, {}),
}


@pytest.mark.parametrize("case", sorted(IMPALA_CASES))
def test_impala_vtrace_loss_gradients_and_step_match_torch(tmp_path, case):
    continuous, training = IMPALA_CASES[case]
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    config = resolve(tmp_path, "impala", training, env="Pendulum-v1" if continuous else "CartPole-v1")
    batch = impala_batch(obs_space, act_space)
    ends = batch[SB.STEP_TYPES][:, :-1] == LAST  # episode ends before the bootstrap step
    terminal = batch[SB.DISCOUNTS][:, :-1] == 0
    assert (ends & terminal).any() and (ends & ~terminal).any()
    torch_policy, tf_policy = policy_pair(config, obs_space, act_space)
    assert_same_gradients(torch_policy, tf_policy, batch)
    stats = assert_same_step(torch_policy, tf_policy, batch)
    assert abs(stats["mean_rho"] - 1.0) > 0.05  # off-policy: the importance weights matter
    if training.get("grad_clip", 40.0) == 0.1:
        assert stats["grad_gnorm"] > 0.1


@pytest.mark.parametrize("continuous", [False, True])
def test_a3c_loss_gradients_and_gradient_application_match_torch(tmp_path, continuous):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    env = "Pendulum-v1" if continuous else "CartPole-v1"
    # Plain SGD: the update is proportional to the clipped gradient, so a wrong clip shows (the
    # first step of RMSprop, A3C's default, is scale-free; its parity is checked for a2c).
    training = {"entropy_coeff": 0.01, "optimizer": "sgd", "lr": 0.1, "grad_clip": 0.2}
    config = resolve(tmp_path, "a3c", training, env=env)
    torch_policy, tf_policy = policy_pair(config, obs_space, act_space)
    batch = on_policy_batch(obs_space, act_space)
    grads, stats = assert_same_gradients(torch_policy, tf_policy, batch)
    assert stats["grad_gnorm"] > 0.2  # apply_gradients clips
    # The learner's half: the same gradients, clipped and applied by each backend.
    torch_policy.apply_gradients(grads)
    tf_policy.apply_gradients(grads)
    assert tf_policy.num_grad_updates == torch_policy.num_grad_updates == 1
    torch_weights, tf_weights = torch_policy.get_weights(), tf_policy.get_weights()
    for name in torch_weights:
        np.testing.assert_allclose(tf_weights[name], torch_weights[name], rtol=1e-4, atol=1e-4, err_msg=name)
    # learn_on_batch (one whole-batch step) agrees too, from the updated weights
    assert_same_step(torch_policy, tf_policy, batch)


# ----------------------------------------------------------------------------- forward parity


@pytest.mark.parametrize("direction", ["torch->tf", "tf->torch"])
@pytest.mark.parametrize("continuous", [False, True])
def test_weights_moved_between_backends_give_the_same_distribution(tmp_path, direction, continuous):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    config = resolve(tmp_path, "ppo", model={"init_log_std": -0.5})
    trainer_cls = registry.load_algorithm("ppo")
    torch_policy = trainer_cls.policy_class("torch")(obs_space, act_space, config)
    tf_policy = trainer_cls.policy_class("tf")(obs_space, act_space, config)
    source, target = (torch_policy, tf_policy) if direction == "torch->tf" else (tf_policy, torch_policy)
    # Weights away from their initial values, so nothing matches by accident.
    rng = np.random.default_rng(1)
    source.set_weights(
        {k: v + 0.1 * rng.normal(size=v.shape).astype(np.float32) for k, v in source.get_weights().items()}
    )
    before = target.action_distribution_inputs(np.ones((1, obs_space.size), np.float32))
    target.set_weights(source.get_weights())
    obs = rng.normal(size=(64, obs_space.size)).astype(np.float32)
    expected, got = source.action_distribution_inputs(obs), target.action_distribution_inputs(obs)
    assert not np.allclose(
        before, source.action_distribution_inputs(np.ones((1, obs_space.size), np.float32))
    )
    if continuous:  # means, then log stds
        assert_close(got, expected, "means and log stds")
    else:

        def softmax(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        assert_close(softmax(got), softmax(expected), "action probabilities")


# ----------------------------------------------------------------------------- checkpoints across backends


def train_checkpoint(tmp_path, backend):
    import rlgear

    result = rlgear.train(
        {
            "algorithm": "ppo",
            "backend": backend,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "workers": {"num_envs_per_worker": 2},
            "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
            "model": {"hidden_sizes": [16, 16]},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path / backend), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == 2
    (run_dir,) = (tmp_path / backend).iterdir()
    return run_dir


@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_a_checkpoint_of_one_backend_is_evaluated_by_the_other(
    tmp_path, capsys, trained_with, evaluated_with
):
    from rlgear.run import agent

    run_dir = train_checkpoint(tmp_path, trained_with)
    code = cli_main(["evaluate", str(run_dir), "--episodes", "2", "--set", f"backend={evaluated_with}"])
    out = capsys.readouterr().out
    assert code == 0 and "episodes 2 | return mean" in out, out

    # The loaded policies of both backends give the same distribution on the same observations.
    original = agent.load(run_dir)
    moved = agent.load(run_dir, [f"backend={evaluated_with}"])
    assert type(original.policy).__module__.endswith(f"{trained_with}_policy")
    assert type(moved.policy).__module__.endswith(f"{evaluated_with}_policy")
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    assert_close(
        moved.policy.action_distribution_inputs(obs),
        original.policy.action_distribution_inputs(obs),
        "logits",
    )
    np.testing.assert_array_equal(moved.compute_actions(obs), original.compute_actions(obs))
