"""Exploration plugins (``exploration:``, entry-point group ``rlgear.exploration``): the contract's plumbing.

The wrapped postprocessing (intrinsic rewards on the right rows, 0 on LAST rows, the non-episodic
intrinsic GAE against an independent numpy reference, advantages mixed), episode returns staying
extrinsic, the module's weights and state riding with the policy's (weight sync, checkpoint round
trip with the running statistics), refusals and config errors, and the DeepChain env.
"""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear import exploration as xp
from rlgear.blocks.replay_buffers import n_step_transitions
from rlgear.discovery import registry
from rlgear.errors import ConfigError, PluginError
from rlgear.plugins.envs.deep_chain import DeepChain
from rlgear.plugins.envs.registration import register_envs
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.intrinsic import ExplorationPostprocess, forward_returns, nonepisodic_gae
from rlgear.sampling.postprocessing import add_gae, trainable_rows
from rlgear.timestep import StepType
from tests.conftest import needs_tf

pytest.importorskip("torch")

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


class FakeModule:
    """Intrinsic reward = 10 * index of next_obs + action; value = obs; scale 2."""

    def intrinsic_rewards(self, obs, actions, next_obs):
        return (10.0 * next_obs[:, 0] + actions).astype(np.float32)

    def reward_scale(self):
        return 2.0

    def intrinsic_values(self, obs):
        return obs[:, 0].astype(np.float32) * 0.1


def fragment():
    """``[T+1 = 6, B = 2]``: env 0 ends an episode at row 2 (terminated) and starts again at row 3;
    env 1 runs on and its bootstrap row (5) is a LAST."""
    steps = np.array([[FIRST, MID], [MID, MID], [LAST, MID], [FIRST, MID], [MID, MID], [MID, LAST]])
    obs = np.arange(12, dtype=np.float32).reshape(6, 2, 1)
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 1]]),
            SB.REWARDS: np.array([[0, 0], [1, 2], [3, 4], [0, 5], [6, 7], [8, 0]], np.float32),
            SB.DISCOUNTS: np.array([[1, 1], [1, 1], [0, 1], [1, 1], [1, 1], [1, 0]], np.float32),
            SB.STEP_TYPES: steps,
            SB.VF_PREDS: np.linspace(0.0, 1.1, 12, dtype=np.float32).reshape(6, 2),
        }
    )


def options(**kw):
    base = dict(intrinsic_coeff=0.5, extrinsic_coeff=2.0, intrinsic_gamma=0.9, intrinsic_gae_lambda=0.8)
    return SimpleNamespace(exploration=SimpleNamespace(**{**base, **kw}), training=SimpleNamespace(n_step=1))


def raw_intrinsic(frag):
    obs, actions, steps = frag[SB.OBS][..., 0], frag[SB.ACTIONS], frag[SB.STEP_TYPES]
    out = 10.0 * obs[1:] + actions[:-1]
    return np.where(steps[:-1] == LAST, 0.0, out)


def test_reward_mode_adds_the_scaled_intrinsic_reward_of_row_t_to_rewards_t_plus_1():
    frag, config = fragment(), options()
    policy = SimpleNamespace(exploration_module=FakeModule())
    seen = {}

    def identity(out, policy, config):
        seen["fragment"] = out
        return trainable_rows(out)

    rows = ExplorationPostprocess(identity, xp.REWARD_MODE)(frag, policy, config)
    raw = raw_intrinsic(frag)
    assert raw[2, 0] == 0.0  # the LAST row's action was ignored by the env: no intrinsic reward
    expected = frag[SB.REWARDS].astype(np.float64).copy()
    expected[1:] += 0.5 * raw / 2.0  # ALF layout: rewards[t+1] rewards the action at t
    np.testing.assert_allclose(seen["fragment"][SB.REWARDS], expected, rtol=1e-6)
    np.testing.assert_allclose(seen["fragment"][xp.INTRINSIC_REWARDS][:-1], raw)
    # the one-step next observation rides along, and the LAST row is dropped by the algorithm
    np.testing.assert_array_equal(
        rows[xp.NEXT_OBS][:, 0],
        trainable_rows(SB({**frag, "n": frag[SB.OBS][[1, 2, 3, 4, 5, 5]]}))["n"][:, 0],
    )
    assert len(rows) == 9
    # DQN's n-step rows (n=1): reward of the row = env reward + scaled intrinsic reward of its action
    dqn_rows = ExplorationPostprocess(lambda f, p, c: n_step_transitions(f, 1, 0.99), xp.REWARD_MODE)(
        frag, policy, config
    )
    body = trainable_rows(
        SB({SB.STEP_TYPES: frag[SB.STEP_TYPES], "r": np.concatenate([expected[1:], expected[:1]])})
    )
    np.testing.assert_allclose(dqn_rows[SB.REWARDS], body["r"], rtol=1e-6)


