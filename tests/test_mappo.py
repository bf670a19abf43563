"""mappo (issue 36 item 1): config errors, the env's global state, shared and separate actors,
PettingZoo Parallel and AEC envs, single-agent envs, checkpoints, and acting with the actor alone
(``rlgear.load``, the numpy runtime, ``rlgear evaluate``, torch weights on TF)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import rlgear
from rlgear import inference
from rlgear.discovery import registry
from rlgear.errors import RLGearError
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS, needs_tf

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

ENVS = "tests.mappo_envs"
SEPARATE = {"policies": {"pa": {}, "pb": {}}, "policy_mapping": {"a": "pa", "b": "pb"}}


def mappo_config(env: str | dict = "make_hidden_bonus", kwargs: dict | None = None, **sections) -> dict:
    """A small mappo run on a ``tests.mappo_envs`` factory (or on the ``env`` section given)."""
    config = {
        "algorithm": "mappo",
        "seed": 3,
        "env": env
        if isinstance(env, dict)
        else {"adapter": "vector", "name": f"{ENVS}:{env}", "kwargs": dict(kwargs or {})},
        "workers": {"num_envs_per_worker": 4, "rollout_fragment_length": 16},
        "training": {
            "train_batch_size": 64,
            "sgd_minibatch_size": 32,
            "num_sgd_iter": 2,
            "value_normalization": True,
        },
        "model": {"hidden_sizes": [16]},
        "logging": {"tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


def mappo():
    return registry.load_algorithm("mappo")


# --- config -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("section", "values", "key"),
    [
        ("training", {"critic_input": "global"}, "training.critic_input"),
        ("training", {"use_sde": True}, "training.use_sde"),
        ("model", {"vf_share_layers": True}, "model.vf_share_layers"),
        ("model", {"critic_hidden_sizes": [16, 0]}, "model.critic_hidden_sizes"),
        ("model", {"lstm": True}, "model.lstm"),
        ("model", {"attention": True}, "model.attention"),
        ("workers", {"batch_mode": "complete_episodes"}, "workers.batch_mode"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(section, values, key):
    with pytest.raises(RLGearError) as raised:
        mappo()(mappo_config(**{section: values}))
    message = str(raised.value)
    assert key in message and "\n" not in message, message


def test_critic_input_state_on_an_env_without_a_state_names_the_key():
    with pytest.raises(
        RLGearError, match=r"training\.critic_input: 'state' needs an env that gives a global"
    ) as e:
        mappo()(mappo_config(training={"critic_input": "state"}, env="make_scripted"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("state", "mode", "dim"), [(True, "state", 10 + 2), (False, "joint_obs", 8 + 2)])
def test_auto_takes_the_state_when_the_env_gives_one_else_the_joint_observation(state, mode, dim):
    trainer = mappo()(mappo_config(kwargs={"state": state}))
    try:
        spec = trainer.policy_map["default"].critic_spec
        assert (spec.mode, spec.dim) == (mode, dim)
        batch = trainer.workers.local_worker.sample().policy_batches["default"]
        assert ("state" in batch) is state  # recorded only when the env gives one
        assert batch["critic_obs"].shape[1] == dim
    finally:
        trainer.stop()


def test_a_run_without_a_state_records_no_state_column_and_one_with_it_records_the_env_state():
    ppo = registry.load_algorithm("ppo")
    for state in (False, True):
        config = mappo_config("make_scripted", {"state": state}, algorithm="ppo")
        del config["training"]["value_normalization"]  # a mappo key
        trainer = ppo(config)
        try:
            rows = trainer.workers.local_worker.sample().policy_batches["default"]
        finally:
            trainer.stop()
        assert ("state" in rows) is state
        if state:  # the scripted state is [env slot, step, 100]; observations [agent, env slot, step]
            np.testing.assert_array_equal(rows["state"][:, :2], rows[SB.OBS][:, 1:])
            assert (rows["state"][:, 2] == 100).all()


def test_the_env_check_holds_the_state_to_its_state_space():
    from rlgear.spaces import Box
    from rlgear.testing import ContractError, check_multi_agent_env
    from tests.mappo_envs import make_scripted

    assert check_multi_agent_env(make_scripted(2, state=True), steps=20)["episodes"] > 0
    no_space = make_scripted(2, state=True)
    no_space.state_space = None  # gives a state it does not declare
    with pytest.raises(ContractError, match="state is set but the env's state_space is None"):
        check_multi_agent_env(no_space, steps=5)
    wrong = make_scripted(2, state=True)
    wrong.state_space = Box(np.zeros(4), np.ones(4))
    with pytest.raises(ContractError, match=r"state must have shape \(2, 4\), got \(2, 3\)"):
        check_multi_agent_env(wrong, steps=5)
    missing = make_scripted(2, state=False)
    missing.state_space = Box(np.zeros(3), np.ones(3))
    with pytest.raises(ContractError, match="has a state_space but the step's state is None"):
        check_multi_agent_env(missing, steps=5)


# --- actors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("separate", [False, True], ids=["shared-actor", "separate-actors"])
def test_shared_and_separate_actors_learn_with_the_centralised_critic(backend, separate):
    config = mappo_config(backend=backend, **({"multiagent": SEPARATE} if separate else {}))
    trainer = mappo()(config)
    try:
        policies = trainer.policy_map
        assert sorted(policies) == (["pa", "pb"] if separate else ["default"])
        before = {pid: p.get_weights() for pid, p in policies.items()}
        for _ in range(2):
            result = trainer.train()
        for pid, policy in policies.items():
            assert policy.critic_spec.mode == "state" and policy.critic_spec.dim == 12
            after = policy.get_weights()
            for name in ("policy/output/kernel", "critic/output/kernel", "critic/value_norm/debiasing_term"):
                assert not np.array_equal(before[pid][name], after[name]), (pid, name)
        assert result["agent_timesteps_total"] == 2 * result["timesteps_total"]
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_acting_in_the_framework_without_the_numpy_twin(backend):
    trainer = mappo()(mappo_config(backend=backend, model={"numpy_inference": False}))
    try:
        assert trainer.policy.fast_actor is None
        result = trainer.train()
        assert result["timesteps_total"] > 0 and np.isfinite(result["learner/vf_loss"])
    finally:
        trainer.stop()


def test_a_single_agent_env_runs_as_ppo_with_the_critic_on_the_observation():
    config = mappo_config({"adapter": "gymnasium", "name": "CartPole-v1", "kwargs": {}})
    trainer = mappo()(config)
    try:
        policy = trainer.policy
        assert (policy.critic_spec.mode, policy.critic_spec.dim) == ("joint_obs", 4 + 1)
        trainer.train()
        batch = trainer.workers.local_worker.sample()
        np.testing.assert_array_equal(batch["critic_obs"][:, :4], batch[SB.OBS])
        assert (batch["critic_obs"][:, 4] == 1).all()
    finally:
        trainer.stop()


# --- PettingZoo -------------------------------------------------------------------------------------
PETTINGZOO = {
    "parallel-state": ("mpe2:simple_spread_v3", {"max_cycles": 10, "continuous_actions": False}, "state"),
    "aec-state": ("mpe2:simple_spread_v3.env", {"max_cycles": 10, "continuous_actions": False}, "state"),
    "aec-turns-joint-obs": ("pettingzoo.classic:connect_four_v3", {}, "joint_obs"),
}


@pytest.mark.parametrize("kind", sorted(PETTINGZOO))
def test_parallel_and_aec_pettingzoo_envs_run_a_few_iterations(kind):
    pytest.importorskip("pettingzoo", reason="needs the pettingzoo extra")
    name, kwargs, mode = PETTINGZOO[kind]
    if name.startswith("mpe2"):
        pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2's particle envs)")
    env = {"adapter": "pettingzoo", "name": name, "kwargs": kwargs}
    trainer = mappo()(mappo_config(env, workers={"num_envs_per_worker": 2}))
    try:
        policy = trainer.policy_map["default"]
        assert policy.critic_spec.mode == mode
        for _ in range(2):
            result = trainer.train()
        assert result["timesteps_total"] > 0 and np.isfinite(result["learner/vf_loss"])
    finally:
        trainer.stop()


def test_the_pettingzoo_adapter_gives_the_envs_state_where_pettingzoo_has_one():
    pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2's particle envs)")
    from rlgear.testing import check_multi_agent_env

    adapter = registry.load_env_adapter("pettingzoo")()
    for name in ("mpe2:simple_spread_v3", "mpe2:simple_spread_v3.env"):
        env = adapter.make(name, 2, kwargs={"max_cycles": 5, "continuous_actions": False})
        assert env.state_space.shape == (54,)
        ts = env.reset(seed=0)
        np.testing.assert_array_equal(ts.state[1], env.envs[1].state())
        check_multi_agent_env(env, steps=30)  # closes it
    board = adapter.make("pettingzoo.classic:connect_four_v3", 1, kwargs={})
    try:
        assert board.state_space is None and board.reset(seed=0).state is None
    finally:
        board.close()


# --- checkpoints and acting --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_round_trip_resumes_learning_identically(tmp_path, backend):
    config = mappo_config(backend=backend, multiagent=SEPARATE)
    trainer = mappo()(config)
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        batch = trainer.workers.local_worker.sample()
        expected = {
            pid: trainer.policy_map[pid].learn_on_batch(rows) for pid, rows in batch.policy_batches.items()
        }
        expected_weights = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
    finally:
        trainer.stop()
    fresh = mappo()(config)
    try:
        fresh.restore(path)
        for pid, rows in batch.policy_batches.items():
            stats = fresh.policy_map[pid].learn_on_batch(rows)
            assert stats["vf_loss"] == expected[pid]["vf_loss"]
            assert stats["value_norm_mean"] == expected[pid]["value_norm_mean"]
            weights = fresh.policy_map[pid].get_weights()
            assert sorted(weights) == sorted(expected_weights[pid])
            for name, value in expected_weights[pid].items():
                np.testing.assert_array_equal(weights[name], value, err_msg=name)
    finally:
        fresh.stop()


def test_load_the_numpy_runtime_and_evaluate_act_with_the_actor_alone(tmp_path):
    trainer = mappo()(mappo_config(multiagent=SEPARATE))
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        policy = trainer.policy_map["pb"]
    finally:
        trainer.stop()
    obs = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 1]]
    logits = policy.action_distribution_inputs(obs)
    loaded = rlgear.load(path, policy_id="pb")
    np.testing.assert_array_equal(loaded.compute_actions(obs, explore=False), logits.argmax(-1))
    runtime = inference.load(path, policy_id="pb")
    np.testing.assert_allclose(runtime.policy.action_distribution_inputs(obs), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(runtime.compute_actions(obs), logits.argmax(-1))
    from rlgear.run.agent import evaluate_checkpoint

    evaluation = evaluate_checkpoint(path, episodes=2)
    assert [episode["length"] for episode in evaluation.episodes] == [8, 8]


@pytest.mark.skipif(
    importlib.util.find_spec("onnxscript") is None or importlib.util.find_spec("onnxruntime") is None,
    reason="needs the export extra: pip install 'rlgear[export]'",
)
def test_export_acts_as_the_actor(tmp_path):
    from rlgear.export import check, export

    trainer = mappo()(mappo_config())
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
    finally:
        trainer.stop()
    result = export(path, "onnx", tmp_path / "policy.onnx")
    report = check(result.path, n=200)
    assert report.ok and report.actions_equal == 200, report.problems


@needs_tf
def test_a_torch_checkpoint_acts_and_values_the_same_on_tf():
    torch_trainer = mappo()(mappo_config(backend="torch"))
    tf_trainer = mappo()(mappo_config(backend="tf"))
    try:
        torch_trainer.train()
        source, target = torch_trainer.policy, tf_trainer.policy
        assert sorted(source.get_weights()) == sorted(target.get_weights())
        target.set_weights(source.get_weights())
        rng = np.random.default_rng(0)
        obs = rng.normal(size=(16, 4)).astype(np.float32)
        critic_obs = rng.normal(size=(16, source.critic_spec.dim)).astype(np.float32)
        np.testing.assert_allclose(
            target.action_distribution_inputs(obs),
            source.action_distribution_inputs(obs),
            rtol=1e-5,
            atol=1e-5,
        )
        np.testing.assert_allclose(
            target.critic_values(critic_obs), source.critic_values(critic_obs), rtol=1e-5, atol=1e-5
        )
        assert target.value_norm.mean_var() == source.value_norm.mean_var()
    finally:
        torch_trainer.stop()
        tf_trainer.stop()


@pytest.mark.slow
def test_remote_workers_build_the_critic_input_and_denormalize_with_the_learners_statistics(ray_session):
    """About 20 s (a local Ray, one remote worker): the worker builds each row's critic input in its
    own process and holds the learner's value statistics with the weights."""
    trainer = mappo()(mappo_config(multiagent=SEPARATE, workers={"num_workers": 1, "num_envs_per_worker": 2}))
    try:
        for _ in range(2):
            result = trainer.train()
        assert np.isfinite(result["learner/pa/vf_loss"]) and result["learner/pb/value_norm_std"] > 0
        local = trainer.workers.local_worker.get_weights()
        (remote,) = trainer.workers.foreach_worker(lambda w: w.get_weights())[1:]
        for pid in ("pa", "pb"):
            assert local[pid]["critic/value_norm/debiasing_term"][0] > 0
            for key, value in local[pid].items():
                np.testing.assert_array_equal(remote[pid][key], value, err_msg=f"{pid}: {key}")
    finally:
        trainer.stop()


def test_value_normalization_is_off_unless_asked_for():
    """The default is false (docs/multi-agent.md says why); asking for it gives the policy statistics."""
    for asked, expected in ((None, False), (True, True)):
        config = mappo_config()
        del config["training"]["value_normalization"]
        if asked is not None:
            config["training"]["value_normalization"] = asked
        trainer = mappo()(config)
        try:
            policy = trainer.workers.local_worker.policy_map["default"]
            assert (policy.value_norm is not None) is expected
            assert any("value_norm" in k for k in policy.get_weights()) is expected
        finally:
            trainer.stop()
