"""Multi-agent runs: the ``multiagent`` config, per-agent compaction and GAE, policy sets, checkpoints.

The envs are the numpy ``MultiAgentVectorEnv`` s of ``tests/multi_agent_envs.py``, built through the
``vector`` env adapter. Learning tests are ``slow`` (times in their docstrings).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import CheckpointError, ConfigError, UnsupportedError
from rlgear.run import checkpoint as ckpt
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.sampling.rollout_worker import RolloutWorker

pytest.importorskip("torch")

ENVS = "tests.multi_agent_envs"
MATCH_OPTIMUM = 16.0  # 2 agents x 8 steps x +1


def ma_config(env: str = "make_match", **sections) -> dict:
    config = {
        "algorithm": "ppo",
        "env": {"adapter": "vector", "name": f"{ENVS}:{env}"},
        "workers": {"num_envs_per_worker": 4, "rollout_fragment_length": 16},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
        "model": {"hidden_sizes": [16]},
        "seed": 3,
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


def ppo():
    return registry.load_algorithm("ppo")


# --- config -------------------------------------------------------------------------------


def test_policy_overrides_are_checked_by_the_algorithms_config_class():
    raw = ma_config(multiagent={"policies": {"shared": {"training": {"lrr": 1e-4}}}})
    with pytest.raises(
        ConfigError, match=r"multiagent\.policies\.shared\.training\.lrr: unknown key; did you mean 'lr'"
    ):
        config_mod.resolve(raw)
    raw = ma_config(multiagent={"policies": {"shared": {"model": {"hidden_sizes": [0]}}}})
    with pytest.raises(ConfigError, match=r"multiagent\.policies\.shared\.model\.hidden_sizes\[0\]"):
        config_mod.resolve(raw)


def test_policy_config_applies_the_overrides_of_one_policy_only():
    from rlgear.config import multiagent

    raw = ma_config(
        multiagent={
            "policies": {"a": {"training": {"lr": 1e-4}, "model": {"hidden_sizes": [8]}}, "b": {}},
            "policy_mapping": {"a": "a", "*": "b"},
        }
    )
    config = config_mod.resolve(raw)
    assert multiagent.policy_ids(config) == ["a", "b"]
    assert multiagent.policy_config(config, "a").training.lr == 1e-4
    assert multiagent.policy_config(config, "a").model.hidden_sizes == [8]
    assert multiagent.policy_config(config, "b").training.lr == config.training.lr
    assert multiagent.policy_config(config, "b").model.hidden_sizes == [16]
    assert "multiagent" in config.to_dict()
    assert "multiagent" not in config_mod.resolve(ma_config()).to_dict()  # single-agent configs unchanged


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"policies": {"a": {}}, "policy_mapping": {"*": "z"}}, r"policy_mapping\.\*: unknown policy 'z'"),
        ({"policies": {"a": {}, "b": {}}}, r"multiagent\.policy_mapping: several policies \(a, b\)"),
        (
            {"policies": {"ab": {}}, "policies_to_train": ["ac"]},
            r"policies_to_train\[0\]: unknown policy 'ac'; did you mean 'ab'",
        ),
        ({"policy_mapping": "no_colon"}, r"multiagent\.policy_mapping: expected a mapping"),
        ({"polices": {}}, r"multiagent\.polices: unknown key; did you mean 'policies'"),
    ],
)
def test_bad_multiagent_sections_are_refused_with_the_key(section, message):
    with pytest.raises(ConfigError, match=message):
        config_mod.resolve(ma_config(multiagent=section))


def test_a_single_agent_env_refuses_several_policies(tmp_path):
    raw = {
        "algorithm": "ppo",
        "env": {"name": "CartPole-v1"},
        "multiagent": {"policies": {"a": {}, "b": {}}, "policy_mapping": {"*": "a"}},
    }
    with pytest.raises(
        ConfigError, match=r"multiagent\.policies: env 'CartPole-v1' has a single agent.*\(a, b\)"
    ):
        ppo()(raw)


def test_an_agent_no_pattern_maps_is_an_error_naming_it_and_the_patterns():
    raw = ma_config(multiagent={"policies": {"p": {}}, "policy_mapping": {"a": "p", "c*": "p"}})
    with pytest.raises(ConfigError, match=r"no pattern maps agent 'b' \(patterns: a, c\*\)"):
        ppo()(raw)


def test_the_first_matching_glob_picks_the_policy_as_documented():
    """README: ``policy_mapping`` is "glob -> policy, first match": a catch-all '*' after a narrower
    glob leaves the narrower one its agents, in the config's order."""
    from rlgear.config.multiagent import PolicyMapping

    section = {"policies": {"adversary": {}, "shared": {}}}
    config = config_mod.resolve(
        ma_config(multiagent={**section, "policy_mapping": {"adversary_*": "adversary", "*": "shared"}})
    )
    mapping = PolicyMapping(config)
    assert [mapping(agent) for agent in ("adversary_0", "agent_0", "adversary_1")] == [
        "adversary",
        "shared",
        "adversary",
    ]
    config = config_mod.resolve(
        ma_config(multiagent={**section, "policy_mapping": {"*": "shared", "adversary_*": "adversary"}})
    )
    assert PolicyMapping(config)("adversary_0") == "shared"  # '*' first: it matches every agent