def test_forward_returns_run_through_episode_ends():
    rewards = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    np.testing.assert_allclose(forward_returns(rewards, 0.5), [[1.0, 0.0], [0.5, 2.0], [3.25, 1.0]])


def reference_gae(rewards, values, steps, gamma, lam):
    """Per env: drop the LAST rows (their transition is not real), then plain GAE over what is left,
    bootstrapping from the last kept value; a LAST bootstrap row keeps its own value."""
    num_steps, num_envs = rewards.shape
    out = np.zeros((num_steps, num_envs))
    for b in range(num_envs):
        kept = [t for t in range(num_steps) if steps[t, b] != LAST]
        chain = [*kept, num_steps]  # the bootstrap row ends every chain
        for i in range(len(kept) - 1, -1, -1):
            t, nxt = chain[i], chain[i + 1]
            if nxt < num_steps and steps[nxt, b] == LAST:  # pragma: no cover - kept rows skip LAST
                raise AssertionError
            delta = rewards[t, b] + gamma * values[nxt, b] - values[t, b]
            following = out[nxt, b] if nxt < num_steps else 0.0
            out[t, b] = delta + gamma * lam * following
    return out


def test_nonepisodic_gae_matches_the_numpy_reference():
    rng = np.random.default_rng(0)
    steps = rng.choice([MID, MID, MID, LAST], size=(9, 3))
    steps[0] = FIRST
    steps[1:][steps[:-1] == LAST] = FIRST
    rewards = np.where(steps[:-1] == LAST, 0.0, rng.random((8, 3)))
    values = rng.random((9, 3))
    got = nonepisodic_gae(rewards, values, steps, 0.9, 0.7)
    np.testing.assert_allclose(got, reference_gae(rewards, values, steps, 0.9, 0.7), rtol=1e-12)
    assert np.all(got[steps[:-1] == LAST] == 0.0)


def test_value_mode_mixes_extrinsic_and_intrinsic_advantages():
    frag, config = fragment(), options()
    policy = SimpleNamespace(exploration_module=FakeModule())

    def ppo(out, policy, config):
        return trainable_rows(add_gae(out, 0.99, 0.95))

    rows = ExplorationPostprocess(ppo, xp.VALUE_MODE)(frag, policy, config)
    plain = ppo(frag, policy, config)
    values = 0.1 * frag[SB.OBS][..., 0].astype(np.float64)
    intrinsic = nonepisodic_gae(raw_intrinsic(frag) / 2.0, values, frag[SB.STEP_TYPES], 0.9, 0.8)
    intrinsic_rows = trainable_rows(
        SB({SB.STEP_TYPES: frag[SB.STEP_TYPES], "a": np.concatenate([intrinsic, intrinsic[:1]])})
    )["a"]
    np.testing.assert_allclose(
        rows[SB.ADVANTAGES], 2.0 * plain[SB.ADVANTAGES] + 0.5 * intrinsic_rows, rtol=1e-5
    )
    np.testing.assert_allclose(
        rows[xp.INTRINSIC_VALUE_TARGETS],
        intrinsic_rows + trainable_rows(SB({SB.STEP_TYPES: frag[SB.STEP_TYPES], "v": values}))["v"],
        rtol=1e-5,
    )
    np.testing.assert_array_equal(rows[SB.REWARDS], plain[SB.REWARDS])  # value mode leaves rewards alone
    assert xp.INTRINSIC_ADVANTAGES not in rows


#: The DQN and V-trace families: the plugins add their intrinsic reward to the env's (the others:
#: value mode).
REWARD_MODE_ALGORITHMS = ("dqn", "qrdqn", "iqn", "impala", "appo")
VTRACE_ALGORITHMS = ("impala", "appo")


