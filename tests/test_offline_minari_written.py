"""Datasets rlgear did not write: made with Minari's own writers (``minari.DataCollector`` and
``DataCollector.create_dataset``, ``minari.create_dataset_from_buffers``), in its HDF5 and Arrow
formats, with no ``action_logp`` in their infos. The offline algorithms read them and learn from
them, off-policy estimation falls back to what needs no behaviour probabilities (one warning),
and the env's spaces are checked against the dataset's.

Datasets: CartPole-v1 (Box observations, Discrete actions), Pendulum-v1 (Box, Box) and
MaskedChoiceEnv (tests/spaces_envs.py: a Dict observation with an ``action_mask`` key), a few
episodes of a uniformly random (allowed) action each.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.errors import ConfigError
from tests.offline_data import play_episode
from tests.spaces_envs import MaskedChoiceEnv

minari = pytest.importorskip("minari", reason="needs Minari: pip install 'rlgear[offline]'")

HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None
#: The writers: Minari's DataCollector (its EpisodeBuffer needs jax, Minari's 'create' extra) and
#: create_dataset_from_buffers (episodes gathered here), each skipped with the reason when it cannot run.
WRITERS = [
    pytest.param(
        "collector",
        marks=pytest.mark.skipif(
            not HAS_JAX, reason="minari.DataCollector needs jax: pip install 'minari[create]'"
        ),
    ),
    "buffers",
]
MASKED_ENV = {"name": "tests.spaces_envs:MaskedChoiceEnv", "vectorization": "sync"}
#: (dataset name, env section of a run, gymnasium env factory, episodes)
DATASETS: dict[str, tuple[dict[str, Any], Callable[[], gym.Env], int]] = {
    "cartpole": ({"name": "CartPole-v1"}, lambda: gym.make("CartPole-v1"), 12),
    "pendulum": (
        {"name": "Pendulum-v1", "kwargs": {"max_episode_steps": 40}},
        lambda: gym.make("Pendulum-v1", max_episode_steps=40),
        6,
    ),
    "masked": (MASKED_ENV, lambda: MaskedChoiceEnv(), 10),
}


def random_action(env: gym.Env, obs: Any) -> Any:
    """A uniformly random action (an allowed one when the observation has an action_mask)."""
    if isinstance(obs, dict) and "action_mask" in obs:
        return int(env.np_random.choice(np.flatnonzero(obs["action_mask"])))
    return env.action_space.sample()


def write_dataset(writer: str, name: str, dataset_id: str, data_format: str = "hdf5") -> minari.MinariDataset:
    """``name``'s dataset under ``dataset_id`` (in ``MINARI_DATASETS_PATH``), written by Minari."""
    _, make_env, episodes = DATASETS[name]
    env = make_env()
    env.action_space.seed(0)
    metadata = dict(algorithm_name="random", author="test", author_email="t@example.com",
                    code_permalink="https://example.com", description="random actions")  # fmt: skip
    if writer == "collector":
        collector = minari.DataCollector(env, record_infos=True, data_format=data_format)
        for episode in range(episodes):
            obs, _ = collector.reset(seed=episode)
            while True:
                obs, _, terminated, truncated, _ = collector.step(random_action(collector, obs))
                if terminated or truncated:
                    break
        dataset = collector.create_dataset(dataset_id, **metadata)
        collector.close()
        return dataset
    from minari.data_collector import EpisodeBuffer

    buffers = []
    for episode in range(episodes):
        observations, actions, rewards, terminations, truncations = play_episode(
            env, lambda obs: random_action(env, obs), episode
        )
        obs = observations[-1]
        if isinstance(obs, dict):
            stacked: Any = {key: np.stack([o[key] for o in observations]) for key in obs}
        else:
            stacked = np.stack(observations)
        buffers.append(EpisodeBuffer(observations=stacked, actions=np.stack(actions), rewards=rewards,
                                     terminations=terminations, truncations=truncations))  # fmt: skip
    env_spec = env.spec if env.spec is not None else None
    return minari.create_dataset_from_buffers(
        dataset_id, buffers, env=env_spec, observation_space=env.observation_space,
        action_space=env.action_space, data_format=data_format, **metadata,
    )  # fmt: skip


