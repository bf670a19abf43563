"""offline.output records a run as a Minari dataset that minari.load_dataset reads; offline.input
reads datasets back (streamed, sharded, as transitions); bad inputs are one-line errors."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

import rlgear
from rlgear.discovery.hooks import HookError
from rlgear.errors import ConfigError, DatasetError, UnsupportedError
from rlgear.offline.dataset import open_datasets
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete
from tests.conftest import small_config

minari = pytest.importorskip("minari", reason="needs Minari: pip install 'rlgear[offline]'")

MAX_STEPS = 30  # CartPole cut short: episodes end by truncation as well as by termination
CARTPOLE = {"name": "CartPole-v1", "kwargs": {"max_episode_steps": MAX_STEPS}}


class SampledRows:
    """What the sampler gave the learner: (obs, action, logp) of every trained row."""

    def __init__(self):
        self.rows: set[tuple] = set()
        self.obs: list[np.ndarray] = []

    @rlgear.hookimpl
    def on_sample_end(self, worker, batch):
        obs, actions, logp = (np.asarray(batch[k]) for k in ("obs", "actions", "action_logp"))
        self.obs.append(obs.copy())
        for o, a, lp in zip(obs, actions, logp, strict=True):
            self.rows.add((o.tobytes(), int(a), np.float32(lp).tobytes()))


def _train(tmp_path, hooks=(), **sections):
    sections.setdefault("env", CARTPOLE)
    sections.setdefault("stop", {"timesteps_total": 400})
    return rlgear.train(small_config(tmp_path, **sections), hooks=hooks)


@pytest.fixture
def datasets_path(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture(scope="module")
def cartpole_dataset(tmp_path_factory):
    """A recorded PPO CartPole dataset (a path), shared by the reader tests."""
    tmp_path = tmp_path_factory.mktemp("offline")
    _train(tmp_path, offline={"output": str(tmp_path / "cartpole")}, stop={"timesteps_total": 600})
    return tmp_path / "cartpole"


def _assert_cartpole_episode_ends_right(observations, terminations, truncations):
    assert not terminations[:-1].any() and not truncations[:-1].any()
    assert terminations[-1] != truncations[-1]  # kept apart: exactly one ends the episode
    x, theta = observations[-1][0], observations[-1][2]
    fell = abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360
    assert terminations[-1] == fell
    assert truncations[-1] == (len(terminations) == MAX_STEPS and not fell)


# ------------------------------------------------------------------ recording


def test_round_trip_a_ppo_run_is_a_minari_dataset_of_exactly_what_was_sampled(tmp_path, datasets_path):
    sampled = SampledRows()
    result = _train(
        tmp_path, hooks=[sampled], offline={"output": "rlgear-test/cartpole-v0", "output_author": "me"}
    )

    dataset = minari.load_dataset("rlgear-test/cartpole-v0")
    assert dataset.total_episodes == result["episodes_total"] > 5  # every finished episode, no other
    assert dataset.spec.dataset_id == "rlgear-test/cartpole-v0"
    metadata = dataset.storage.metadata
    assert metadata["algorithm_name"] == "ppo" and metadata["author"] == {"me"}
    assert metadata["minari_version"] == minari.__version__
    assert metadata["rlgear_env"] == "CartPole-v1" and metadata["rlgear_env_adapter"] == "gymnasium"
    assert metadata["rlgear_env_kwargs"] == {"max_episode_steps": MAX_STEPS}  # what rlgear evaluate rebuilds
    assert dataset.spec.env_spec is None  # env kwargs: the id alone would build another env
    assert dataset.observation_space.shape == (4,) and dataset.action_space.n == 2
    assert "rlgear-test/cartpole-v0" in minari.list_local_datasets()
    assert not [p for p in datasets_path.rglob("*") if ".partial" in p.name]
    steps = 0
    truncated = terminated = 0
    for episode in dataset:
        t = len(episode.rewards)
        steps += t
        assert episode.observations.shape == (t + 1, 4) and episode.actions.shape == (t,)
        np.testing.assert_array_equal(episode.rewards, np.ones(t))
        _assert_cartpole_episode_ends_right(episode.observations, episode.terminations, episode.truncations)
        truncated += bool(episode.truncations[-1])
        terminated += bool(episode.terminations[-1])
        logp = episode.infos["action_logp"]
        assert logp.dtype == np.float32 and logp.shape == (t,)
        for o, a, lp in zip(episode.observations[:-1], episode.actions, logp, strict=True):
            # the same observation, action and behaviour log-probability as the row the learner got
            assert (o.tobytes(), int(a), np.float32(lp).tobytes()) in sampled.rows
    assert truncated and terminated
    assert dataset.total_steps == steps

    data = open_datasets("rlgear-test/cartpole-v0")  # read back by rlgear: identical
    assert data.has_action_logp and data.total_episodes == dataset.total_episodes
    assert data.env_id == "CartPole-v1" and data.env.kwargs == {"max_episode_steps": MAX_STEPS}
    assert data.observation_space == Box(dataset.observation_space.low, dataset.observation_space.high)
    assert data.action_space == Discrete(2)
    for ours, theirs in zip(data.episodes(), dataset, strict=True):
        assert ours.id == theirs.id
        np.testing.assert_array_equal(ours.observations, theirs.observations)
        np.testing.assert_array_equal(ours.actions, theirs.actions)
        np.testing.assert_array_equal(ours.rewards, theirs.rewards)
        np.testing.assert_array_equal(ours.terminations, theirs.terminations)
        np.testing.assert_array_equal(ours.truncations, theirs.truncations)
        np.testing.assert_array_equal(ours.action_logp, theirs.infos["action_logp"])


def test_observations_are_recorded_raw_not_filtered(tmp_path):
    sampled = SampledRows()
    _train(
        tmp_path,
        hooks=[sampled],
        offline={"output": str(tmp_path / "ds")},
        model={"observation_filter": "mean_std"},
    )
    data = open_datasets(str(tmp_path / "ds"))
    firsts = np.array([episode.observations[0] for episode in data.episodes()])
    assert np.all(np.abs(firsts) <= 0.05)  # CartPole's reset range: the env's own observations
    trained = np.concatenate(sampled.obs)
    assert np.abs(trained).max() > 1.0  # the learner saw normalised ones (else the check proves nothing)


def test_dict_observations_are_recorded_as_the_env_gave_them(tmp_path):
    _train(
        tmp_path,
        env={"name": "tests.spaces_envs:MaskedChoiceEnv", "vectorization": "sync"},
        offline={"output": str(tmp_path / "ds")},
        stop={"timesteps_total": 200},
    )
    dataset = minari.MinariDataset(str(tmp_path / "ds" / "data"))
    episode = dataset[0]
    assert set(episode.observations) == {"action_mask", "cue", "noise"}
    t = len(episode.rewards)
    assert episode.observations["noise"].shape == (t + 1, 2)
    assert episode.observations["action_mask"].shape == (t + 1, 4)
    for mask, action in zip(episode.observations["action_mask"][:-1], episode.actions, strict=True):
        assert mask[action] == 1  # the masked policy chose an allowed action: rows line up
    data = open_datasets(str(tmp_path / "ds"))
    ours = next(data.episodes())
    for key in ("action_mask", "cue", "noise"):
        np.testing.assert_array_equal(ours.observations[key], episode.observations[key])
    batch = next(data.transitions(8, np.random.default_rng(0)))
    assert (
        batch[SampleBatch.OBS].ndim == 2 and batch[SampleBatch.NEXT_OBS].shape == batch[SampleBatch.OBS].shape
    )


def test_remote_workers_episodes_reach_the_dataset(tmp_path, ray_session):
    result = _train(tmp_path, offline={"output": str(tmp_path / "ds")}, workers={"num_workers": 1})
    dataset = minari.MinariDataset(str(tmp_path / "ds" / "data"))
    assert dataset.total_episodes >= 1
    assert dataset.total_episodes <= result["episodes_total"]  # a late metrics answer may come next time
    for episode in dataset:
        _assert_cartpole_episode_ends_right(episode.observations, episode.terminations, episode.truncations)
        assert len(episode.infos["action_logp"]) == len(episode.rewards)


class _Interrupt:
    def __init__(self, how: str):
        self.how = how

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        if result["training_iteration"] == 2:
            if self.how == "sigint":
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the run stops after this iteration
            else:
                raise RuntimeError("boom")


@pytest.mark.parametrize("how", ["sigint", "error"])
def test_an_interrupted_run_leaves_a_valid_dataset_of_its_finished_episodes(tmp_path, how):
    config = small_config(tmp_path, env=CARTPOLE, offline={"output": str(tmp_path / "ds")})
    if how == "sigint":
        result = rlgear.train(config, hooks=[_Interrupt(how)])
        assert result["training_iteration"] == 2
    else:
        with pytest.raises(HookError, match="boom"):  # an error inside the run, as a hook's is
            rlgear.train(config, hooks=[_Interrupt(how)])
    dataset = minari.MinariDataset(str(tmp_path / "ds" / "data"))
    assert dataset.total_episodes >= 1
    assert sum(len(e.rewards) for e in dataset) == dataset.total_steps
    assert [p.name for p in tmp_path.iterdir() if ".partial" in p.name] == []


def test_a_recorder_that_fails_at_setup_leaves_nothing_on_disk(tmp_path, monkeypatch):
    """minari's storage can fail while the dataset is created (a space it can't hold; before the
    offline extra listed pillow, 'No module named PIL'): the run's error, and no ``.partial`` folder."""
    from minari.dataset.minari_storage import MinariStorage

    def fail(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'PIL'")

    monkeypatch.setattr(MinariStorage, "new", staticmethod(fail))
    config = small_config(tmp_path, env=CARTPOLE, offline={"output": str(tmp_path / "ds")})
    with pytest.raises(ModuleNotFoundError, match="PIL"):
        rlgear.train(config)
    assert [p.name for p in tmp_path.iterdir() if ".partial" in p.name or p.name == "ds"] == []


# ------------------------------------------------------------------ reading


def test_two_shards_partition_the_episodes(cartpole_dataset):
    data = open_datasets(str(cartpole_dataset))
    shard0 = [e.id for e in data.episodes(0, 2)]
    shard1 = [e.id for e in data.episodes(1, 2)]
    assert not set(shard0) & set(shard1)
    assert sorted(shard0 + shard1) == list(range(data.total_episodes))
    shuffled = [e.id for e in data.episodes(0, 2, rng=np.random.default_rng(1))]
    assert sorted(shuffled) == sorted(shard0) and shuffled != shard0


def test_transitions_have_the_columns_and_next_obs_of_a_terminal_is_the_final_observation(cartpole_dataset):
    data = open_datasets(str(cartpole_dataset))
    episodes = {e.id: e for e in data.episodes()}
    stream = data.transitions(64, np.random.default_rng(0))
    batch = next(stream)
    assert {
        SampleBatch.OBS, SampleBatch.NEXT_OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS,
        SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS, SampleBatch.ACTION_LOGP,
    } <= set(batch)  # fmt: skip
    assert len(batch) == 64 and batch[SampleBatch.REWARDS].dtype == np.float32
    ends = 0
    for _ in range(20):
        batch = next(stream)
        for i in range(len(batch)):
            episode = episodes[int(batch[SampleBatch.EPS_ID][i])]
            t = int(batch[SampleBatch.T][i])
            np.testing.assert_array_equal(batch[SampleBatch.OBS][i], episode.observations[t])
            np.testing.assert_array_equal(batch[SampleBatch.NEXT_OBS][i], episode.observations[t + 1])
            assert batch[SampleBatch.ACTIONS][i] == episode.actions[t]
            assert batch[SampleBatch.TERMINATEDS][i] == episode.terminations[t]
            if batch[SampleBatch.TERMINATEDS][i] or batch[SampleBatch.TRUNCATEDS][i]:
                ends += 1
                assert t == len(episode) - 1  # next_obs is the final observation
                np.testing.assert_array_equal(batch[SampleBatch.NEXT_OBS][i], episode.observations[-1])
    assert ends


def test_a_bounded_buffer_streams_the_dataset_pass_after_pass(cartpole_dataset):
    data = open_datasets(str(cartpole_dataset))
    stream = data.transitions(16, np.random.default_rng(0), buffer_episodes=2)
    for _ in range(200):
        next(stream)
        assert len(stream._pool) <= 2  # never more than two episodes in memory
    assert stream.epochs_completed >= 1
    assert stream.episodes_read > data.total_episodes


@pytest.mark.filterwarnings("ignore:.*is set to None:UserWarning", "ignore:env_spec is None:UserWarning")
def test_a_dataset_minari_wrote_reads_without_logp(datasets_path):
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(0)
    buffers = [
        EpisodeBuffer(
            observations=rng.random((t + 1, 3)).astype(np.float32),
            actions=rng.integers(0, 2, t),
            rewards=list(rng.random(t)),
            terminations=[False] * (t - 1) + [True],
            truncations=[False] * t,
        )
        for t in (3, 5, 4)
    ]
    minari.create_dataset_from_buffers(
        "made-by-minari-v0", buffers, observation_space=gym.spaces.Box(0, 1, (3,), np.float32),
        action_space=gym.spaces.Discrete(2), algorithm_name="random", author="a", author_email="a@b",
        code_permalink="x", description="d",
    )  # fmt: skip
    data = open_datasets(
        "made-by-minari-v0", observation_space=Box(np.zeros(3), np.ones(3)), action_space=Discrete(2)
    )
    assert not data.has_action_logp and data.total_episodes == 3 and data.total_steps == 12
    for ours, theirs in zip(data.episodes(), buffers, strict=True):
        np.testing.assert_array_equal(ours.observations, theirs.observations)
        np.testing.assert_array_equal(ours.rewards, np.float32(theirs.rewards))
        assert ours.action_logp is None and ours.terminations[-1]
    batch = next(data.transitions(5, np.random.default_rng(0)))
    assert SampleBatch.ACTION_LOGP not in batch and len(batch) == 5


# ------------------------------------------------------------------ bad input


def test_a_missing_dataset_names_the_key_and_where_it_looked(tmp_path, datasets_path):
    with pytest.raises(ConfigError, match=r"offline.input: no Minari dataset 'nope/missing-v0'") as err:
        open_datasets("nope/missing-v0")
    assert str(datasets_path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=rf"looked in {tmp_path / 'absent'}"):
        open_datasets(str(tmp_path / "absent"))


def test_spaces_that_differ_name_both(cartpole_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"observation space .* Box.*\(4,\).*env 'Other' has Box.*\(3,\)"):
        open_datasets(str(cartpole_dataset), observation_space=Box(-np.ones(3), np.ones(3)),
                      action_space=Discrete(2), env_name="Other")  # fmt: skip
    other = tmp_path / "other"
    _train(
        tmp_path,
        env={"name": "Pendulum-v1", "kwargs": {"max_episode_steps": 20}},
        offline={"output": str(other)},
        stop={"timesteps_total": 200},
    )
    with pytest.raises(ConfigError, match=r"datasets '.*cartpole' and '.*other' have different observation"):
        open_datasets([str(cartpole_dataset), str(other)])


def test_a_corrupt_file_is_a_one_line_error(cartpole_dataset, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(cartpole_dataset, broken)
    (broken / "data" / "main_data.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(DatasetError) as err:
        list(open_datasets(str(broken)).episodes())
    assert "offline.input" in str(err.value) and "\n" not in str(err.value)
    (broken / "data" / "metadata.json").write_text("{ truncated")
    with pytest.raises(DatasetError, match="not a readable Minari dataset"):
        open_datasets(str(broken))


def test_an_existing_output_is_refused_unless_overwrite(cartpole_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"offline.output: a dataset exists at .*output_overwrite"):
        _train(tmp_path, offline={"output": str(cartpole_dataset)})
    target = tmp_path / "again"
    _train(tmp_path, offline={"output": str(target)}, stop={"timesteps_total": 100})
    first = minari.MinariDataset(str(target / "data")).total_episodes
    _train(tmp_path, offline={"output": str(target), "output_overwrite": True}, stop={"timesteps_total": 300})
    assert minari.MinariDataset(str(target / "data")).total_episodes > first


def test_recording_several_policies_or_a_multi_agent_env_is_refused(tmp_path):
    from rlgear import config as config_mod

    raw = small_config(tmp_path, offline={"output": str(tmp_path / "ds")},
                       multiagent={"policies": {"a": {}, "b": {}}, "policy_mapping": {"*": "a"}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"offline.output: recording a run of several policies"):
        config_mod.resolve(raw)
    with pytest.raises(UnsupportedError, match=r"offline.output: recording a multi-agent env"):
        _train(
            tmp_path,
            env={"adapter": "vector", "name": "tests.multi_agent_envs:make_match"},
            offline={"output": str(tmp_path / "ma")},
        )
    assert not Path(tmp_path / "ma").exists()


def test_an_external_env_run_records_its_clients_episodes(tmp_path):
    """rlgear serve's path: clients over TCP, episodes assembled in the driver's sampler all the same."""
    import subprocess
    import threading

    from tests.test_external_learning import _clients, _config, _kill_all, _wait_address

    address_file = tmp_path / "address"
    config = _config(
        tmp_path,
        address_file,
        "env.kwargs.min_clients=2",
        "workers.num_envs_per_worker=2",
        "training.min_env_steps_per_iteration=256",
        "training.num_sgd_iter=1",
        "stop={timesteps_total: 600}",
        f"offline.output={tmp_path / 'ds'}",
    )
    procs: list[subprocess.Popen] = []
    launcher = threading.Thread(
        target=lambda: procs.extend(_clients(_wait_address(address_file), (1, 2), stdout=subprocess.DEVNULL)),
        daemon=True,
    )
    launcher.start()
    try:
        result = rlgear.train(config)
    finally:
        launcher.join(60)
        _kill_all(procs)
    dataset = minari.MinariDataset(str(tmp_path / "ds" / "data"))
    assert dataset.total_episodes == result["episodes_total"] >= 1
    for episode in dataset:
        assert not episode.truncations.any()  # CartPole-v1's 500-step limit is never reached here
        assert episode.terminations[-1] and not episode.terminations[:-1].any()
        last = episode.observations[-1]
        assert abs(last[0]) > 2.4 or abs(last[2]) > 12 * 2 * np.pi / 360  # the pole fell: a true terminal
        assert len(episode.infos["action_logp"]) == len(episode.rewards)