def chain_config(tmp_path, algorithm="dqn", **exploration):
    training = (
        {"env_steps_per_training_step": 16, "train_batch_size": 16, "learning_starts": 0}
        if algorithm in REWARD_MODE_ALGORITHMS and algorithm not in VTRACE_ALGORITHMS
        else {"train_batch_size": 64}
        if algorithm == "a2c" or algorithm in VTRACE_ALGORITHMS
        else {"train_batch_size": 64, "vf_sgd_minibatch_size": 32, "vf_num_sgd_iter": 1}
        if algorithm == "trpo"
        else {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1}
    )
    return {
        "algorithm": algorithm,
        "seed": 0,
        "env": {"name": "rlgear/DeepChain-v0", "kwargs": {"length": 6}},
        "workers": {
            "num_envs_per_worker": 4,
            **({"rollout_fragment_length": 16} if algorithm in VTRACE_ALGORITHMS else {}),
        },
        "model": {"hidden_sizes": [16]},
        "training": {**training, "min_env_steps_per_iteration": 64},
        "exploration": {
            "name": "rnd",
            "hidden_sizes": [16],
            "output_dim": 8,
            "value_hidden_sizes": [8],
            **exploration,
        },
        "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
    }


def make_trainer(config):
    resolved = config_mod.resolve(config)
    return registry.load_algorithm(resolved.algorithm)(resolved)


@pytest.mark.parametrize(
    ("algorithm", "backend"),
    [
        ("dqn", "torch"),
        ("ppo", "torch"),
        ("a2c", "torch"),
        ("trpo", "torch"),
        ("qrdqn", "torch"),
        ("iqn", "torch"),
        ("impala", "torch"),
        ("appo", "torch"),
        pytest.param("dqn", "tf", marks=needs_tf),
        pytest.param("ppo", "tf", marks=needs_tf),
        pytest.param("trpo", "tf", marks=needs_tf),
        pytest.param("qrdqn", "tf", marks=needs_tf),
        pytest.param("appo", "tf", marks=needs_tf),
    ],
)
def test_episode_returns_stay_extrinsic_and_stats_are_reported(tmp_path, algorithm, backend):
    trainer = make_trainer({**chain_config(tmp_path, algorithm, intrinsic_coeff=100.0), "backend": backend})
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    assert 0.0 <= result["episode_return_mean"] <= 1.0  # a huge intrinsic coefficient shows nowhere here
    assert result["learner/exploration/intrinsic_reward_mean"] > 0.0
    assert result["learner/exploration/predictor_loss"] > 0.0
    assert ("learner/exploration/intrinsic_value_loss" in result) == (algorithm not in REWARD_MODE_ALGORITHMS)


def test_checkpoint_round_trip_keeps_networks_running_statistics_and_optimizer(tmp_path):
    trainer = make_trainer(chain_config(tmp_path))
    other = make_trainer(chain_config(tmp_path, name="rnd"))
    try:
        trainer.train()
        snapshot = trainer.save_to_object()
        other.restore_from_object(snapshot)
        mine, theirs = trainer.policy.exploration_module, other.policy.exploration_module
        assert mine.obs_rms.count > 1 and mine.adam_step > 0
        for key, value in trainer.policy.get_weights().items():
            np.testing.assert_array_equal(other.policy.get_weights()[key], value, err_msg=key)
        assert any(k.startswith("exploration/obs_rms/") for k in snapshot["arrays"] if "policy" in k) or any(
            "exploration/obs_rms/mean" in k for k in snapshot["arrays"]
        )
        assert theirs.adam_step == mine.adam_step
        for key in mine.adam_m:
            np.testing.assert_array_equal(theirs.adam_m[key], mine.adam_m[key])
        # the same rows then train both the same way (generator state restored too)
        rows = SB(
            {
                SB.OBS: np.eye(8, dtype=np.float32)[:4],
                SB.ACTIONS: np.zeros(4, np.int64),
                xp.NEXT_OBS: np.eye(8, dtype=np.float32)[1:5],
                xp.INTRINSIC_REWARDS: np.ones(4, np.float32),
                xp.INTRINSIC_RETURNS: np.ones(4, np.float32),
            }
        )
        assert mine.learn(rows) == theirs.learn(rows)
        np.testing.assert_array_equal(
            mine.get_weights()["predictor/output/kernel"], theirs.get_weights()["predictor/output/kernel"]
        )
    finally:
        trainer.stop()
        other.stop()


