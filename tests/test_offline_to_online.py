"""Offline to online: ``checkpoint.init_from`` starts an online run from an offline checkpoint's
weights (cql -> sac, discrete_cql -> dqn), and ``offline.input`` pre-fills a replay run's buffer
with a dataset's transitions, exactly as sampling them would have stored them.

Datasets are written by Minari's own ``DataCollector`` (not rlgear's recorder), from a scripted
CartPole expert and from uniform random Pendulum actions.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.run import checkpoint as ckpt
from tests.offline_data import expert_action, play_episode

minari = pytest.importorskip("minari", reason="needs Minari: pip install 'rlgear[offline]'")

CARTPOLE_ID = "test/cartpole-expert-v0"
PENDULUM_ID = "test/pendulum-random-v0"


def _collect(dataset_id: str, env_id: str, episodes: int, act) -> None:
    """``episodes`` episodes of ``act(obs, rng, episode_index)`` in ``env_id``, written as a Minari
    dataset by Minari itself (``create_dataset_from_buffers``; its DataCollector needs jax)."""
    from minari.data_collector import EpisodeBuffer

    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    buffers = []
    for index in range(episodes):
        observations, actions, rewards, terminations, truncations = play_episode(
            env, lambda obs, i=index: act(obs, rng, i), index
        )
        buffers.append(
            EpisodeBuffer(
                id=index, seed=index, observations=np.asarray(observations), actions=np.asarray(actions),
                rewards=np.asarray(rewards), terminations=np.asarray(terminations),
                truncations=np.asarray(truncations), infos={},
            )
        )  # fmt: skip
    minari.create_dataset_from_buffers(dataset_id, buffers, env=env_id, algorithm_name="scripted")
    env.close()


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """``MINARI_DATASETS_PATH`` with a CartPole dataset (10 episodes of the scripted expert, 500
    steps each, then 3 of always pushing left) and a Pendulum one (5 episodes of uniform random
    actions, 200 steps each)."""
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        _collect(CARTPOLE_ID, "CartPole-v1", 13, lambda obs, rng, i: expert_action(obs) if i < 10 else 0)
        _collect(
            PENDULUM_ID, "Pendulum-v1", 5, lambda obs, rng, i: rng.uniform(-2, 2, size=1).astype(np.float32)
        )
    return root


@pytest.fixture
def minari_path(datasets, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets))
    return datasets


def _trainer(tmp_path, algorithm, env, **sections):
    training = sections.pop("training", {})
    raw = {
        "algorithm": algorithm,
        "seed": 3,
        "env": {"name": env},
        "training": training,
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        **sections,
    }
    return registry.load_algorithm(algorithm)(raw)


def _offline_checkpoint(tmp_path, algorithm, env, dataset, steps, evaluation_episodes=0, **training):
    """Train ``algorithm`` one iteration of ``steps`` gradient steps on ``dataset``; its checkpoint's
    path (and, with ``evaluation_episodes``, its greedy evaluation return)."""
    trainer = _trainer(
        tmp_path, algorithm, env, offline={"input": dataset},
        training={"num_gradient_steps_per_iteration": steps, "evaluation_interval": int(evaluation_episodes > 0),
                  "evaluation_episodes": max(1, evaluation_episodes), **training},
    )  # fmt: skip
    try:
        result = trainer.train()
        path = trainer.save(tmp_path / f"{algorithm}-checkpoint")
        return (path, result["evaluation/episode_return_mean"]) if evaluation_episodes else path
    finally:
        trainer.stop()


# --- checkpoint.init_from ------------------------------------------------------------------------
def test_sac_starts_from_a_cql_checkpoint_with_its_weights(tmp_path, minari_path):
    path = _offline_checkpoint(tmp_path, "cql", "Pendulum-v1", PENDULUM_ID, 20, train_batch_size=64)
    arrays, _, _, metadata = ckpt.read(path)
    assert metadata["algorithm"] == "cql"
    saved = ckpt.policy_weights(arrays, "default")
    sac = _trainer(tmp_path, "sac", "Pendulum-v1", checkpoint={"init_from": str(tmp_path / "cql-checkpoint")})
    try:
        weights = sac.policy.get_weights()
        assert set(weights) <= set(saved)
        for name, value in weights.items():
            np.testing.assert_array_equal(value, saved[name], err_msg=name)
        fresh = _trainer(tmp_path, "sac", "Pendulum-v1")
        try:  # the same seed without init_from: other weights, so the equality above is the checkpoint's
            assert any(not np.array_equal(v, weights[k]) for k, v in fresh.policy.get_weights().items())
        finally:
            fresh.stop()
        result = sac.train()  # and it trains on from there
        assert result["timesteps_total"] > 0
    finally:
        sac.stop()


@pytest.mark.slow
def test_dqn_from_a_discrete_cql_checkpoint_acts_like_it_before_any_online_learning(tmp_path, minari_path):
    """discrete_cql learns from the CartPole dataset (600 gradient steps); dqn started from its
    checkpoint scores exactly what discrete_cql scored in greedy evaluation (same seeds, same
    weights), with no online update at all; dqn from fresh weights does not. Budget: ~20 s."""
    path, offline_return = _offline_checkpoint(
        tmp_path, "discrete_cql", "CartPole-v1", CARTPOLE_ID, 600, evaluation_episodes=5,
        target_network_update_freq=100,
    )  # fmt: skip
    assert offline_return >= 150, offline_return
    training = {"learning_starts": 10**6, "evaluation_episodes": 5}
    dqn = _trainer(tmp_path, "dqn", "CartPole-v1", training=training, checkpoint={"init_from": path})
    fresh = _trainer(tmp_path, "dqn", "CartPole-v1", training=training)
    try:
        started = dqn.evaluate()["evaluation/episode_return_mean"]
        baseline = fresh.evaluate()["evaluation/episode_return_mean"]
        assert started == pytest.approx(offline_return), (started, offline_return)
        assert baseline < offline_return / 2, baseline
    finally:
        dqn.stop()
        fresh.stop()


def test_init_from_names_the_key_when_the_checkpoint_does_not_fit(tmp_path, minari_path):
    cartpole = _offline_checkpoint(tmp_path, "discrete_cql", "CartPole-v1", CARTPOLE_ID, 5)
    with pytest.raises(ConfigError, match=r"checkpoint\.init_from: .*observation_space"):
        _trainer(tmp_path, "sac", "Pendulum-v1", checkpoint={"init_from": cartpole})
    with pytest.raises(ConfigError, match=r"checkpoint\.init_from: .*do not fit this 'dqn' policy"):
        _trainer(tmp_path, "dqn", "CartPole-v1", checkpoint={"init_from": cartpole},
                 model={"hidden_sizes": [32]})  # fmt: skip
    with pytest.raises(ConfigError, match=r"checkpoint\.init_from: .*no such checkpoint"):
        _trainer(tmp_path, "dqn", "CartPole-v1", checkpoint={"init_from": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match=r"checkpoint\.init_from: .*mean_std"):
        _trainer(tmp_path, "dqn", "CartPole-v1", checkpoint={"init_from": cartpole},
                 model={"observation_filter": "mean_std"})  # fmt: skip
    with pytest.raises(ConfigError, match=r"checkpoint\.init_from: .*online runs"):
        _trainer(
            tmp_path, "bc", "CartPole-v1", offline={"input": CARTPOLE_ID}, checkpoint={"init_from": cartpole}
        )


# --- offline.input pre-fills replay ----------------------------------------------------------------
def _dataset_transitions(dataset_id):
    """(obs, actions, rewards, next_obs, terminated) of every step, from minari itself."""
    parts = [[], [], [], [], []]
    for episode in minari.load_dataset(dataset_id).iterate_episodes():
        parts[0].append(episode.observations[:-1])
        parts[1].append(episode.actions)
        parts[2].append(episode.rewards)
        parts[3].append(episode.observations[1:])
        parts[4].append(episode.terminations)
    return [np.concatenate(p) for p in parts]


def _stored_rows(buffer):
    storage = buffer._storage  # what is stored, every row, not a sample of it
    return {key: value[: len(buffer)] for key, value in storage.items()}


@pytest.mark.parametrize("n_step", [1, 3])
def test_dqn_replay_is_prefilled_with_the_datasets_transitions(tmp_path, minari_path, n_step):
    gamma = 0.9
    dqn = _trainer(
        tmp_path, "dqn", "CartPole-v1", offline={"input": CARTPOLE_ID},
        training={"learning_starts": 10**6, "n_step": n_step, "gamma": gamma, "buffer_size": 100_000},
    )  # fmt: skip
    try:
        result = dqn.train()
        sampled = result["timesteps_total"]
        obs, actions, rewards, next_obs, terminated = _dataset_transitions(CARTPOLE_ID)
        buffer = dqn.replay_buffer
        assert len(buffer) == len(obs) + sampled
        assert result["learner/replay_prefilled_rows"] == len(obs)
        stored = _stored_rows(buffer)
        prefilled = stored["eps_id"] < 0
        assert prefilled.sum() == len(obs)
        # every recorded transition is there once, with its n-step return and discount
        index = {(o.tobytes(), int(a)): i for i, (o, a) in enumerate(zip(obs, actions, strict=True))}
        ends = _episode_ends(CARTPOLE_ID)
        seen = set()
        for row in np.flatnonzero(prefilled):
            i = index[(stored["obs"][row].tobytes(), int(stored["actions"][row]))]
            seen.add(i)
            end = ends[np.searchsorted(ends, i, side="left")]  # the last step of i's episode
            k = min(n_step, end - i + 1)
            expected_reward = sum(gamma**j * rewards[i + j] for j in range(k))
            expected_discount = 0.0 if terminated[i + k - 1] else gamma**k
            np.testing.assert_allclose(stored["rewards"][row], expected_reward, rtol=1e-5)
            np.testing.assert_allclose(stored["discounts"][row], expected_discount, rtol=1e-6)
            np.testing.assert_array_equal(stored["next_obs"][row], next_obs[i + k - 1])
        assert len(seen) == len(obs)
    finally:
        dqn.stop()


def _episode_ends(dataset_id):
    lengths = [len(e.actions) for e in minari.load_dataset(dataset_id).iterate_episodes()]
    return np.cumsum(lengths) - 1


def test_sac_prefill_stops_at_the_buffer_size_and_is_not_repeated_on_resume(tmp_path, minari_path):
    training = {"learning_starts": 10**6, "buffer_size": 700, "store_buffer_in_checkpoints": True}
    sac = _trainer(tmp_path, "sac", "Pendulum-v1", offline={"input": PENDULUM_ID}, training=training)
    try:
        sac.train()
        assert len(sac.replay_buffer) == 700  # 1000 recorded steps and the sampled ones: capped
        added = sac.replay_buffer.num_added
        path = sac.save(tmp_path / "sac-checkpoint")
    finally:
        sac.stop()
    resumed = _trainer(tmp_path, "sac", "Pendulum-v1", offline={"input": PENDULUM_ID}, training=training)
    try:
        resumed.restore(path)
        before = resumed.replay_buffer.num_added
        assert before == added
        result = resumed.train()
        assert resumed.replay_buffer.num_added == before + result["timesteps_this_iter"]
    finally:
        resumed.stop()


def test_algorithms_that_read_no_dataset_refuse_offline_input(tmp_path, minari_path):
    with pytest.raises(ConfigError, match=r"offline\.input: algorithm 'ppo' does not read datasets"):
        _trainer(tmp_path, "ppo", "CartPole-v1", offline={"input": CARTPOLE_ID})


def test_prefill_checks_the_datasets_spaces_against_the_env_before_any_step(tmp_path, minari_path):
    with pytest.raises(
        ConfigError, match=r"offline\.input: the observation space of dataset .*'Acrobot-v1' has"
    ):
        _trainer(tmp_path, "dqn", "Acrobot-v1", offline={"input": CARTPOLE_ID})


def test_prefill_gives_a_fresh_observation_filter_the_datasets_statistics(tmp_path, minari_path):
    dqn = _trainer(tmp_path, "dqn", "CartPole-v1", offline={"input": CARTPOLE_ID}, model={"observation_filter": "mean_std"},
                   training={"learning_starts": 10**6, "buffer_size": 100_000})  # fmt: skip
    try:
        dqn.train()
        obs_filter = dqn.workers.local_worker.obs_filters["default"]
        recorded = np.concatenate(
            [e.observations for e in minari.load_dataset(CARTPOLE_ID).iterate_episodes()]
        )
        assert obs_filter.stats.count >= len(recorded)
        stored = _stored_rows(dqn.replay_buffer)
        prefilled = stored["obs"][stored["eps_id"] < 0]
        # stored as the policy sees them: normalised with statistics that are mostly the data's
        raw_std = recorded.std(axis=0)
        assert raw_std.min() < 0.5 * raw_std.max()  # the raw features have unequal spreads ...
        # ... the stored ones are normalised with the data's statistics: each near mean 0, std 1
        # (the statistics also hold the first sampled steps, of a random policy: not exactly 0 and 1)
        np.testing.assert_allclose(prefilled.mean(axis=0), 0, atol=0.3)
        assert ((prefilled.std(axis=0) > 0.4) & (prefilled.std(axis=0) < 1.5)).all(), prefilled.std(axis=0)
    finally:
        dqn.stop()