def test_agents_with_different_spaces_on_one_policy_are_refused_naming_them():
    with pytest.raises(
        ConfigError,
        match=r"agents mapped to policy 'default' have different observation spaces \(box: .*; disc: ",
    ):
        ppo()(ma_config("make_mixed"))


def test_a_mapping_function_picks_the_policy():
    raw = ma_config(
        multiagent={"policies": {"pa": {}, "pb": {}}, "policy_mapping": "tests.test_multi_agent:policy_of"}
    )
    trainer = ppo()(raw)
    try:
        assert sorted(trainer.policy_map) == ["pa", "pb"]
        with pytest.raises(UnsupportedError, match=r"trainer\.policy_map\[policy_id\]"):
            _ = trainer.policy
    finally:
        trainer.stop()


def policy_of(agent_id: str) -> str:
    return "p" + agent_id


def test_an_algorithm_without_multi_agent_is_refused_on_a_multi_agent_env():
    class SingleAgentOnly(ppo()):
        name = "single-agent-only"
        multi_agent = False

    with pytest.raises(
        UnsupportedError, match=r"'single-agent-only' does not support multi-agent envs .*agents a, b"
    ):
        SingleAgentOnly(ma_config())


# --- compaction and GAE per agent -----------------------------------------------------------


def _reference_rows(log, fragment_length, fragments, gamma, lam, value_of):
    """Per (env slot, agent): the agent's active rows, cut into fragment windows (each window starts
    with the previous window's last row), GAE along each window in plain numpy; the trainable rows
    keyed by (episode id of the agent, step index of the agent)."""
    agents = ("a", "b")
    num_envs = log[0].num_envs
    # env episode ids, assigned as the evaluator does: at each reset, env slots in order
    env_episode = np.zeros((len(log), num_envs), dtype=np.int64)
    next_id, current = 0, np.zeros(num_envs, dtype=np.int64)
    for t in range(len(log)):
        for i in range(num_envs):
            if t == 0 or log[t - 1].episode_end[i]:
                current[i] = next_id
                next_id += 1
        env_episode[t] = current
    expected = {}
    for i in range(num_envs):
        for index, agent in enumerate(agents):
            rows, t_agent, count = [], {}, 0
            for t in range(fragment_length * fragments):
                if log[t].active[agent][i]:
                    step = log[t].steps[agent]
                    if step.step_type[i] == 0:
                        count = 0
                    rows.append(t)
                    t_agent[t] = count
                    count += 1
            windows, carry = [], None
            for j in range(fragments):
                inside = [t for t in rows if j * fragment_length <= t < (j + 1) * fragment_length]
                window = ([carry] if carry is not None else []) + inside
                if window:
                    carry = window[-1]
                if len(window) >= 2:
                    windows.append(window)
            for window in windows:
                step = [log[t].steps[agent] for t in window]
                r = np.array([s.reward[i] for s in step], dtype=np.float64)
                d = np.array([s.discount[i] for s in step], dtype=np.float64)
                kind = np.array([s.step_type[i] for s in step])
                v = np.array([value_of(s.observation[i]) for s in step], dtype=np.float64)
                adv = np.zeros(len(window))
                for k in range(len(window) - 2, -1, -1):
                    if kind[k] == 2:  # LAST: nothing learned, nothing flows back across it
                        adv[k] = 0.0
                        continue
                    delta = r[k + 1] + gamma * d[k + 1] * v[k + 1] - v[k]
                    adv[k] = delta + gamma * lam * d[k + 1] * (adv[k + 1] if kind[k + 1] != 2 else 0.0)
                for k, t in enumerate(window[:-1]):
                    if kind[k] == 2:
                        continue
                    key = (int(env_episode[t, i]) * 2 + index, t_agent[t])
                    assert key not in expected
                    expected[key] = (adv[k], adv[k] + v[k], r[k], agent, int(kind[k]))
    return expected