def test_weight_sync_carries_the_module_and_its_statistics(tmp_path):
    """What WorkerSet.sync_weights sends a remote worker's policy: ``get_weights()`` of the learner's."""
    trainer = make_trainer(chain_config(tmp_path))
    try:
        trainer.train()
        learner_policy = trainer.policy
        worker_policy = type(learner_policy)(
            learner_policy.observation_space, learner_policy.action_space, learner_policy.config
        )
        before = worker_policy.exploration_module.obs_rms.count
        worker_policy.set_weights(learner_policy.get_weights())
        assert (
            worker_policy.exploration_module.obs_rms.count
            == learner_policy.exploration_module.obs_rms.count
            != before
        )
        x = np.eye(8, dtype=np.float32)[:3]
        np.testing.assert_allclose(
            worker_policy.exploration_module.intrinsic_rewards(x, np.zeros(3), x),
            learner_policy.exploration_module.intrinsic_rewards(x, np.zeros(3), x),
            rtol=1e-5,  # the same float32 weights; a matmul may sum in another order on other buffers
        )
        with pytest.raises(ValueError, match="predictor/output/kernel"):
            worker_policy.set_weights(
                {k: v for k, v in learner_policy.get_weights().items() if "predictor/output/kernel" not in k}
            )
    finally:
        trainer.stop()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"algorithm": "pg"},
            r"exploration\.name: exploration 'rnd' does not support algorithm 'pg' \(it supports: a2c, appo, dqn, impala, iqn, ppo, qrdqn, trpo\)",
        ),
        ({"learners": {"num_learners": 1}}, r"exploration\.name: .*learners\.num_learners: 0"),
        ({"exploration": {"name": "rnd", "lr": -1.0}}, r"exploration\.lr: expected a positive number"),
        ({"exploration": {"name": "rnd", "update_proportion": 0.0}}, r"exploration\.update_proportion"),
        (
            {"exploration": {"name": "rnd", "intrinsic_gamma": 1.5}},
            r"exploration\.intrinsic_gamma: expected a number in \[0, 1\]",
        ),
        (
            {"exploration": {"name": "rnd", "hidden_size": [4]}},
            r"exploration\.hidden_size: unknown key.*hidden_sizes",
        ),
        ({"exploration": {"name": 3}}, r"exploration\.name: expected an exploration plugin name"),
        (
            {"multiagent": {"policies": {"p0": {}}, "policy_mapping": {"*": "p0"}}},
            r"exploration\.name: exploration 'rnd' runs with one policy",
        ),
    ],
)
def test_config_errors_name_the_key(tmp_path, changes, match):
    config = {**chain_config(tmp_path), **changes}
    if changes.get("algorithm") == "pg":
        config["training"] = {"train_batch_size": 64}
    with pytest.raises(ConfigError, match=match):
        config_mod.resolve(config)


def test_unknown_plugin_is_named_with_what_is_installed(tmp_path):
    with pytest.raises(PluginError, match=r"exploration\.name: unknown exploration 'rndd'.*rnd"):
        config_mod.resolve({**chain_config(tmp_path), "exploration": {"name": "rndd"}})


def test_no_exploration_section_changes_nothing(tmp_path):
    config = chain_config(tmp_path)
    config.pop("exploration")
    resolved = config_mod.resolve(config)
    assert resolved.exploration.name is None
    again = config_mod.resolve({**config, "exploration": resolved.to_dict()["exploration"]})
    assert again.exploration == resolved.exploration  # a saved config.yaml reads back


def test_rnd_and_icm_are_registered():
    assert {"rnd", "icm"} <= set(registry.names("exploration"))
    assert registry.load_exploration("icm").algorithms == {
        "ppo": xp.VALUE_MODE,
        "a2c": xp.VALUE_MODE,
        "trpo": xp.VALUE_MODE,
        "dqn": xp.REWARD_MODE,
        "qrdqn": xp.REWARD_MODE,
        "iqn": xp.REWARD_MODE,
        "impala": xp.REWARD_MODE,
        "appo": xp.REWARD_MODE,
    }
    plugin = registry.load_exploration("rnd")
    assert issubclass(plugin, xp.Exploration) and plugin.mode("dqn") == xp.REWARD_MODE
    assert plugin.algorithms == registry.load_exploration("icm").algorithms


