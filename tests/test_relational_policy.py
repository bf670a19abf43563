"""Relational policies (``model.relational``): config errors, Box-World in both observation modes on
both backends, portable weights and checkpoints, and the algorithms that refuse the key."""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import CARTPOLE_ACT, random_weights

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

RELATIONAL = {
    "relational": True,
    "relational_dim": 8,
    "relational_heads": 2,
    "relational_blocks": 2,
    "hidden_sizes": [16],
}
BOXWORLD = {"size": 6, "solution_length": 1, "num_distractors": 0, "max_steps": 30}


def raw_config(tmp_path, algorithm="ppo", backend="torch", mode="entities", model=None, **sections):
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 0,
        "env": {"name": "rlgear/BoxWorld-v0", "kwargs": {**BOXWORLD, "observation_mode": mode}},
        "workers": {"num_envs_per_worker": 2},
        "training": {"train_batch_size": 64},
        "model": {**RELATIONAL, **(model or {})},
        "stop": {"training_iteration": 2},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def resolve(tmp_path, algorithm="ppo", model=None, backend="torch"):
    raw = raw_config(tmp_path, algorithm, backend, model=model)
    if algorithm != "ppo":
        raw.pop("training")
    return config_mod.resolve(raw)


# --- config -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "pattern"),
    [
        ({"lstm": True}, r"model\.relational: .* does not combine with model\.lstm"),
        ({"attention": True}, r"model\.relational: .* does not combine with model\.attention"),
        ({"custom": "tests.custom_models:TinyModel"}, r"model\.relational: .* with model\.custom"),
        ({"relational_heads": 3}, r"model\.relational_heads: must divide model\.relational_dim \(8\)"),
        ({"relational_dim": 0}, r"model\.relational_dim: expected a positive number"),
        ({"relational_heads": 0}, r"model\.relational_heads: expected a positive number"),
        ({"relational_blocks": 0}, r"model\.relational_blocks: expected a positive number"),
        ({"relational_mlp_dim": -1}, r"model\.relational_mlp_dim: expected a positive number"),
        ({"observation_filter": "mean_std"}, r"model\.observation_filter: model\.relational reads all-zero"),
    ],
)
def test_config_errors_name_the_key(tmp_path, model, pattern):
    with pytest.raises(ConfigError, match=pattern) as raised:
        resolve(tmp_path, model=model)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("algorithm", ["dqn", "sac", "pqn", "qmix", "mappo", "trpo", "marwil"])
def test_algorithms_with_their_own_networks_refuse_the_key(tmp_path, algorithm):
    with pytest.raises(ConfigError, match=rf"model\.relational: algorithm '{algorithm}' builds its own"):
        resolve(tmp_path, algorithm)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("space", "pattern"),
    [
        (Box(np.zeros(6), np.ones(6)), r"model\.relational: expects an image .* or a 2-D Box"),
        (Box(np.zeros((2, 3, 4, 5)), np.ones((2, 3, 4, 5))), r"model\.relational: expects an image"),
    ],
    ids=["flat", "rank-4"],
)
def test_observations_that_are_no_entity_set_are_refused(tmp_path, backend, space, pattern):
    config = resolve(tmp_path, backend=backend)
    policy_class = registry.load_algorithm("ppo").policy_class(backend)
    with pytest.raises(ConfigError, match=pattern):
        policy_class(space, Discrete(4), config)


# --- Box-World, both modes, both backends ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["ppo", "impala"])
@pytest.mark.parametrize("mode", ["entities", "pixels"])
def test_boxworld_trains_in_both_observation_modes(tmp_path, backend, algorithm, mode):
    raw = raw_config(tmp_path, algorithm, backend, mode)
    if mode == "pixels":
        raw["model"]["conv_filters"] = [[8, 2, 1]]  # an 8x8 image -> 7x7 cells of 8 channels
    if algorithm != "ppo":
        raw.pop("training")
    result = rlgear.train(raw)
    assert result["training_iteration"] == 2 and result["timesteps_total"] > 0
    assert np.isfinite(result["learner/policy_loss"]) and result["learner/num_grad_updates"] >= 1