@pytest.mark.parametrize("fragment_length", [4, 6])
def test_rows_are_compacted_per_agent_and_gae_never_crosses_agents(fragment_length):
    gamma, lam, fragments = 0.9, 0.8, 3
    raw = ma_config(
        "make_logged_late_join",
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": fragment_length},
        training={"gamma": gamma, "gae_lambda": lam},
    )
    config = config_mod.resolve(raw)
    algo = ppo()
    evaluator = RolloutWorker(
        config, algo.policy_class("torch"), registry.load_env_adapter("vector"), algo.postprocess
    )
    try:
        batches = [evaluator.sample_with_count() for _ in range(fragments)]
        log = list(evaluator.env.log)
        policy = evaluator.policy

        def value_of(observation):
            from rlgear.timestep import TimeStep

            ts = TimeStep(
                step_type=np.ones(1, np.int32),
                reward=np.zeros(1, np.float32),
                discount=np.ones(1, np.float32),
                observation=np.asarray(observation, np.float32)[None],
                prev_action=np.zeros(1, np.int64),
                env_id=np.zeros(1, np.int32),
            )
            return float(policy.compute_actions(ts, explore=False)[2][SampleBatch.VF_PREDS][0])

        expected = _reference_rows(log, fragment_length, fragments, gamma, lam, value_of)
    finally:
        evaluator.stop()
    got = {}
    for batch, env_steps in batches:
        assert isinstance(batch, MultiAgentBatch) and env_steps == batch.env_steps
        rows = batch["default"]
        for n in range(len(rows)):
            key = (int(rows[SampleBatch.EPS_ID][n]), int(rows[SampleBatch.T][n]))
            assert key not in got, f"row {key} trained twice"
            got[key] = (
                float(rows[SampleBatch.ADVANTAGES][n]),
                float(rows[SampleBatch.VALUE_TARGETS][n]),
                float(rows[SampleBatch.REWARDS][n]),
            )
    assert len(got) >= 3 * 2 * 2 * (fragments * fragment_length // 6)  # 3 rows per agent per episode
    assert sorted(got) == sorted(expected)
    for key, (adv, target, reward) in got.items():
        ref_adv, ref_target, ref_reward, agent, _ = expected[key]
        assert adv == pytest.approx(ref_adv, abs=1e-4), (key, agent)
        assert target == pytest.approx(ref_target, abs=1e-4), (key, agent)
        assert reward == pytest.approx(ref_reward)
    # a is trained on its steps 0..2 (its LAST at step 3 is not), b on 0..2 (its LAST, step 5 of
    # the env, is not): 3 rows per agent per episode, none after an agent's LAST
    per_agent_steps = {}
    for (eps, t), _ in got.items():
        per_agent_steps.setdefault(eps % 2, set()).add(t)
    assert per_agent_steps[0] <= {0, 1, 2} and per_agent_steps[1] <= {0, 1, 2}
    # a terminated (discount 0): its target at its last trained step is the reward alone
    a_last = [k for k in expected if k[0] % 2 == 0 and k[1] == 2]
    assert a_last


def test_counts_env_steps_agent_steps_and_returns_summed_over_agents():
    raw = ma_config(
        "make_late_join",
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": 6},
    )
    config = config_mod.resolve(raw)
    algo = ppo()
    evaluator = RolloutWorker(
        config, algo.policy_class("torch"), registry.load_env_adapter("vector"), algo.postprocess
    )
    try:
        batch, steps = evaluator.sample_with_count()
        metrics = evaluator.pop_metrics()
    finally:
        evaluator.stop()
    assert steps == 10  # 5 env steps per episode (the reset step is not one), 2 envs
    assert metrics["agent_steps"] == 12  # a steps 1..3, b steps 3..5
    assert len(batch["default"]) == 12  # 3 trainable rows per agent per env
    for episode in metrics["episodes"]:
        assert episode["length"] == 5
        assert episode["truncated"]
        # rewards of a at steps 1..3 and b at 3..5: 0.5 k + (1 | 2) + previous action (0 or 1)
        base = sum(0.5 * k + 1 for k in (1, 2, 3)) + sum(0.5 * k + 2 for k in (3, 4, 5))
        assert base <= episode["episode_return"] <= base + 6
        assert episode["policy_returns"] == {"default": episode["episode_return"]}


# --- policy sets -------------------------------------------------------------------------------


def test_different_spaces_on_two_policies_and_one_not_trained():
    raw = ma_config(
        "make_mixed",
        multiagent={
            "policies": {"box": {}, "disc": {"training": {"lr": 1e-2}}},
            "policy_mapping": {"box": "box", "disc": "disc"},
            "policies_to_train": ["disc"],
        },
    )
    trainer = ppo()(raw)
    try:
        assert trainer.policy_map["box"].action_space.kind == "continuous"
        assert trainer.policy_map["disc"].action_space.kind == "discrete"
        assert trainer.policy_map["disc"].config.training.lr == 1e-2
        before = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
        result = trainer.train()
        after = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
    finally:
        trainer.stop()
    assert all(np.array_equal(before["box"][k], after["box"][k]) for k in before["box"])
    assert any(not np.array_equal(before["disc"][k], after["disc"][k]) for k in before["disc"])
    assert "learner/disc/policy_loss" in result and not any(k.startswith("learner/box/") for k in result)
    assert {"policy_reward_mean/box", "policy_reward_mean/disc"} <= set(result)
    assert result["agent_timesteps_total"] == 2 * result["timesteps_total"]


def independent(**extra) -> dict:
    return {"policies": {"pa": {}, "pb": {}}, "policy_mapping": {"a": "pa", "b": "pb"}, **extra}


def test_checkpoint_keeps_every_policys_weights_optimizer_and_counters(tmp_path):
    raw = ma_config(multiagent=independent())
    trainer = ppo()(raw)
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        arrays, state = trainer.get_state()
        counters = dict(state["counters"])
    finally:
        trainer.stop()
    saved, _, _, metadata = ckpt.read(tmp_path / "ckpt")
    assert any(k.startswith("policy/pa/weights/") for k in saved)
    assert any(k.startswith("policy/pb/optimizer/") for k in saved)
    assert sorted(metadata["policy_spaces"]) == ["pa", "pb"]
    fresh = ppo()(raw)
    try:
        fresh.restore(path)
        arrays2, state2 = fresh.get_state()
    finally:
        fresh.stop()
    for key in arrays:
        if key.startswith("policy/"):
            np.testing.assert_array_equal(arrays[key], arrays2[key])
    assert state2["policy_metas"] == json.loads(json.dumps(state["policy_metas"]))
    for key in ("training_iteration", "timesteps_total", "agent_timesteps_total", "episodes_total"):
        assert state2["counters"][key] == counters[key]


def test_rlgear_load_and_evaluate_on_a_multi_agent_checkpoint(tmp_path):
    raw = ma_config(multiagent=independent())
    trainer = ppo()(raw)
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        weights_pb = trainer.policy_map["pb"].get_weights()
    finally:
        trainer.stop()
    with pytest.raises(CheckpointError, match=r"holds 2 policies \(pa, pb\); say which one"):
        rlgear.load(path)
    loaded = rlgear.load(path, policy_id="pb")
    for key, value in weights_pb.items():
        np.testing.assert_array_equal(loaded.policy.get_weights()[key], value)
    action = loaded.compute_single_action(np.eye(4, dtype=np.float32)[2])
    assert 0 <= int(action) < 4
    from rlgear.run.agent import evaluate_checkpoint

    evaluation = evaluate_checkpoint(path, episodes=3)
    assert len(evaluation.episodes) == 3
    for episode in evaluation.episodes:
        assert episode["length"] == 8
        assert episode["episode_return"] == pytest.approx(sum(episode["policy_returns"].values()))


def test_a_checkpoint_of_the_layout_before_policy_sets_still_restores_and_loads(tmp_path):
    """Checkpoints written before policy sets name arrays ``policy/weights/...`` and keep one
    ``policy_meta``: rewritten here in that layout, the ``default`` policy reads them."""
    raw = {
        "algorithm": "ppo",
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 16},
        "training": {"train_batch_size": 32, "sgd_minibatch_size": 16, "num_sgd_iter": 1},
        "seed": 0,
    }
    trainer = ppo()(raw)
    try:
        trainer.train()
        snapshot = trainer.save_to_object()
        weights = trainer.policy.get_weights()
    finally:
        trainer.stop()
    old_arrays = {
        (k.replace("policy/default/", "policy/", 1) if k.startswith("policy/default/") else k): v
        for k, v in snapshot["arrays"].items()
    }
    old_state = dict(snapshot["state"])
    old_state["policy_meta"] = old_state.pop("policy_metas")["default"]
    old_metadata = {k: v for k, v in snapshot["metadata"].items() if k != "policy_spaces"}
    folder = ckpt.write(tmp_path / "old", old_arrays, old_state, snapshot["config"], old_metadata)
    assert not any(k.startswith("policy/default/") for k in ckpt.read(folder)[0])
    fresh = ppo()(raw)
    try:
        fresh.restore(folder)
        for key, value in weights.items():
            np.testing.assert_array_equal(fresh.policy.get_weights()[key], value)
        assert fresh.policy.get_state().meta == old_state["policy_meta"]
    finally:
        fresh.stop()
    loaded = rlgear.load(folder)
    for key, value in weights.items():
        np.testing.assert_array_equal(loaded.policy.get_weights()[key], value)