def test_deep_chain_layout_and_rewards():
    register_envs()  # what the gymnasium.envs entry point does when rlgear's env adapter loads
    env = gym.make("rlgear/DeepChain-v0", length=5, layout_seed=1)
    chain = env.unwrapped
    assert isinstance(chain, DeepChain) and set(chain.correct) == {0, 1}
    obs, _ = env.reset(seed=0)
    assert obs.argmax() == 0 and obs.shape == (7,)
    for depth, action in enumerate(chain.correct):
        obs, reward, terminated, _, _ = env.step(int(action))
        assert obs.argmax() == depth + 1
        assert (reward, terminated) == ((1.0, True) if depth == 4 else (0.0, False))
    env.reset()
    obs, reward, terminated, _, _ = env.step(1 - int(chain.correct[0]))  # falls off at depth 0 ...
    assert (obs.argmax(), reward, terminated) == (6, 0.0, False)  # ... and the episode goes on
    for step in range(1, 5):  # whatever it does, it stays fallen until the fixed horizon, unpaid
        obs, reward, terminated, _, _ = env.step(int(chain.correct[step]))
        assert (obs.argmax(), reward, terminated) == (6, 0.0, step == 4)
    env.reset()
    for depth, action in enumerate(chain.correct):  # falling at the last step pays nothing either
        obs, reward, terminated, _, _ = env.step(int(action) if depth < 4 else 1 - int(action))
    assert (obs.argmax(), reward, terminated) == (6, 0.0, True)
    assert not np.array_equal(DeepChain(20, 0).correct, DeepChain(20, 1).correct)
    assert 0 < DeepChain(20, 0).correct.sum() < 20  # "always the same action" is not the answer


@pytest.mark.parametrize("name", ["rnd", "icm"])
def test_rlgear_plugins_check_passes_the_built_ins(name):
    from rlgear.discovery.check import check_plugin

    report = check_plugin(name)
    assert report.kind == "exploration" and report.ok, report.describe_failures()
    checked = {f.check for f in report.findings}
    assert {"config class", "documented options", "algorithms", "torch module"} <= checked


def test_the_wrapped_postprocess_pickles_for_remote_workers():
    """Ray ships the postprocess function to each remote worker: the wrapper must pickle as it does."""
    import pickle

    from rlgear.plugins.algorithms.ppo import PPO
    from rlgear.sampling.intrinsic import wrap_postprocess

    resolved = config_mod.resolve(chain_config("/tmp", "ppo"))
    wrapped = wrap_postprocess(PPO.postprocess, resolved, "ppo")
    again = pickle.loads(pickle.dumps(wrapped))
    assert isinstance(again, ExplorationPostprocess) and again.mode == xp.VALUE_MODE
    assert again.postprocess is PPO.postprocess
    plain = config_mod.resolve({**chain_config("/tmp", "ppo"), "exploration": None})
    assert wrap_postprocess(PPO.postprocess, plain, "ppo") is PPO.postprocess


@needs_tf
def test_torch_weights_with_the_module_act_the_same_on_tf(tmp_path):
    """Neutral names: a torch policy's weights, the exploration module's included, load into a TF policy."""
    trainer = make_trainer(chain_config(tmp_path, "ppo"))
    tf_trainer = make_trainer({**chain_config(tmp_path, "ppo"), "backend": "tf"})
    try:
        trainer.train()
        tf_trainer.policy.set_weights(trainer.policy.get_weights())
        x = np.eye(8, dtype=np.float32)[:5]
        for method in ("intrinsic_values",):
            np.testing.assert_allclose(
                getattr(tf_trainer.policy.exploration_module, method)(x),
                getattr(trainer.policy.exploration_module, method)(x),
                rtol=1e-5,
                atol=1e-7,
            )
        np.testing.assert_allclose(
            tf_trainer.policy.exploration_module.intrinsic_rewards(x, np.zeros(5), x),
            trainer.policy.exploration_module.intrinsic_rewards(x, np.zeros(5), x),
            rtol=1e-5,
        )
    finally:
        trainer.stop()
        tf_trainer.stop()


def icm_config(tmp_path, algorithm="dqn"):
    config = chain_config(tmp_path, algorithm)
    config["exploration"] = {
        "name": "icm",
        "feature_dim": 8,
        "feature_hidden_sizes": [16],
        "inverse_hidden_sizes": [8],
        "forward_hidden_sizes": [8],
        "value_hidden_sizes": [8],
        "intrinsic_coeff": 100.0,
    }
    return config


