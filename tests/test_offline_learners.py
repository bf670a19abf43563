"""Offline runs with learner actors (``learners.num_learners``): each learner reads its own shard.

The Ray tests share one module Ray and a small Minari dataset of short CartPole episodes. Their
equality check rebuilds, in the driver, exactly the readers the actors hold (same shard, same
generator, same batch code) and feeds a single learner the union of their rows: a learner that
read another shard, other rows, unfiltered observations or took a wrong share of the gradient
would end on other weights.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.distributed.ray_session import shutdown_ray
from rlgear.errors import ConfigError, UnsupportedError
from rlgear.plugins.families.offline import learner_readers
from rlgear.run.runner import run
from rlgear.sample_batch import SampleBatch
from rlgear.trainer import read_progress
from tests.conftest import HAS_RAY, start_local_ray
from tests.offline_data import record_cartpole, use_data

RAY_CPUS = 4
NUM_EPISODES = 10


def flat_weights(weights: dict, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in weights.items():
        if isinstance(value, dict):
            out.update(flat_weights(value, f"{prefix}{key}/"))
        else:
            out[prefix + key] = np.array(value)
    return out


@pytest.fixture(scope="module")
def short_episodes():
    """Random-action CartPole episodes (about 20 steps each)."""
    return record_cartpole(lambda obs, rng: int(rng.integers(2)), episodes=NUM_EPISODES, seed=0)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory, short_episodes):
    """``short_episodes`` as a Minari dataset on disk (what learner actors open themselves)."""
    minari = pytest.importorskip("minari", reason="needs Minari: pip install 'rlgear[offline]'")
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer

    root = tmp_path_factory.mktemp("minari")
    buffers = [
        EpisodeBuffer(
            observations=e.observations,
            actions=e.actions,
            rewards=list(e.rewards),
            terminations=list(e.terminations),
            truncations=list(e.truncations),
        )
        for e in short_episodes._episodes
    ]
    env = gym.make("CartPole-v1")
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        with warnings.catch_warnings():  # Minari warns about the metadata a test leaves out
            warnings.simplefilter("ignore")
            minari.create_dataset_from_buffers(
                "cartpole-random-v0", buffers, observation_space=env.observation_space,
                action_space=env.action_space, algorithm_name="random", author="a",
                author_email="a@b", code_permalink="x", description="d",
            )  # fmt: skip
    finally:
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous
    return root / "cartpole-random-v0"


@pytest.fixture(scope="module")
def ray_session():
    if not HAS_RAY:
        pytest.skip("needs Ray: pip install 'rlgear[ray]'")
    shutdown_ray(force=True)
    start_local_ray(num_cpus=RAY_CPUS)
    yield
    shutdown_ray(force=True)


def raw_config(tmp_path, algorithm: str, dataset, num_learners: int, **training) -> dict:
    return {
        "algorithm": algorithm,
        "seed": 3,
        "offline": {"input": str(dataset)},
        "learners": {"num_learners": num_learners},
        "training": {"num_gradient_steps_per_iteration": 4, "train_batch_size": 33, **training},
        "model": {"hidden_sizes": [16], "observation_filter": "mean_std"},
        "workers": {"ray": {"worker_start_timeout_s": 300.0}},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }


@pytest.mark.parametrize("algorithm", ["bc", pytest.param("marwil", marks=pytest.mark.slow)])
def test_two_learners_each_read_their_shard_and_make_one_learners_update(
    tmp_path, ray_session, dataset_path, algorithm
):
    """2 learners, 33-row minibatches (17 + 16 rows), 8 updates vs one learner on the union of
    their rows. marwil reads whole episodes (returns-to-go with the reader's current V) and its
    advantage norm must be the whole minibatch's; budget about 40 s each."""
    bc = registry.load_algorithm(algorithm)
    training = {"lr": 0.01}
    if algorithm == "marwil":  # a norm that moves: a learner's own mean of A^2 would show
        training["moving_average_sqd_adv_norm_update_rate"] = 0.5
    raw = raw_config(tmp_path, algorithm, dataset_path, 2, **training)
    trainer = bc(raw)
    try:
        for _ in range(2):
            result = trainer.train()
        infos = trainer.learner.on_each("reader_info")
        sharded = flat_weights(trainer.learner.get_weights())
    finally:
        trainer.stop()
    assert result["learner/num_learners"] == 2.0 and result["learner/num_gradient_steps"] == 8
    assert result["offline/rows_read"] == 8 * 33
    assert [(i["rank"], i["shard"], i["num_shards"]) for i in infos] == [(0, 0, 2), (1, 1, 2)]
    assert [i["rows_per_update"] for i in infos] == [17, 16]
    assert [i["rows_read"] for i in infos] == [8 * 17, 8 * 16]

    # The same readers, rebuilt here, and one learner in the driver on the union of their rows.
    single = bc(raw_config(tmp_path, algorithm, dataset_path, 0, **training))
    try:
        initial = flat_weights(single.learner.get_weights())
        factory = learner_readers.ReaderFactory(
            bc, single.config, single.data.reopen(), single.observations.obs_filter.get_state()
        )
        readers = [factory(single.learner, rank, 2, None) for rank in range(2)]
        for _ in range(8):
            parts = [next(reader.batches) for reader in readers]
            for rank, part in enumerate(parts):  # shard r: every other episode, starting at r
                if SampleBatch.EPS_ID in part:  # transitions (bc); marwil's episode rows have no ids
                    assert set(np.asarray(part[SampleBatch.EPS_ID]) % 2) == {rank}
            single.learner.update(SampleBatch.concat(parts))
        alone = flat_weights(single.learner.get_weights())
    finally:
        single.stop()
    assert set(alone) == set(sharded)
    gap = max(float(np.max(np.abs(alone[k] - sharded[k]))) for k in alone)
    print(f"max abs weight gap, 2 learners vs 1 on the union: {gap:.2g}")
    assert gap <= 1e-5, f"2 offline learners drifted from one learner on their rows by {gap}"
    assert max(float(np.max(np.abs(initial[k] - sharded[k]))) for k in initial) > 1e-3


def test_an_offline_run_with_learners_resumes_from_its_checkpoint(tmp_path, ray_session, dataset_path):
    """discrete_cql, 2 learners: target updates (in the actors) and rows read go on after a resume."""
    raw = raw_config(tmp_path, "discrete_cql", dataset_path, 2, target_network_update_freq=3)
    raw["logging"]["name"] = "offline-learners"
    raw["stop"] = {"learner/num_gradient_steps": 8}
    first = run(config_mod.resolve(raw), progress="none")
    assert first["learner/num_target_updates"] == 2 and first["offline/rows_read"] == 8 * 33
    run_dir = tmp_path / "runs" / "offline-learners"
    resumed = config_mod.resolve({**raw, "stop": {"learner/num_gradient_steps": 16}})
    second = run(resumed, resume=run_dir, progress="none")
    assert second["learner/num_gradient_steps"] == 16 and second["training_iteration"] == 4
    assert second["learner/num_target_updates"] == 5  # steps 3, 6 | 9, 12, 15
    assert second["offline/rows_read"] == 16 * 33
    assert second["learner/num_learners"] == 2.0
    rows = read_progress(run_dir)
    assert [r["learner/num_gradient_steps"] for r in rows] == [4, 8, 12, 16]
    assert all(np.isfinite(r["learner/total_loss"]) for r in rows)


def test_a_dataset_that_actors_cannot_open_is_one_line_before_ray_starts(
    tmp_path, monkeypatch, short_episodes
):
    use_data(monkeypatch, short_episodes)  # in the driver's memory: no reopen()
    bc = registry.load_algorithm("bc")
    with pytest.raises(UnsupportedError, match=r"learners.num_learners: 2: .*has no reopen\(\)") as err:
        bc(raw_config(tmp_path, "bc", "tests/in-memory-v0", 2))
    assert "\n" not in str(err.value)
    with pytest.raises(
        ConfigError, match=r"training.train_batch_size: 1 rows per update can't be shared by 2"
    ):
        bc(raw_config(tmp_path, "bc", "tests/in-memory-v0", 2, train_batch_size=1))


def test_rows_per_learner_split_the_minibatch():
    assert learner_readers.rows_per_learner(33, 2) == [17, 16]
    assert learner_readers.rows_per_learner(8, 3) == [3, 3, 2]
    assert sum(learner_readers.rows_per_learner(1000, 7)) == 1000