# --- learning -------------------------------------------------------------------------------------


def _train_match(multiagent_section, iterations=40):
    raw = ma_config(
        workers={"num_envs_per_worker": 8, "rollout_fragment_length": 64},
        training={"train_batch_size": 512, "sgd_minibatch_size": 128, "num_sgd_iter": 10},
        model={"hidden_sizes": [64, 64]},
        seed=1,
    )
    if multiagent_section is not None:
        raw["multiagent"] = multiagent_section
    trainer = ppo()(raw)
    try:
        best = -np.inf
        for _ in range(iterations):
            result = trainer.train()
            best = max(best, result["episode_return_mean"] or -np.inf)
            if best >= 0.95 * MATCH_OPTIMUM:
                break
    finally:
        trainer.stop()
    return best, result


@pytest.mark.slow
def test_ppo_with_a_shared_policy_reaches_95_percent_of_the_optimum():
    """About 10 s (about 10k env steps, 20k agent steps)."""
    best, result = _train_match(None)
    assert best >= 0.95 * MATCH_OPTIMUM, result
    assert result["timesteps_total"] <= 40 * 512


@pytest.mark.slow
def test_ppo_with_independent_policies_reaches_95_percent_of_the_optimum():
    """About 10 s (about 10k env steps)."""
    best, result = _train_match(independent())
    assert best >= 0.95 * MATCH_OPTIMUM, result
    assert result["policy_reward_mean/pa"] == pytest.approx(result["policy_reward_mean/pb"])