# --- portable weights and checkpoints ------------------------------------------------------------------------
def entity_policy(tmp_path, backend):
    config = resolve(tmp_path, backend=backend)
    space = Box(np.zeros((5, 11), np.float32), np.ones((5, 11), np.float32))
    policy = registry.load_algorithm("ppo").policy_class(backend)(space, CARTPOLE_ACT, config)
    policy.set_weights(random_weights(policy.get_weights(), seed=5, gain=1.5))
    return policy


@pytest.mark.parametrize("source,target", [("torch", "tf"), ("tf", "torch")])
def test_weights_act_identically_on_the_other_backend(tmp_path, source, target):
    """Same neutral names and shapes; the same log-probabilities and values on sets with absent rows."""
    pytest.importorskip("tensorflow")
    a, b = entity_policy(tmp_path, source), entity_policy(tmp_path, target)
    assert a.fast_actor is None and b.fast_actor is None  # no numpy twin: the frameworks act
    assert {k: v.shape for k, v in a.get_weights().items()} == {
        k: v.shape for k, v in b.get_weights().items()
    }
    b.set_weights(a.get_weights())
    rng = np.random.default_rng(1)
    obs = rng.random(size=(6, 5, 11)).astype(np.float32)
    obs[rng.random(size=(6, 5)) < 0.4] = 0.0
    ts = TimeStep(
        step_type=np.full(6, StepType.MID, np.int32),
        reward=np.zeros(6, np.float32),
        discount=np.ones(6, np.float32),
        observation=obs,
        prev_action=np.zeros(6, np.int64),
        env_id=np.arange(6, dtype=np.int32),
    )
    actions_a, _, extras_a = a.compute_actions(ts, explore=False)
    actions_b, _, extras_b = b.compute_actions(ts, explore=False)
    np.testing.assert_array_equal(actions_a, actions_b)
    np.testing.assert_allclose(extras_a[SB.VF_PREDS], extras_b[SB.VF_PREDS], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(extras_a[SB.ACTION_LOGP], extras_b[SB.ACTION_LOGP], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["entities", "pixels"])
def test_a_torch_checkpoint_evaluates_identically_on_tf(tmp_path, mode):
    """``rlgear evaluate`` of a torch run gives the same greedy episodes under ``backend=tf``, and the
    loaded policies the same greedy actions."""
    pytest.importorskip("tensorflow")
    import gymnasium as gym

    from rlgear.run import agent

    raw = raw_config(tmp_path, "ppo", "torch", mode, stop={"training_iteration": 1})
    if mode == "pixels":
        raw["model"]["conv_filters"] = [[8, 2, 1]]
    rlgear.train(raw)
    (run_dir,) = (tmp_path / "runs").iterdir()
    original = agent.evaluate_checkpoint(run_dir, episodes=3)
    moved = agent.evaluate_checkpoint(run_dir, episodes=3, overrides=["backend=tf"])
    assert [e["episode_return"] for e in original.episodes] == [e["episode_return"] for e in moved.episodes]
    policies = [agent.load(run_dir, [f"backend={b}"]) for b in ("torch", "tf")]
    env = gym.make("rlgear/BoxWorld-v0", **BOXWORLD, observation_mode=mode)
    obs, _ = env.reset(seed=0)
    for _ in range(20):  # the loaded policies choose the same greedy actions along one trajectory
        actions = [p.compute_single_action(obs) for p in policies]
        assert actions[0] == actions[1]
        obs, _, terminated, truncated, _ = env.step(actions[0])
        if terminated or truncated:
            obs, _ = env.reset()


def test_the_plugins_matrix_names_the_algorithms_that_take_it(monkeypatch, capsys):
    from rlgear import cli

    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "model.relational: a2c, a3c, appo, impala, pg, ppo" in out[out.index("algorithm support") :]


def test_the_numpy_runtime_refuses_a_relational_checkpoint_in_one_line(tmp_path):
    """No numpy twin: ``rlgear.inference`` says so (``rlgear.load`` acts with the framework)."""
    import rlgear.inference
    from rlgear.run import agent

    rlgear.train(raw_config(tmp_path, stop={"training_iteration": 1}))
    (run_dir,) = (tmp_path / "runs").iterdir()
    with pytest.raises(ConfigError, match=r"model\.relational: .* has no numpy twin") as raised:
        rlgear.inference.load(run_dir)
    assert "\n" not in str(raised.value)
    assert agent.load(run_dir).compute_single_action(np.zeros((5, 11), np.float32)) in range(4)