@pytest.fixture
def datasets_path(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def offline_config(tmp_path: Path, algorithm: str, dataset: str, env: dict | None, **training) -> dict:
    raw = {
        "algorithm": algorithm,
        "seed": 3,
        "offline": {"input": dataset},
        "model": {"hidden_sizes": [16]},
        "training": {
            "num_gradient_steps_per_iteration": 4,
            "train_batch_size": 32,
            "evaluation_episodes": 2,
            "ope_interval": 1,
            "ope_episodes": 5,
            "fqe_iterations": 5,
            **training,
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    if env is not None:
        raw["env"] = env
    return raw


def train_once(raw: dict) -> tuple[dict[str, Any], list[str]]:
    """One iteration of ``raw``'s algorithm; its result and the warnings it gave (rlgear's)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = registry.load_algorithm(raw["algorithm"])(raw)
        try:
            result = trainer.train()
        finally:
            trainer.stop()
    return result, [str(w.message) for w in caught if "ope_methods" in str(w.message)]


DISCRETE_ALGORITHMS = ["bc", "marwil", "discrete_cql", "iql"]
CONTINUOUS_ALGORITHMS = ["bc", "marwil", "cql", "iql"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("writer", WRITERS)
def test_box_discrete_dataset_trains_every_algorithm_and_ope_falls_back_to_fqe(
    tmp_path, datasets_path, writer
):
    dataset = write_dataset(writer, "cartpole", "minari-made/cartpole-v0")
    assert dataset.spec.env_spec is not None and dataset.spec.env_spec.id == "CartPole-v1"
    assert "action_logp" not in (dataset[0].infos or {})
    env = DATASETS["cartpole"][0]
    for algorithm in DISCRETE_ALGORITHMS:
        result, ope_warnings = train_once(offline_config(tmp_path, algorithm, "minari-made/cartpole-v0", env))
        assert result["learner/num_gradient_steps"] == 4, algorithm
        losses = {k: v for k, v in result.items() if k.startswith("learner/") and k.endswith("loss")}
        assert losses and all(np.isfinite(v) for v in losses.values()), (algorithm, losses)
        assert result["evaluation/episodes"] == 2
        ope = sorted(k for k in result if k.startswith("offline/ope/"))
        assert ope == ["offline/ope/fqe"] and np.isfinite(result["offline/ope/fqe"]), (algorithm, ope)
        assert len(ope_warnings) == 1, (algorithm, ope_warnings)  # one warning, naming what is missing
        for method in ("is", "wis", "pdis", "pdwis", "dr"):
            assert f"'{method}': the dataset has no action_logp" in ope_warnings[0]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("writer", WRITERS)
def test_box_box_dataset_trains_every_algorithm_without_any_estimate(tmp_path, datasets_path, writer):
    write_dataset(writer, "pendulum", "minari-made/pendulum-v0")
    env = DATASETS["pendulum"][0]
    for algorithm in CONTINUOUS_ALGORITHMS:
        result, ope_warnings = train_once(offline_config(tmp_path, algorithm, "minari-made/pendulum-v0", env))
        assert result["learner/num_gradient_steps"] == 4, algorithm
        losses = {k: v for k, v in result.items() if k.startswith("learner/") and k.endswith("loss")}
        assert losses and all(np.isfinite(v) for v in losses.values()), (algorithm, losses)
        assert result["evaluation/episodes"] == 2
        assert not [k for k in result if k.startswith("offline/ope/")]  # fqe needs Discrete actions
        assert (
            len(ope_warnings) == 1 and "'fqe': Q-values per action need Discrete actions" in ope_warnings[0]
        )


@pytest.mark.skipif(
    not HAS_PYARROW, reason="Minari's arrow format needs pyarrow: pip install 'minari[arrow]'"
)
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ["cartpole", "masked"])
def test_arrow_format_datasets_read_as_hdf5_ones(tmp_path, datasets_path, name):
    from rlgear.offline.dataset import open_datasets

    write_dataset("buffers", name, f"minari-made/{name}-hdf5-v0", "hdf5")
    write_dataset("buffers", name, f"minari-made/{name}-arrow-v0", "arrow")
    hdf5 = list(open_datasets(f"minari-made/{name}-hdf5-v0").episodes())
    arrow = list(open_datasets(f"minari-made/{name}-arrow-v0").episodes())
    assert len(hdf5) == len(arrow)
    for a, b in zip(hdf5, arrow, strict=True):
        for key in a.observations if isinstance(a.observations, dict) else [None]:
            ours = a.observations if key is None else a.observations[key]
            theirs = b.observations if key is None else b.observations[key]
            np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.truncations, b.truncations)
    algorithm = "discrete_cql"
    result, _ = train_once(
        offline_config(tmp_path, algorithm, f"minari-made/{name}-arrow-v0", DATASETS[name][0])
    )
    assert result["learner/num_gradient_steps"] == 4


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("writer", WRITERS)
def test_the_env_spaces_are_checked_against_a_minari_dataset(tmp_path, datasets_path, writer):
    write_dataset(writer, "cartpole", "minari-made/cartpole-v0")
    raw = offline_config(tmp_path, "bc", "minari-made/cartpole-v0", {"name": "Pendulum-v1"})
    with pytest.raises(ConfigError, match=r"env\.name: env 'Pendulum-v1' has observations .* dataset "):
        registry.load_algorithm("bc")(raw)
    raw = offline_config(tmp_path, "bc", "minari-made/cartpole-v0", MASKED_ENV)
    with pytest.raises(
        ConfigError, match=r"env\.name: env 'tests.spaces_envs:MaskedChoiceEnv' has observations"
    ):
        registry.load_algorithm("bc")(raw)


# ------------------------------------------------------------------ Dict observations with an action_mask


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_dict_transitions_are_preprocessed_once_with_their_masks(tmp_path, datasets_path):
    """The trainer's minibatches: observations in the policy's flat layout (cue one-hot, noise), the
    masks of obs and next_obs beside them, every dataset action allowed by its row's mask."""
    from rlgear.offline.dataset import open_datasets
    from rlgear.sample_batch import SampleBatch as SB

    write_dataset("buffers", "masked", "minari-made/masked-v0")
    episodes = {e.id: e for e in open_datasets("minari-made/masked-v0").episodes()}
    trainer = registry.load_algorithm("discrete_cql")(
        offline_config(tmp_path, "discrete_cql", "minari-made/masked-v0", None)
    )
    try:
        assert trainer.observations.observation_space.shape == (4,)  # cue one-hot (2) + noise (2)
        for _ in range(3):
            batch = next(trainer.batches)
            assert batch[SB.OBS].shape == (32, 4) and batch[SB.NEXT_OBS].shape == (32, 4)
            for i in range(len(batch)):
                episode, t = episodes[int(batch[SB.EPS_ID][i])], int(batch[SB.T][i])
                raw = episode.observations
                np.testing.assert_array_equal(batch[SB.ACTION_MASK][i], raw["action_mask"][t].astype(bool))
                np.testing.assert_array_equal(
                    batch[SB.NEXT_ACTION_MASK][i], raw["action_mask"][t + 1].astype(bool)
                )
                np.testing.assert_array_equal(
                    batch[SB.OBS][i], [raw["cue"][t] == 0, raw["cue"][t] == 1, *raw["noise"][t]]
                )
                assert batch[SB.ACTION_MASK][i][batch[SB.ACTIONS][i]]  # the data's action was allowed
                assert batch[SB.DISCOUNTS][i] == pytest.approx(
                    trainer.config.training.gamma
                )  # truncations only
    finally:
        trainer.stop()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("algorithm", ["bc", "marwil", "discrete_cql", "iql"])
def test_dict_dataset_with_action_mask_trains_and_evaluates_within_the_mask(
    tmp_path, datasets_path, writer, algorithm
):
    write_dataset(writer, "masked", "minari-made/masked-v0")
    raw = offline_config(tmp_path, algorithm, "minari-made/masked-v0", MASKED_ENV, evaluation_episodes=4)
    violations = MaskedChoiceEnv.violations
    actions = MaskedChoiceEnv.actions_taken
    result, ope_warnings = train_once(raw)
    assert result["learner/num_gradient_steps"] == 4
    losses = {k: v for k, v in result.items() if k.startswith("learner/") and k.endswith("loss")}
    assert losses and all(np.isfinite(v) for v in losses.values()), losses
    assert result["evaluation/episodes"] == 4
    assert MaskedChoiceEnv.actions_taken - actions == 4 * 20  # the greedy episodes ran here
    assert MaskedChoiceEnv.violations == violations  # and never took a masked action
    assert sorted(k for k in result if k.startswith("offline/ope/")) == ["offline/ope/fqe"]
    assert len(ope_warnings) == 1


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("algorithm", ["bc", "discrete_cql", "iql"])
def test_single_transition_algorithms_hold_input_shuffle_buffer_episodes(tmp_path, datasets_path, algorithm):
    write_dataset("buffers", "cartpole", "minari-made/cartpole-v0")
    raw = offline_config(tmp_path, algorithm, "minari-made/cartpole-v0", None)
    raw["offline"]["input_shuffle_buffer_episodes"] = 2
    trainer = registry.load_algorithm(algorithm)(raw)
    try:
        stream = trainer.batches._stream
        assert stream.capacity == 2
        for _ in range(30):
            next(trainer.batches)
            assert len(stream._pool) <= 2  # two of the 12 episodes in memory, as the key says
        assert stream.episodes_read > 2
    finally:
        trainer.stop()