class OtherAgentObservation:
    """The centralised-critic pattern: each row gets the other agent's observation of the same env step."""

    @rlgear.hookimpl
    def on_postprocess_fragment(self, worker, policy_id, fragment, window, rows, slots):
        table = window[policy_id]
        num_envs = table["num_envs"]
        obs, valid = table["rows"][SampleBatch.OBS], table["valid"]
        other = np.zeros_like(fragment[SampleBatch.OBS])
        for c, slot in enumerate(slots):
            env, agent = slot % num_envs, slot // num_envs
            other_slot = (1 - agent) * num_envs + env
            for r, t in enumerate(rows[:, c]):
                if t >= 1 and valid[t, other_slot]:  # row 0 is a carried row, not this env step
                    other[r, c] = obs[t, other_slot]
        fragment["other_obs"] = other


def test_the_centralised_critic_hook_sees_the_other_agents_rows_of_the_same_env_step():
    raw = ma_config("make_late_join", workers={"num_envs_per_worker": 2, "rollout_fragment_length": 6})
    config = config_mod.resolve(raw)
    algo = ppo()
    from rlgear.discovery.hooks import make_plugin_manager

    evaluator = RolloutWorker(
        config,
        algo.policy_class("torch"),
        registry.load_env_adapter("vector"),
        algo.postprocess,
        hooks=make_plugin_manager([OtherAgentObservation()]),
    )
    try:
        rows = evaluator.sample()["default"]
    finally:
        evaluator.stop()
    obs, other = rows[SampleBatch.OBS], rows["other_obs"]
    agent = rows[SampleBatch.EPS_ID] % 2
    k = np.round(obs[:, 0] * 5).astype(int)  # the env step (first episode: no offset)
    both = (k >= 2) & (k <= 3)  # a is active at steps 0..3, b at 2..5
    assert both.any() and (~both).any()
    np.testing.assert_array_equal(other[both, 0], obs[both, 0])  # the same env step
    np.testing.assert_array_equal(other[both, 1], 1 - agent[both])  # the other agent's index
    np.testing.assert_array_equal(other[~both], 0.0)  # no other agent at that step


