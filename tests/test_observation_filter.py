"""The observation filter (``model.observation_filter: mean_std``): statistics, evaluator, checkpoints, Ray.

Statistics are checked against numpy's mean and variance over all the data;
the filter's output against a normalisation written out by hand from a
checkpoint's arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear.errors import ConfigError
from rlgear.sampling.observation_filter import EPSILON, MeanStdFilter, RunningStats, make_observation_filter
from rlgear.spaces import Box, Discrete
from tests.conftest import small_config
from tests.counting_env import observations_seen

COUNTING_ENV = "tests.counting_env:CountingCartPole"


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(loc=[3.0, -1.0, 1e3], scale=[0.5, 2.0, 10.0], size=(n, 3))


def split(array, sizes):
    out, start = [], 0
    for size in sizes:
        out.append(array[start : start + size])
        start += size
    assert start == len(array)
    return out


# ----------------------------------------------------------------------------- the statistics


@pytest.mark.parametrize(
    "streams",
    [
        [[300]],
        [[1] * 300],
        [[100, 0, 50], [0], [150]],
        [[0, 7, 13], [280, 0]],
        [[299], [1]],
    ],
    ids=["one-batch", "row-by-row", "three-streams-with-empty-chunks", "empty-first", "one-row-stream"],
)
def test_merged_streams_equal_one_stream_over_all_the_data(streams):
    values = data()
    chunks = split(values, [size for stream in streams for size in stream])
    merged = RunningStats((3,))
    position = 0
    for stream in streams:  # each stream pushes its chunks, then is merged into the total
        stats = RunningStats((3,))
        for _ in stream:
            stats.push(chunks[position])
            position += 1
        merged.merge(stats)
    assert merged.count == 300
    np.testing.assert_allclose(merged.mean, values.mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged.var, values.var(axis=0), rtol=1e-9, atol=1e-9)


def test_worker_deltas_merged_by_the_driver_count_every_observation_once():
    values = data(seed=1)
    driver = MeanStdFilter((3,))
    workers = [MeanStdFilter((3,)) for _ in range(2)]
    chunks = split(values, [40, 60, 0, 50, 70, 80])
    for round_ in range(3):  # a sync round: both workers filter a chunk, report, get the merged state
        for w, worker in enumerate(workers):
            worker(chunks[2 * round_ + w])
        for worker in workers:
            driver.merge_delta(worker.pop_delta())
        for worker in workers:
            worker.sync(driver.get_state())
    assert driver.stats.count == 300
    np.testing.assert_allclose(driver.stats.mean, values.mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(driver.stats.var, values.var(axis=0), rtol=1e-9, atol=1e-9)
    # A worker that saw more since it reported normalises with the global statistics plus those.
    extra = data(10, seed=2)
    workers[0](extra)
    workers[0].sync(driver.get_state())
    assert workers[0].stats.count == 310 and workers[0].delta.count == 10


def test_filter_normalises_with_the_statistics_including_the_batch_and_clips():
    values = data(50, seed=3)
    obs_filter = MeanStdFilter((3,), clip=1.5)
    out = obs_filter(values)
    expected = np.clip((values - values.mean(axis=0)) / np.sqrt(values.var(axis=0) + EPSILON), -1.5, 1.5)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert out.dtype == np.float32 and np.abs(out).max() == pytest.approx(1.5)
    obs_filter.frozen = True
    obs_filter(data(5, seed=4))
    assert obs_filter.stats.count == 50  # frozen: applied, not updated
    obs_filter.frozen = False
    more = data(4, seed=5)
    obs_filter(more, valid=np.array([True, False, True, False]))  # rows without an env step
    assert obs_filter.stats.count == obs_filter.delta.count == 52
    np.testing.assert_allclose(
        obs_filter.stats.mean, np.concatenate([values, more[[0, 2]]]).mean(axis=0), rtol=1e-9
    )


def test_state_round_trip_is_exact_and_a_wrong_shape_names_the_array():
    obs_filter = MeanStdFilter((3,))
    obs_filter(data(20))
    restored = MeanStdFilter((3,))
    restored.set_state(obs_filter.get_state())
    for key, value in obs_filter.get_state().items():
        np.testing.assert_array_equal(restored.get_state()[key], value)
    with pytest.raises(ValueError, match="observation filter 'mean' has shape \\(2,\\)"):
        restored.set_state({"count": np.array(3), "mean": np.zeros(2), "m2": np.zeros(3)})


class _Model:
    def __init__(self, kind="mean_std", clip=10.0):
        self.observation_filter, self.observation_filter_clip = kind, clip


def test_images_and_discrete_observations_are_refused_with_the_key():
    image = Box(np.zeros((10, 10, 3)), np.full((10, 10, 3), 255), np.uint8)
    with pytest.raises(
        ConfigError, match=r"model\.observation_filter: mean_std normalises flat observations"
    ):
        make_observation_filter(_Model(), image)
    with pytest.raises(ConfigError, match=r"model\.observation_filter: mean_std needs Box observations"):
        make_observation_filter(_Model(), Discrete(4))
    with pytest.raises(ConfigError, match=r"model\.observation_filter_clip: expected a positive number"):
        make_observation_filter(_Model(clip=0.0), Box(np.zeros(2), np.ones(2)))
    assert make_observation_filter(_Model("none"), image) is None


# ----------------------------------------------------------------------------- in the evaluator


def filtered_config(tmp_path, **sections):
    return small_config(
        tmp_path, env={"name": COUNTING_ENV}, model={"observation_filter": "mean_std"}, **sections
    )


@pytest.fixture
def make_trainer(tmp_path):
    """Build PPO trainers from raw config mappings; every one is stopped at teardown."""
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    trainers = []

    def make(raw):
        trainer = registry.load_algorithm("ppo")(
            config_mod.resolve(raw), logdir=tmp_path / f"run{len(trainers)}"
        )
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


def test_the_batch_stores_filtered_observations_and_the_filter_sees_each_observation_once(
    tmp_path, make_trainer
):
    trainer = make_trainer(filtered_config(tmp_path))
    worker = trainer.workers.local_worker
    assert worker.obs_filter.stats.count == observations_seen(worker) == 2  # the first reset
    batch = worker.sample()
    raw_filter = worker.obs_filter
    assert batch["obs"].dtype == np.float32 and np.abs(batch["obs"]).max() <= 10.0
    assert raw_filter.stats.count == observations_seen(worker)
    # The last row was filtered with the final statistics: undoing them gives a raw CartPole state.
    last = batch["obs"][-1:]
    raw = last * np.sqrt(raw_filter.stats.var + EPSILON) + raw_filter.stats.mean
    assert np.all(np.abs(raw[:, [0, 2]]) < [4.8, 0.42])  # cart position, pole angle within CartPole's bounds
    trainer.train()
    assert worker.obs_filter.stats.count == observations_seen(worker) > 64


def test_a_resumed_run_has_the_checkpoint_filter_state_exactly(tmp_path, make_trainer):
    trainer = make_trainer(filtered_config(tmp_path))
    trainer.train()
    trainer.train()
    saved = trainer.workers.local_worker.obs_filter.get_state()
    path = trainer.save()
    resumed = make_trainer(filtered_config(tmp_path))
    resumed.restore(path)
    restored = resumed.workers.local_worker.obs_filter.get_state()
    assert int(restored["count"]) == int(saved["count"]) > 100
    for key in ("mean", "m2"):
        np.testing.assert_array_equal(restored[key], saved[key])
    resumed.train()  # and it goes on counting from there
    assert resumed.workers.local_worker.obs_filter.stats.count > int(saved["count"])


def test_resuming_a_checkpoint_without_filter_statistics_is_refused(tmp_path, make_trainer):
    from rlgear.errors import CheckpointError

    plain = make_trainer(small_config(tmp_path, env={"name": COUNTING_ENV}))
    plain.train()
    path = plain.save()
    with pytest.raises(CheckpointError, match="no observation filter statistics"):
        make_trainer(filtered_config(tmp_path)).restore(path)


def hand_filter(arrays, obs, clip=10.0):
    """``clip((obs - mean) / sqrt(M2 / count + 1e-8))`` from a checkpoint's ``obs_filter/*`` arrays."""
    count, mean, m2 = int(arrays["obs_filter/count"]), arrays["obs_filter/mean"], arrays["obs_filter/m2"]
    return np.clip((obs - mean) / np.sqrt(m2 / count + 1e-8), -clip, clip)