@pytest.mark.parametrize(
    ("algorithm", "backend"),
    [
        ("dqn", "torch"),
        ("ppo", "torch"),
        ("trpo", "torch"),
        ("qrdqn", "torch"),
        ("iqn", "torch"),
        ("impala", "torch"),
        pytest.param("ppo", "tf", marks=needs_tf),
        pytest.param("iqn", "tf", marks=needs_tf),
    ],
)
def test_icm_trains_alongside_reports_its_losses_and_round_trips_through_a_checkpoint(
    tmp_path, algorithm, backend
):
    trainer = make_trainer({**icm_config(tmp_path, algorithm), "backend": backend})
    other = make_trainer({**icm_config(tmp_path, algorithm), "backend": backend, "seed": 1})
    try:
        result = trainer.train()
        assert 0.0 <= result["episode_return_mean"] <= 1.0  # a huge intrinsic coefficient shows nowhere here
        assert result["learner/exploration/intrinsic_reward_mean"] > 0.0
        assert (
            result["learner/exploration/inverse_loss"] > 0.0
            and result["learner/exploration/forward_loss"] > 0.0
        )
        assert ("learner/exploration/intrinsic_value_loss" in result) == (
            algorithm not in REWARD_MODE_ALGORITHMS
        )
        other.restore_from_object(trainer.save_to_object())
        mine, theirs = trainer.policy.exploration_module, other.policy.exploration_module
        assert mine.adam_step > 0 and theirs.adam_step == mine.adam_step
        for key, value in mine.get_weights().items():
            np.testing.assert_array_equal(theirs.get_weights()[key], value, err_msg=key)
        rows = SB(
            {
                SB.OBS: np.eye(8, dtype=np.float32)[:4],
                SB.ACTIONS: np.array([0, 1, 1, 0]),
                xp.NEXT_OBS: np.eye(8, dtype=np.float32)[1:5],
                xp.INTRINSIC_REWARDS: np.ones(4, np.float32),
                xp.INTRINSIC_RETURNS: np.ones(4, np.float32),
            }
        )
        assert mine.learn(rows) == theirs.learn(rows)  # optimizer and generator state came along
    finally:
        trainer.stop()
        other.stop()


def test_vtrace_learns_exploration_on_taken_transitions_and_drops_the_columns(tmp_path):
    """The V-trace learner's batches are ``[B, T+1]`` sequences: the module learns from each row but a
    sequence's bootstrap row and LAST rows (whose action was never taken), and the sequences the
    algorithm learns from carry no ``exploration_*`` column."""
    trainer = make_trainer(chain_config(tmp_path, "appo"))
    try:
        seen = []
        trainer.learn_exploration = lambda rows: (seen.append(rows), (rows, {"exploration/x": 1.0}))[1]
        steps = np.full((2, 5), int(StepType.MID))
        steps[0, 0], steps[0, 2], steps[0, 3] = int(StepType.FIRST), int(StepType.LAST), int(StepType.FIRST)
        batch = SB(
            {
                SB.OBS: np.arange(10, dtype=np.float32).reshape(2, 5, 1),
                SB.ACTIONS: np.zeros((2, 5), np.int64),
                SB.STEP_TYPES: steps,
                xp.INTRINSIC_REWARDS: np.ones((2, 5), np.float32),
            }
        )
        out, stats = trainer.learn_exploration_on_sequences(batch)
    finally:
        trainer.stop()
    assert stats == {"exploration/x": 1.0}
    # rows 0..3 of each sequence, less sequence 0's LAST row (obs 2): 7 transitions
    assert sorted(seen[0][SB.OBS].reshape(-1).tolist()) == [0.0, 1.0, 3.0, 5.0, 6.0, 7.0, 8.0]
    assert xp.INTRINSIC_REWARDS not in out and set(out) == {SB.OBS, SB.ACTIONS, SB.STEP_TYPES}


def test_the_exploration_postprocess_keeps_what_the_sampler_reads_of_the_wrapped_one():
    """V-trace's postprocess makes its own sequences: the wrapper must say so too, or a recurrent
    policy's rows would be cut into sequences again."""
    from rlgear.plugins.families.vtrace.vtrace_trainer import VTraceTrainer

    wrapped = ExplorationPostprocess(VTraceTrainer.postprocess, xp.REWARD_MODE)
    assert wrapped.makes_own_sequences is True