def test_the_documented_self_play_hook_copies_one_policys_weights_into_the_other():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "examples" / "my_self_play.py"
    spec = importlib.util.spec_from_file_location("my_self_play", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hook = module.SelfPlaySnapshots(every=2)
    raw = ma_config(
        multiagent={
            "policies": {"main": {}, "snapshot": {}},
            "policy_mapping": {"a": "main", "b": "snapshot"},
            "policies_to_train": ["main"],
        }
    )
    trainer = ppo()(raw, hooks=[hook])
    try:
        main, snapshot = trainer.policy_map["main"], trainer.policy_map["snapshot"]
        first = trainer.train()
        assert any(not np.array_equal(v, snapshot.get_weights()[k]) for k, v in main.get_weights().items())
        assert "custom_metrics/snapshots" not in first
        second = trainer.train()
        for key, value in main.get_weights().items():
            np.testing.assert_array_equal(snapshot.get_weights()[key], value)
        assert second["custom_metrics/snapshots"] == 1
    finally:
        trainer.stop()


# --- dqn: a replay buffer per policy ---------------------------------------------------------------


def dqn_config(**extra) -> dict:
    return {
        "algorithm": "dqn",
        "env": {"adapter": "vector", "name": f"{ENVS}:make_match"},
        "workers": {"num_envs_per_worker": 8},
        "model": {"hidden_sizes": [64]},
        "training": {"learning_starts": 500, "epsilon_timesteps": 4000, "target_network_update_freq": 500},
        "seed": 1,
        **extra,
    }


def test_dqn_keeps_a_replay_buffer_per_policy_and_checkpoints_them(tmp_path):
    dqn = registry.load_algorithm("dqn")
    raw = dqn_config(multiagent=independent(policies_to_train=["pa"]))
    raw["training"]["learning_starts"] = 100
    trainer = dqn(raw)
    try:
        before_pb = trainer.policy_map["pb"].get_weights()
        for _ in range(4):
            result = trainer.train()
        sizes = {pid: len(buffer) for pid, buffer in trainer.replay_buffers.items()}
        assert sizes["pa"] == sizes["pb"] > 0  # each agent's transitions in its policy's buffer
        assert result["learner/pa/num_grad_updates"] > 0 and "learner/pb/num_grad_updates" not in result
        for key, value in before_pb.items():  # pb is not trained
            np.testing.assert_array_equal(trainer.policy_map["pb"].get_weights()[key], value)
        path = trainer.save(tmp_path / "ckpt")
    finally:
        trainer.stop()
    fresh = dqn(raw)
    try:
        fresh.restore(path)
        assert {pid: len(b) for pid, b in fresh.replay_buffers.items()} == sizes
    finally:
        fresh.stop()


@pytest.mark.slow
def test_dqn_with_independent_policies_reaches_95_percent_of_the_optimum():
    """About 10 s (about 5k env steps)."""
    trainer = registry.load_algorithm("dqn")(dqn_config(multiagent=independent()))
    try:
        best = -np.inf
        while trainer.timesteps_total < 10_000 and best < 0.95 * MATCH_OPTIMUM:
            result = trainer.train()
            best = max(best, result["episode_return_mean"] or -np.inf)
    finally:
        trainer.stop()
    assert best >= 0.95 * MATCH_OPTIMUM, result


# --- kill and --resume ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_multi_agent_run_resumes_with_every_policy_and_its_counters(tmp_path):
    """About 30 s: ``rlgear train`` killed (SIGKILL) after its second checkpoint, then ``--resume``."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import yaml

    raw = ma_config(multiagent=independent())
    raw["stop"] = {"training_iteration": 10_000}
    raw["checkpoint"] = {"every": 1, "keep": 3}
    raw["logging"] = {"dir": str(tmp_path / "runs")}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "rlgear", "train", str(config), "--progress", "plain"]
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = list((tmp_path / "runs").glob("*"))
            if runs and len(ckpt.list_checkpoints(runs[0])) >= 2:
                break
            assert process.poll() is None, process.stderr.read().decode()
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    (run_dir,) = (tmp_path / "runs").iterdir()
    latest = ckpt.latest(run_dir)
    _, state, _, _ = ckpt.read(latest)
    saved = state["counters"]
    resumed = subprocess.run(
        [
            *command[:-2],
            "--resume",
            str(run_dir),
            "--set",
            f"stop={{training_iteration: {saved['training_iteration'] + 2}}}",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    results = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    after = [r for r in results if r["training_iteration"] > saved["training_iteration"]]
    first = after[-2]  # the resumed run's first iteration (a killed run may have logged past its checkpoint)
    assert first["training_iteration"] == saved["training_iteration"] + 1
    assert first["timesteps_total"] == saved["timesteps_total"] + first["timesteps_this_iter"]
    assert first["agent_timesteps_total"] == saved["agent_timesteps_total"] + 2 * first["timesteps_this_iter"]
    final, final_state, _, _ = ckpt.read(ckpt.latest(run_dir))
    assert sorted(final_state["policy_metas"]) == ["pa", "pb"]
    for pid in ("pa", "pb"):  # each policy went on from its own optimizer state
        before = state["policy_metas"][pid]["num_grad_updates"]
        assert final_state["policy_metas"][pid]["num_grad_updates"] > before > 0
        assert any(k.startswith(f"policy/{pid}/optimizer/") for k in final)


def test_an_lstm_policy_keeps_its_state_per_env_slot_and_agent():
    raw = ma_config(
        "make_late_join",
        model={"lstm": True, "lstm_cell_size": 8, "max_seq_len": 4},
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": 6},
    )
    trainer = ppo()(raw)
    try:
        collector = trainer.workers.local_worker.collectors["default"]
        assert [s.shape for s in collector.state] == [(4, 8), (4, 8)]  # 2 agents x 2 env slots
        batch, _ = trainer.workers.local_worker.sample_with_count()
        rows = batch["default"]
        assert SampleBatch.SEQ_MASK in rows and SampleBatch.state_in(0) in rows
        real = rows[SampleBatch.SEQ_MASK] > 0
        # sequences never join two agents: each sequence holds one eps_id (one agent's episode)
        eps = rows[SampleBatch.EPS_ID].reshape(-1, 4)
        mask = real.reshape(-1, 4)
        for seq, seq_mask in zip(eps, mask, strict=True):
            assert len(set(seq[seq_mask].tolist())) == 1
        # a's state went back to zeros at its FIRST; b's (inactive at the reset) was never advanced there
        first_rows = (rows[SampleBatch.STEP_TYPES] == 0) & real
        np.testing.assert_array_equal(rows[SampleBatch.state_in(0)][first_rows], 0.0)
        result = trainer.train()
        assert np.isfinite(result["learner/total_loss"])
    finally:
        trainer.stop()


# --- ray workers ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_remote_workers_sample_per_policy_with_the_learners_weights_of_each(ray_session):
    """About 30 s (a local Ray of 2 CPUs, two remote workers)."""
    raw = ma_config(
        multiagent=independent(policies_to_train=["pa"]),
        workers={"num_workers": 2, "num_envs_per_worker": 2},
    )
    trainer = ppo()(raw)
    try:
        result = trainer.train()
        assert (
            result["timesteps_total"] >= 48
            and result["agent_timesteps_total"] == 2 * result["timesteps_total"]
        )
        assert "learner/pa/policy_loss" in result and not any(k.startswith("learner/pb/") for k in result)
        local = trainer.workers.local_worker.get_weights()
        remote = trainer.workers.foreach_worker(lambda w: w.get_weights())[1:]
        assert len(remote) == 2
        for weights in remote:  # every remote worker holds every policy's current weights
            for pid in ("pa", "pb"):
                for key, value in local[pid].items():
                    np.testing.assert_array_equal(weights[pid][key], value)
    finally:
        trainer.stop()


# --- other algorithms and the TF backend ---------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["pg", "a2c", "a3c"])
def test_pg_a2c_and_a3c_train_each_policy_on_its_own_agents(algorithm):
    raw = ma_config(multiagent=independent(policies_to_train=["pb"]))
    raw["algorithm"] = algorithm
    raw["training"] = {"train_batch_size": 64}
    trainer = registry.load_algorithm(algorithm)(raw)
    try:
        before = trainer.policy_map["pa"].get_weights()
        result = trainer.train()
        assert any(k.startswith("learner/pb/") for k in result)
        assert not any(k.startswith("learner/pa/") for k in result)
        for key, value in before.items():
            np.testing.assert_array_equal(trainer.policy_map["pa"].get_weights()[key], value)
    finally:
        trainer.stop()


def test_a_torch_multi_agent_checkpoint_acts_identically_on_tf(tmp_path):
    pytest.importorskip("tensorflow")
    raw = ma_config(multiagent=independent())
    trainer = ppo()(raw)
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
    finally:
        trainer.stop()
    observations = np.eye(4, dtype=np.float32)
    for pid in ("pa", "pb"):
        on_torch = rlgear.load(path, policy_id=pid)
        on_tf = rlgear.load(path, ["backend=tf"], policy_id=pid)
        for key, value in on_torch.policy.get_weights().items():
            np.testing.assert_array_equal(on_tf.policy.get_weights()[key], value)
        greedy_torch = [int(on_torch.compute_single_action(o, explore=False)) for o in observations]
        greedy_tf = [int(on_tf.compute_single_action(o, explore=False)) for o in observations]
        assert greedy_torch == greedy_tf


def test_ppo_trains_independent_policies_on_the_tf_backend():
    pytest.importorskip("tensorflow")
    raw = ma_config(multiagent=independent(), backend="tf")
    trainer = ppo()(raw)
    try:
        before = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
        result = trainer.train()
        for pid in ("pa", "pb"):
            assert f"learner/{pid}/policy_loss" in result
            after = trainer.policy_map[pid].get_weights()
            assert any(not np.array_equal(after[k], v) for k, v in before[pid].items())
    finally:
        trainer.stop()


# --- the vector adapter --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "extra", "message"),
    [
        ("make_not_an_env", {}, r"returned list, expected an rlgear\.env\.VectorEnv or MultiAgentVectorEnv"),
        ("make_wrong_count", {}, r"built 5 envs, 4 were asked"),
        (
            "make_match",
            {"kwargs": {"lenght": 3}},
            r"env\.kwargs: the factory .* does not take these arguments",
        ),
        ("make_late_join", {"horizon": 3}, r"workers\.horizon: the factory .* takes no 'horizon' argument"),
        ("no_such_factory", {}, r"has no attribute 'no_such_factory'"),
    ],
)
def test_the_vector_adapter_says_what_is_wrong_with_a_factory(name, extra, message):
    adapter = registry.load_env_adapter("vector")()
    with pytest.raises(ConfigError, match=message):
        adapter.make(f"{ENVS}:{name}", 4, kwargs=extra.get("kwargs", {}), horizon=extra.get("horizon"))


def test_the_vector_adapter_passes_env_kwargs_to_the_factory():
    adapter = registry.load_env_adapter("vector")()
    env = adapter.make(f"{ENVS}:make_match", 2, kwargs={"length": 3})
    assert env.length == 3 and env.num_envs == 2


@pytest.mark.slow
def test_a3c_remote_workers_send_gradients_per_policy(ray_session):
    """About 20 s (a local Ray of 2 CPUs, two remote workers)."""
    raw = ma_config(
        multiagent=independent(policies_to_train=["pa"]),
        workers={"num_workers": 2, "num_envs_per_worker": 2},
    )
    raw["algorithm"] = "a3c"
    raw["training"] = {"train_batch_size": 32}
    trainer = registry.load_algorithm("a3c")(raw)
    try:
        before = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
        result = trainer.train()
        assert (
            result["learner/gradients_applied_this_step"] >= 1 and result["learner/pa/num_grad_updates"] >= 1
        )
        after = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
        assert any(not np.array_equal(after["pa"][k], v) for k, v in before["pa"].items())
        for key, value in before["pb"].items():
            np.testing.assert_array_equal(after["pb"][key], value)
    finally:
        trainer.stop()


def test_evaluation_episodes_on_a_multi_agent_env_use_every_policys_weights():
    raw = ma_config(multiagent=independent())
    trainer = ppo()(raw)
    try:
        trainer.train()
        out = trainer.evaluate(num_episodes=3)
        worker = trainer._evaluation_worker
        for pid, policy in trainer.policy_map.items():
            for key, value in policy.get_weights().items():
                np.testing.assert_array_equal(worker.policy_map[pid].get_weights()[key], value)
    finally:
        trainer.stop()
    assert out["evaluation/episodes"] == 3
    assert out["evaluation/episode_len_mean"] == 8
    assert out["evaluation/policy_reward_mean/pa"] == pytest.approx(out["evaluation/policy_reward_mean/pb"])
    assert out["evaluation/episode_return_mean"] == pytest.approx(2 * out["evaluation/policy_reward_mean/pa"])