def test_evaluate_and_the_loaded_agent_apply_the_checkpoint_statistics_frozen(
    tmp_path, make_trainer, monkeypatch
):
    from rlgear.plugins.envs.gymnasium_env import GymnasiumVectorEnv
    from rlgear.run import agent
    from rlgear.run import checkpoint as ckpt
    from rlgear.sampling.rollout_worker import RolloutWorker

    trainer = make_trainer(filtered_config(tmp_path))
    trainer.train()
    path = trainer.save()
    arrays, _, _, _ = ckpt.read(ckpt.resolve_path(path))

    raw_seen, policy_seen, filters = [], [], []
    original_reset, original_step, original_act = (
        GymnasiumVectorEnv.reset,
        GymnasiumVectorEnv.step,
        RolloutWorker._act,
    )

    def reset(self, seed=None):
        ts = original_reset(self, seed)
        raw_seen.append(np.array(ts.observation))
        return ts

    def step(self, actions):
        ts = original_step(self, actions)
        raw_seen.append(np.array(ts.observation))
        return ts

    def act(self, ts, explore=True):
        policy_seen.append(np.array(ts.observation))
        filters.append(self.obs_filter)
        return original_act(self, ts, explore)

    monkeypatch.setattr(GymnasiumVectorEnv, "reset", reset)
    monkeypatch.setattr(GymnasiumVectorEnv, "step", step)
    monkeypatch.setattr(RolloutWorker, "_act", act)
    evaluation = agent.evaluate_checkpoint(path, episodes=3)
    assert len(evaluation.episodes) == 3
    # raw_seen[0] is the evaluator's first reset (before evaluate() restarts the envs); the policy
    # acts on every observation after it, filtered with the checkpoint's statistics.
    assert len(policy_seen) > 20
    for raw, seen in zip(raw_seen[1:], policy_seen, strict=False):
        np.testing.assert_allclose(seen, hand_filter(arrays, raw), rtol=1e-5, atol=1e-5)
    assert filters[0].frozen and filters[0].stats.count == int(arrays["obs_filter/count"])  # not updated

    loaded = rlgear.load(path)
    raw = np.array([[0.1, 0.5, -0.05, -0.3], [-1.0, 0.0, 0.1, 1.0]], dtype=np.float32)
    expected = loaded.policy.action_distribution_inputs(hand_filter(arrays, raw).astype(np.float32))
    np.testing.assert_array_equal(
        loaded.compute_actions(raw), np.argmax(expected, axis=1)
    )  # greedy on the hand-filtered observations


