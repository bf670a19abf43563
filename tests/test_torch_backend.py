"""Tests of the torch backend: distributions, the model catalog's weights, policy state, custom models.

The distributions are checked against ``torch.distributions`` (which they
replace for speed), the sampling statistically. Weights are checked for the
framework-neutral contract of docs/architecture.md ("The core contracts": a flat
``{name: array}`` with kernels ``[in, out]``), including a plain-numpy forward
pass that must reproduce the policy's outputs from the exported weights alone.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributions as td

from rlgear import config as config_mod
from rlgear.blocks.schedules import piecewise_linear
from rlgear.discovery import registry
from rlgear.errors import ConfigError, PluginError
from rlgear.plugins.backends.torch import Categorical, DiagGaussian
from rlgear.policy import flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

TESTS_DIR = Path(__file__).resolve().parent

CARTPOLE_OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))
PENDULUM_OBS = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
PENDULUM_ACT = Box(np.array([-2.0]), np.array([2.0]))
CARTPOLE_ACT = Discrete(2)


# ----------------------------------------------------------------------------- helpers


def raw_config(tmp_path, env="CartPole-v1", model=None, training=None):
    training_section = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2}
    training_section.update(training or {})
    return {
        "algorithm": "ppo",
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2},
        "training": training_section,
        "model": {"hidden_sizes": [16, 8], **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }


def make_policy(tmp_path, obs_space=CARTPOLE_OBS, act_space=CARTPOLE_ACT, **sections):
    config = config_mod.resolve(raw_config(tmp_path, **sections))
    policy_cls = registry.load_algorithm("ppo").policy_class("torch")
    return policy_cls(obs_space, act_space, config)


def timestep_of(observations, action_space):
    n = len(observations)
    action_dtype = np.int64 if isinstance(action_space, Discrete) else np.float32
    return TimeStep(
        step_type=np.full(n, StepType.MID, dtype=np.int32),
        reward=np.zeros(n, dtype=np.float32),
        discount=np.ones(n, dtype=np.float32),
        observation=observations,
        prev_action=np.zeros((n, *action_space.shape), dtype=action_dtype),
        env_id=np.arange(n, dtype=np.int32),
    )


def random_observations(n, dim, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def training_batch(policy, n=64, seed=0):
    """A PPO training batch: actions, logp and values from ``policy``, random advantages/targets."""
    rng = np.random.default_rng(seed)
    obs = random_observations(n, policy.observation_space.size, seed)
    actions, _, extras = policy.compute_actions(timestep_of(obs, policy.action_space), explore=True)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.ACTION_LOGP: extras[SampleBatch.ACTION_LOGP],
            SampleBatch.VF_PREDS: extras[SampleBatch.VF_PREDS],
            SampleBatch.ADVANTAGES: rng.normal(size=n).astype(np.float32),
            SampleBatch.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )


def numpy_forward(weights, obs, hidden_layers, shared=False, continuous=False):
    """The catalog MLP (tanh) evaluated from framework-neutral weights with numpy only."""

    def body(prefix):
        h = obs
        for i in range(hidden_layers):
            h = np.tanh(h @ weights[f"{prefix}/hidden_{i}/kernel"] + weights[f"{prefix}/hidden_{i}/bias"])
        return h

    policy_h = body("shared" if shared else "policy")
    value_h = policy_h if shared else body("value")
    out = policy_h @ weights["policy/output/kernel"] + weights["policy/output/bias"]
    if continuous:
        out = np.concatenate([out, np.broadcast_to(weights["policy/log_std"], out.shape)], axis=-1)
    values = (value_h @ weights["value/output/kernel"] + weights["value/output/bias"])[:, 0]
    return out, values


def assert_weights_equal(a, b):
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture
def make_trainer(tmp_path):
    """Build PPO trainers from raw config mappings; every one is stopped at teardown."""
    trainers = []

    def make(raw, logdir=None):
        config = config_mod.resolve(raw)
        trainer = registry.load_algorithm("ppo")(config, logdir=logdir or tmp_path / f"run{len(trainers)}")
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


@pytest.fixture
def custom_models(monkeypatch):
    """``tests/`` on sys.path so ``model.custom: custom_models:<Class>`` resolves."""
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    module = importlib.import_module("custom_models")
    module.TinyActorCritic.built_with.clear()
    return module


# ------------------------------------------------------------------- distributions


@pytest.fixture
def torch_seed():
    torch.manual_seed(1234)


def test_categorical_logp_entropy_kl_match_torch_distributions(torch_seed):
    logits = 3.0 * torch.randn(256, 5)
    other = 3.0 * torch.randn(256, 5) + 1.0  # unnormalised, shifted: normalisation must not matter
    actions = torch.randint(0, 5, (256,))
    mine, ref = Categorical(logits), td.Categorical(logits=logits)
    torch.testing.assert_close(mine.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(mine.entropy(), ref.entropy())
    torch.testing.assert_close(
        mine.kl(Categorical(other)), td.kl_divergence(ref, td.Categorical(logits=other)), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(mine.deterministic_sample(), logits.argmax(-1))


def test_categorical_logp_accepts_float_actions(torch_seed):
    logits = torch.randn(8, 3)
    actions = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    torch.testing.assert_close(
        Categorical(logits).logp(actions.float()), td.Categorical(logits=logits).log_prob(actions)
    )


def test_categorical_entropy_and_kl_match_torch_with_masked_minus_inf_logits():
    # A custom model may mask invalid actions with -inf logits (a common pattern);
    # torch.distributions gives finite entropy/KL there, and so must a drop-in replacement:
    # PPO's loss uses the entropy even when entropy_coeff is 0 (0 * nan = nan).
    logits = torch.tensor([[0.0, -math.inf, 1.0], [2.0, 0.5, -math.inf]])
    other = torch.tensor([[1.0, -math.inf, 0.0], [0.0, 0.0, -math.inf]])
    mine, ref = Categorical(logits), td.Categorical(logits=logits)
    torch.testing.assert_close(mine.entropy(), ref.entropy())
    torch.testing.assert_close(
        mine.kl(Categorical(other)), td.kl_divergence(ref, td.Categorical(logits=other))
    )


def test_categorical_gumbel_max_sample_frequencies_match_softmax():
    torch.manual_seed(0)
    n = 20_000
    rows = torch.tensor([[0.5, -1.0, 2.0, 0.1], [0.0, 0.0, 0.0, -3.0]])
    for row in rows:
        samples = Categorical(row.expand(n, 4)).sample()
        assert samples.shape == (n,)
        counts = torch.bincount(samples, minlength=4).double()
        probs = torch.softmax(row.double(), -1)
        freq = counts / n
        # 5 binomial standard deviations per category
        tolerance = 5.0 * torch.sqrt(probs * (1 - probs) / n)
        assert torch.all((freq - probs).abs() <= tolerance), (freq, probs, tolerance)


def test_categorical_samples_rows_independently():
    torch.manual_seed(1)
    # Row 0 almost surely picks action 2, row 1 action 0: each row uses its own logits.
    logits = torch.tensor([[-20.0, -20.0, 20.0], [20.0, -20.0, -20.0]]).repeat(500, 1)
    samples = Categorical(logits).sample().view(500, 2)
    assert torch.all(samples[:, 0] == 2)
    assert torch.all(samples[:, 1] == 0)


def test_diag_gaussian_logp_entropy_kl_match_torch_distributions(torch_seed):
    dim = 3
    inputs = torch.randn(128, 2 * dim)
    other_inputs = torch.randn(128, 2 * dim)
    actions = torch.randn(128, dim) * 2
    mean, log_std = inputs.chunk(2, dim=-1)
    other_mean, other_log_std = other_inputs.chunk(2, dim=-1)
    ref = td.Independent(td.Normal(mean, log_std.exp()), 1)
    ref_other = td.Independent(td.Normal(other_mean, other_log_std.exp()), 1)
    mine = DiagGaussian(inputs)
    torch.testing.assert_close(mine.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(mine.entropy(), ref.entropy())
    torch.testing.assert_close(mine.kl(DiagGaussian(other_inputs)), td.kl_divergence(ref, ref_other))
    torch.testing.assert_close(mine.deterministic_sample(), mean)


def test_diag_gaussian_sample_mean_and_std_match_parameters():
    torch.manual_seed(0)
    n = 20_000
    mean = torch.tensor([0.5, -2.0, 10.0])
    log_std = torch.tensor([0.0, -1.0, 0.7])
    std = log_std.exp()
    inputs = torch.cat([mean, log_std]).expand(n, 6)
    samples = DiagGaussian(inputs).sample().double()
    assert samples.shape == (n, 3)
    # standard error of the mean: std/sqrt(n); of the sample std: about std/sqrt(2n)
    assert torch.all((samples.mean(0) - mean).abs() <= 5 * std / math.sqrt(n))
    assert torch.all((samples.std(0) - std).abs() <= 5 * std / math.sqrt(2 * n))
    # the dimensions are independent
    corr = torch.corrcoef(samples.T)
    assert torch.all((corr - torch.eye(3, dtype=corr.dtype)).abs() <= 5 / math.sqrt(n))


def test_required_inputs_match_action_spaces():
    assert Categorical.required_inputs(Discrete(7)) == 7
    assert DiagGaussian.required_inputs(Box(np.zeros((2, 3)), np.ones((2, 3)))) == 12


# ------------------------------------------------------------------ weights: names


def test_mlp_weights_have_framework_neutral_names_and_in_out_kernels(tmp_path):
    policy = make_policy(tmp_path)
    shapes = {name: w.shape for name, w in policy.get_weights().items()}
    assert shapes == {
        "policy/hidden_0/kernel": (4, 16),
        "policy/hidden_0/bias": (16,),
        "policy/hidden_1/kernel": (16, 8),
        "policy/hidden_1/bias": (8,),
        "value/hidden_0/kernel": (4, 16),
        "value/hidden_0/bias": (16,),
        "value/hidden_1/kernel": (16, 8),
        "value/hidden_1/bias": (8,),
        "policy/output/kernel": (8, 2),
        "policy/output/bias": (2,),
        "value/output/kernel": (8, 1),
        "value/output/bias": (1,),
    }
    assert all(w.dtype == np.float32 for w in policy.get_weights().values())


def test_box_actions_export_policy_log_std(tmp_path):
    policy = make_policy(
        tmp_path, PENDULUM_OBS, PENDULUM_ACT, env="Pendulum-v1", model={"init_log_std": -0.5}
    )
    weights = policy.get_weights()
    assert weights["policy/log_std"].shape == (1,)
    np.testing.assert_allclose(weights["policy/log_std"], [-0.5])
    assert weights["policy/output/kernel"].shape == (8, 1)
    assert weights["policy/hidden_0/kernel"].shape == (3, 16)


def test_shared_layers_are_exported_under_shared_prefix(tmp_path):
    policy = make_policy(tmp_path, model={"vf_share_layers": True})
    shapes = {name: w.shape for name, w in policy.get_weights().items()}
    assert shapes == {
        "shared/hidden_0/kernel": (4, 16),
        "shared/hidden_0/bias": (16,),
        "shared/hidden_1/kernel": (16, 8),
        "shared/hidden_1/bias": (8,),
        "policy/output/kernel": (8, 2),
        "policy/output/bias": (2,),
        "value/output/kernel": (8, 1),
        "value/output/bias": (1,),
    }


@pytest.mark.parametrize("numpy_inference", [True, False], ids=["numpy-acting", "torch-acting"])
@pytest.mark.parametrize(
    ("obs_space", "act_space", "env", "shared"),
    [
        (CARTPOLE_OBS, Discrete(2), "CartPole-v1", False),
        (CARTPOLE_OBS, Discrete(2), "CartPole-v1", True),
        (PENDULUM_OBS, PENDULUM_ACT, "Pendulum-v1", False),
    ],
    ids=["discrete", "discrete-shared", "box"],
)
def test_numpy_forward_pass_on_exported_weights_reproduces_policy_outputs(
    tmp_path, obs_space, act_space, env, shared, numpy_inference
):
    """Names and [in, out] layout mean what they say: numpy alone rebuilds the network."""
    policy = make_policy(
        tmp_path,
        obs_space,
        act_space,
        env=env,
        model={"vf_share_layers": shared, "numpy_inference": numpy_inference},
    )
    assert (policy.fast_actor is not None) == numpy_inference
    # Non-zero biases and log_std so that every weight matters.
    rng = np.random.default_rng(3)
    weights = {
        k: (v + 0.1 * rng.normal(size=v.shape)).astype(np.float32) for k, v in policy.get_weights().items()
    }
    policy.set_weights(weights)
    obs = random_observations(10, obs_space.size, seed=4)
    expected_dist, expected_values = numpy_forward(
        weights, obs, hidden_layers=2, shared=shared, continuous=isinstance(act_space, Box)
    )
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected_dist, rtol=1e-5, atol=1e-5)
    actions, _, extras = policy.compute_actions(timestep_of(obs, act_space), explore=False)
    np.testing.assert_allclose(extras[SampleBatch.VF_PREDS], expected_values, rtol=1e-5, atol=1e-5)
    if isinstance(act_space, Discrete):
        np.testing.assert_array_equal(actions, expected_dist.argmax(-1))
    else:
        np.testing.assert_allclose(actions, expected_dist[:, :1], rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------- weights: round trips


def test_get_set_weights_round_trip(tmp_path):
    policy = make_policy(tmp_path)
    rng = np.random.default_rng(0)
    new = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in policy.get_weights().items()}
    policy.set_weights(new)
    assert_weights_equal(policy.get_weights(), new)


def test_get_weights_returns_copies(tmp_path):
    policy = make_policy(tmp_path)
    weights = policy.get_weights()
    before = {k: v.copy() for k, v in weights.items()}
    for value in weights.values():
        value += 1.0
    assert_weights_equal(policy.get_weights(), before)


def test_set_weights_with_wrong_shape_raises_value_error_naming_the_weight(tmp_path):
    policy = make_policy(tmp_path)
    weights = policy.get_weights()
    weights["value/output/bias"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match="value/output/bias"):
        policy.set_weights(weights)


def test_set_weights_shape_error_reports_kernel_shapes_in_neutral_in_out_layout(tmp_path):
    policy = make_policy(tmp_path)
    weights = policy.get_weights()
    weights["policy/hidden_0/kernel"] = np.zeros((5, 16), dtype=np.float32)  # [in, out], in should be 4
    with pytest.raises(ValueError, match="policy/hidden_0/kernel") as info:
        policy.set_weights(weights)
    # The caller passed (5, 16) and the model wants (4, 16) in the neutral layout the
    # caller works in; torch's internal [out, in] layout must not leak into the message.
    assert "(5, 16)" in str(info.value)
    assert "(4, 16)" in str(info.value)


def test_set_weights_with_missing_name_raises_value_error_naming_the_weight(tmp_path):
    policy = make_policy(tmp_path)
    weights = policy.get_weights()
    del weights["policy/hidden_1/bias"]
    with pytest.raises(ValueError, match="policy/hidden_1/bias"):
        policy.set_weights(weights)


def test_failed_set_weights_leaves_the_model_unchanged(tmp_path):
    policy = make_policy(tmp_path)
    before = policy.get_weights()
    rng = np.random.default_rng(0)
    other = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in before.items()}
    other["value/output/bias"] = np.zeros(3, dtype=np.float32)  # the last parameter is wrong
    with pytest.raises(ValueError):
        policy.set_weights(other)
    assert_weights_equal(policy.get_weights(), before)


@pytest.mark.parametrize("shared", [False, True], ids=["separate", "shared"])
def test_weights_moved_between_policies_give_identical_distribution_inputs(tmp_path, shared):
    source = make_policy(
        tmp_path, PENDULUM_OBS, PENDULUM_ACT, env="Pendulum-v1", model={"vf_share_layers": shared}
    )
    target = make_policy(
        tmp_path, PENDULUM_OBS, PENDULUM_ACT, env="Pendulum-v1", model={"vf_share_layers": shared}
    )
    obs = random_observations(16, 3)
    # different random initialisation before ...
    assert not np.array_equal(source.action_distribution_inputs(obs), target.action_distribution_inputs(obs))
    target.set_weights(source.get_weights())
    # ... identical outputs after
    np.testing.assert_array_equal(
        source.action_distribution_inputs(obs), target.action_distribution_inputs(obs)
    )


# ------------------------------------------------------------------- policy state


def test_get_state_set_state_round_trip_includes_optimizer_and_rng(tmp_path):
    first = make_policy(tmp_path)
    batch = training_batch(first, seed=0)
    first.set_global_timestep(640)
    first.learn_on_batch(batch)
    first.rng.random(3)  # move the policy's numpy rngs away from their seeds
    first.compute_actions(timestep_of(random_observations(5, 4), CARTPOLE_ACT), explore=True)
    state = first.get_state()
    optimizer_keys = [key for key in state.arrays if key.startswith("optimizer/")]
    assert optimizer_keys, "no optimizer tensors in the policy state"
    assert any(np.any(state.arrays[key] != 0) for key in optimizer_keys)

    second = make_policy(tmp_path)
    fresh_state = second.get_state()
    assert fresh_state.meta != state.meta  # counters, rng and optimizer steps differ before
    second.set_state(state)
    restored = second.get_state()

    assert set(restored.arrays) == set(state.arrays)
    for key, value in state.arrays.items():
        assert restored.arrays[key].dtype == value.dtype, key
        assert restored.arrays[key].shape == value.shape, key
        np.testing.assert_array_equal(restored.arrays[key], value, err_msg=key)
    assert restored.meta == state.meta
    assert_weights_equal(second.get_weights(), first.get_weights())
    assert second.rng.bit_generator.state == first.rng.bit_generator.state
    assert second.global_timestep == 640
    assert second.num_grad_updates == first.num_grad_updates == 4  # 2 epochs x 2 minibatches

    # Identical exploration from here on ...
    timestep = timestep_of(random_observations(32, 4, seed=5), CARTPOLE_ACT)
    actions_first, _, extras_first = first.compute_actions(timestep, explore=True)
    actions_second, _, extras_second = second.compute_actions(timestep, explore=True)
    np.testing.assert_array_equal(actions_first, actions_second)
    np.testing.assert_array_equal(
        extras_first[SampleBatch.ACTION_LOGP], extras_second[SampleBatch.ACTION_LOGP]
    )
    # ... and identical learning: same minibatch order, same Adam moments.
    next_batch = training_batch(first, seed=1)
    stats_first = first.learn_on_batch(next_batch)
    stats_second = second.learn_on_batch(next_batch)
    assert_weights_equal(second.get_weights(), first.get_weights())
    assert stats_first == stats_second


def test_learning_from_a_fresh_policy_differs_without_optimizer_state(tmp_path):
    """Control for the round-trip test: weights and rng alone do not reproduce the next update."""
    first = make_policy(tmp_path)
    first.learn_on_batch(training_batch(first, seed=0))
    second = make_policy(tmp_path)
    second.set_weights(first.get_weights())
    second.rng.bit_generator.state = first.rng.bit_generator.state
    next_batch = training_batch(first, seed=1)
    first.learn_on_batch(next_batch)
    second.learn_on_batch(next_batch)
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(first.get_weights().values(), second.get_weights().values(), strict=True)
    )


def test_policy_state_meta_is_json_serialisable(tmp_path):
    import json

    policy = make_policy(tmp_path)
    policy.learn_on_batch(training_batch(policy))
    state = policy.get_state()
    assert json.loads(json.dumps(state.meta)) == state.meta
    for value in state.arrays.values():
        assert isinstance(value, np.ndarray)
        assert value.dtype != object


# ---------------------------------------------------------------- observation spaces


def test_flatten_observations_one_hot_encodes_discrete():
    out = flatten_observations(Discrete(5), np.array([0, 3, 4, 3]))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.eye(5, dtype=np.float32)[[0, 3, 4, 3]])


def test_flatten_observations_flattens_boxes_to_float32():
    obs = np.arange(2 * 3 * 2, dtype=np.float64).reshape(2, 3, 2)
    out = flatten_observations(Box(np.zeros((3, 2)), np.ones((3, 2))), obs)
    assert out.dtype == np.float32
    assert out.shape == (2, 6)
    np.testing.assert_array_equal(out, obs.reshape(2, 6))


def test_policy_on_discrete_observations_feeds_one_hot_vectors(tmp_path):
    policy = make_policy(tmp_path, Discrete(6), Discrete(3), env="FrozenLake-v1")
    weights = policy.get_weights()
    assert weights["policy/hidden_0/kernel"].shape == (6, 16)
    obs = np.array([0, 5, 2, 2])
    expected, _ = numpy_forward(weights, np.eye(6, dtype=np.float32)[obs], hidden_layers=2)
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected, rtol=1e-5, atol=1e-6)
    actions, _, _ = policy.compute_actions(timestep_of(obs, Discrete(3)))
    assert actions.shape == (4,)
    assert actions.dtype == np.int64


def test_ppo_trains_on_discrete_observation_env(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path, env="FrozenLake-v1", model={"hidden_sizes": [8]}))
    result = trainer.train()
    assert result["timesteps_total"] > 0
    assert trainer.policy.get_weights()["policy/hidden_0/kernel"].shape == (16, 8)


# --------------------------------------------------------------------- custom models


def test_custom_model_with_options_is_used_by_ppo_trainer(tmp_path, make_trainer, custom_models):
    raw = raw_config(
        tmp_path,
        model={"custom": "custom_models:TinyActorCritic", "custom_options": {"hidden": 6, "scale": 0.5}},
    )
    trainer = make_trainer(raw)
    model = trainer.policy.model
    assert isinstance(model, custom_models.TinyActorCritic)
    assert (model.hidden, model.scale, model.num_outputs) == (6, 0.5, 2)
    built = custom_models.TinyActorCritic.built_with[-1]
    assert built["model_config"].custom_options == {"hidden": 6, "scale": 0.5}
    # no weight_names(): exported under the torch parameter names, as is
    before = trainer.policy.get_weights()
    assert {k: v.shape for k, v in before.items()} == {
        "body.weight": (6, 4),
        "body.bias": (6,),
        "pi.weight": (2, 6),
        "pi.bias": (2,),
        "vf.weight": (1, 6),
        "vf.bias": (1,),
    }
    result = trainer.train()
    assert result["training_iteration"] == 1
    assert math.isfinite(result["learner/total_loss"])
    after = trainer.policy.get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before), "the custom model was not trained"


def test_custom_model_from_missing_module_raises_plugin_error(tmp_path, make_trainer):
    raw = raw_config(tmp_path, model={"custom": "rlgear_no_such_module_xyz:Model"})
    with pytest.raises(PluginError, match=r"model\.custom.*rlgear_no_such_module_xyz"):
        make_trainer(raw)


def test_custom_model_missing_class_raises_plugin_error(tmp_path, make_trainer, custom_models):
    raw = raw_config(tmp_path, model={"custom": "custom_models:NoSuchClass"})
    with pytest.raises(PluginError, match="NoSuchClass"):
        make_trainer(raw)


def test_custom_model_that_is_not_an_nn_module_raises_plugin_error(tmp_path, make_trainer, custom_models):
    raw = raw_config(tmp_path, model={"custom": "custom_models:NotAModule"})
    with pytest.raises(PluginError, match=r"custom_models:NotAModule.*torch\.nn\.Module"):
        make_trainer(raw)


def test_custom_model_with_unknown_option_raises_config_error(tmp_path, make_trainer, custom_models):
    raw = raw_config(
        tmp_path, model={"custom": "custom_models:TinyActorCritic", "custom_options": {"bogus": 1}}
    )
    with pytest.raises(ConfigError, match="bogus"):
        make_trainer(raw)


def test_custom_model_spec_without_class_raises_plugin_error(tmp_path, make_trainer):
    with pytest.raises(PluginError, match="module:Name"):
        make_trainer(raw_config(tmp_path, model={"custom": "custom_models"}))


# ------------------------------------------------------------------------ lr schedule


def test_lr_schedule_changes_cur_lr_as_timesteps_advance(tmp_path, make_trainer):
    schedule = [[0, 1e-3], [150, 1e-4]]
    trainer = make_trainer(
        raw_config(tmp_path, model={"hidden_sizes": [8]}, training={"lr_schedule": schedule})
    )
    lrs = []
    for _ in range(3):
        result = trainer.train()
        expected = piecewise_linear(schedule, result["timesteps_total"])
        assert result["learner/cur_lr"] == pytest.approx(expected, rel=1e-12)
        lrs.append(result["learner/cur_lr"])
    assert lrs[0] > lrs[1] > lrs[2]
    assert lrs[2] == pytest.approx(1e-4)  # past the last point: constant


def test_constant_lr_without_schedule(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path, model={"hidden_sizes": [8]}, training={"lr": 0.0025}))
    assert trainer.train()["learner/cur_lr"] == pytest.approx(0.0025)