# ----------------------------------------------------------------------------- remote workers


def test_with_two_ray_workers_the_driver_filter_counts_every_sampled_observation(
    tmp_path, make_trainer, ray_session
):
    trainer = make_trainer(
        filtered_config(
            tmp_path,
            workers={"num_workers": 2, "num_envs_per_worker": 2, "ray": {"worker_start_timeout_s": 600.0}},
            training={"train_batch_size": 200, "sgd_minibatch_size": 50, "num_sgd_iter": 1},
        )
    )
    for _ in range(3):
        trainer.train()
    seen = trainer.workers.foreach_worker(observations_seen)  # local first, then both remote workers
    assert len(seen) == 3 and all(n > 0 for n in seen[1:])
    assert trainer.workers.local_worker.obs_filter.stats.count == sum(seen)
    # The merged statistics go back with the weights: after a sync every worker normalises with them.
    trainer.workers.sync_weights()
    states = trainer.workers.foreach_worker(lambda w: w.obs_filter.get_state())  # runs after the sync
    for state in states[1:]:
        for key, value in states[0].items():
            np.testing.assert_array_equal(state[key], value)


def test_a_refused_restore_changes_nothing(tmp_path, make_trainer):
    from rlgear.errors import CheckpointError

    plain = make_trainer(small_config(tmp_path, env={"name": COUNTING_ENV}))
    plain.train()
    path = plain.save()
    filtered = make_trainer(filtered_config(tmp_path))
    filtered.train()
    before = filtered.policy.get_weights()
    with pytest.raises(CheckpointError):
        filtered.restore(path)
    for name, value in filtered.policy.get_weights().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    assert filtered.iteration == 1
