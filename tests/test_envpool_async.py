"""envpool's async mode (``env.kwargs.batch_size`` < ``workers.num_envs_per_worker``): the pool steps
some envs while the policy acts on the others; each env slot's stream must be the sync pool's."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install 'rlgear[envpool]')")

import rlgear
from rlgear.config import resolve
from rlgear.errors import ConfigError
from rlgear.plugins.envs.envpool_async import EnvPoolAsyncEnv
from rlgear.plugins.envs.envpool_env import EnvPoolAdapter
from rlgear.sampling.agents import OneAgentEnv
from rlgear.testing import check_multi_agent_env
from rlgear.timestep import StepType

AGENT = OneAgentEnv.AGENT


def make(name="CartPole-v1", num_envs=4, batch_size=2, horizon=None, **kwargs):
    return EnvPoolAdapter().make(name, num_envs, kwargs={"batch_size": batch_size, **kwargs}, horizon=horizon)


def test_a_batch_below_the_envs_builds_the_async_pool_and_equal_builds_the_sync_one():
    env = make(batch_size=2)
    assert isinstance(env, EnvPoolAsyncEnv) and env.steps_per_call == 2 and env.one_agent
    assert env.observation_space.shape == (4,) and env.action_space.n == 2
    env.close()
    sync = make(batch_size=4)
    assert not isinstance(sync, EnvPoolAsyncEnv) and sync.num_envs == 4
    sync.close()


@pytest.mark.parametrize(
    ("batch_size", "pattern"),
    [
        (3, r"env\.kwargs\.batch_size: workers\.num_envs_per_worker \(4\) must be a multiple of it"),
        (0, r"env\.kwargs\.batch_size: expected an integer from 1 to workers\.num_envs_per_worker \(4\)"),
        (8, r"env\.kwargs\.batch_size: expected an integer from 1"),
        (True, r"env\.kwargs\.batch_size: expected an integer"),
    ],
)
def test_a_bad_batch_size_is_a_config_error_naming_the_key(batch_size, pattern):
    raw = {"algorithm": "ppo", "env": {"adapter": "envpool", "name": "CartPole-v1",
                                       "kwargs": {"batch_size": batch_size}},
           "workers": {"num_envs_per_worker": 4}}  # fmt: skip
    with pytest.raises(ConfigError, match=pattern):
        resolve(raw)


@pytest.mark.parametrize(
    ("section", "pattern"),
    [
        ({"env": {"wrappers_vector": [{"name": "gymnasium.wrappers.vector.NormalizeReward"}]}},
         r"env\.wrappers_vector: not with envpool's async mode"),
        ({"offline": {"output": "./ds"}}, r"offline\.output: not with envpool's async mode"),
    ],
)  # fmt: skip
def test_what_needs_lockstep_envs_is_refused_in_async_mode(section, pattern):
    raw = {"algorithm": "ppo", "workers": {"num_envs_per_worker": 4},
           "env": {"adapter": "envpool", "name": "CartPole-v1", "kwargs": {"batch_size": 2},
                   **section.get("env", {})},
           **{k: v for k, v in section.items() if k != "env"}}  # fmt: skip
    with pytest.raises(ConfigError, match=pattern):
        resolve(raw)


def test_the_async_pool_passes_the_multi_agent_contract_check():
    counts = check_multi_agent_env(make(horizon=20), steps=300)
    assert counts  # it stepped and checked something


def per_slot_streams(steps_of, num_envs):
    """``[(obs, reward, step_type, discount)]`` per env slot, from (TimeStep, active rows) pairs."""
    streams = [[] for _ in range(num_envs)]
    for ts, active in steps_of:
        for i in np.flatnonzero(active):
            streams[i].append((ts.observation[i].copy(), float(ts.reward[i]), int(ts.step_type[i]),
                               float(ts.discount[i])))  # fmt: skip
    return streams


def test_every_env_slot_sees_the_sync_pools_stream(monkeypatch):
    """Constant actions make each env's stream a function of its seed alone: in async mode each slot
    must see exactly what the sync pool's same slot sees (episodes, resets and truncations included)."""
    num_envs, horizon, calls = 4, 15, 160
    sync = EnvPoolAdapter().make("CartPole-v1", num_envs, kwargs={}, horizon=horizon)
    steps = [(sync.reset(seed=3), np.ones(num_envs, bool))]
    for _ in range(calls // 2):
        steps.append((sync.step(np.ones(num_envs, np.int64)), np.ones(num_envs, bool)))
    sync.close()
    expected = per_slot_streams(steps, num_envs)

    env = make(num_envs=num_envs, batch_size=2, horizon=horizon)
    mts = env.reset(seed=3)
    got_steps = [(mts.steps[AGENT], mts.active[AGENT])]
    for _ in range(calls):
        mts = env.step({AGENT: np.ones(num_envs, np.int64)})
        assert mts.stepped.sum() == 2 and np.array_equal(mts.stepped, mts.active[AGENT])
        got_steps.append((mts.steps[AGENT], mts.active[AGENT]))
    env.close()
    got = per_slot_streams(got_steps, num_envs)
    for slot in range(num_envs):
        n = min(len(got[slot]), len(expected[slot]))
        assert n >= 40, (slot, len(got[slot]))  # several episodes of at most 15 steps
        for k in range(n):
            (obs, reward, step_type, discount), (e_obs, e_reward, e_type, e_discount) = (
                got[slot][k],
                expected[slot][k],
            )
            np.testing.assert_allclose(obs, e_obs, rtol=0, atol=0)
            assert (reward, step_type, discount) == (e_reward, e_type, e_discount), (slot, k)
        types = [s[2] for s in got[slot][:n]]
        assert types.count(int(StepType.FIRST)) >= 3  # resets happened in that stretch


class RandomOrderPool:
    """envpool's async ``send``/``recv`` over gymnasium's CartPole, returning a random ``batch_size``
    of the envs that are ready: on a loaded machine with several envpool threads the envs come back
    in an order no test can fix, so the adapter and the sampler must be right for any order."""

    def __init__(self, num_envs, batch_size, seed, horizon=None, order_seed=0):
        import gymnasium as gym

        self.batch_size, self.seed = batch_size, seed
        self.envs = [gym.make("CartPole-v1", max_episode_steps=horizon or 500) for _ in range(num_envs)]
        self.observation_space, self.action_space = self.envs[0].observation_space, self.envs[0].action_space
        self.config = {}
        self.rng = np.random.default_rng(order_seed)
        self.ready = {}  # env id -> (obs, reward, terminated, truncated)
        self.ended = np.zeros(num_envs, bool)

    def async_reset(self):
        for i, env in enumerate(self.envs):
            self.ready[i] = (env.reset(seed=self.seed + i)[0], 0.0, False, False)
        self.ended[:] = False

    def send(self, actions, env_ids):
        for action, i in zip(actions, env_ids.tolist(), strict=True):
            assert i not in self.ready, f"env {i} was sent an action before it came back"
            if self.ended[i]:  # envpool's next-step reset: the action sent at the LAST is ignored
                result = (self.envs[i].reset()[0], 0.0, False, False)
            else:
                obs, reward, terminated, truncated, _ = self.envs[i].step(int(action))
                result = (obs, reward, terminated, truncated)
            self.ended[i] = result[2] or result[3]
            self.ready[i] = result

    def recv(self):
        ids = [int(i) for i in self.rng.choice(sorted(self.ready), self.batch_size, replace=False)]
        obs, reward, terminated, truncated = zip(*(self.ready.pop(i) for i in ids), strict=True)
        return (np.stack(obs).astype(np.float32), np.asarray(reward, np.float32), np.asarray(terminated),
                np.asarray(truncated), {"env_id": np.asarray(ids, np.int32)})  # fmt: skip

    def close(self):
        pass


def reference_streams(num_envs, seed, horizon, steps):
    """Each env alone with action 1 throughout, as the adapter must show it: (obs, reward, type, discount)."""
    import gymnasium as gym

    streams = []
    for i in range(num_envs):
        env = gym.make("CartPole-v1", max_episode_steps=horizon)
        rows = [(env.reset(seed=seed + i)[0], 0.0, int(StepType.FIRST), 1.0)]
        while len(rows) < steps:
            obs, reward, terminated, truncated, _ = env.step(1)
            if terminated or truncated:
                rows.append((obs, float(reward), int(StepType.LAST), 0.0 if terminated else 1.0))
                rows.append((env.reset()[0], 0.0, int(StepType.FIRST), 1.0))
            else:
                rows.append((obs, float(reward), int(StepType.MID), 1.0))
        streams.append(rows)
    return streams


@pytest.mark.parametrize("order_seed", [0, 1, 2])
def test_every_env_slot_sees_its_own_stream_whatever_order_the_envs_come_back_in(order_seed):
    num_envs, horizon, calls = 6, 12, 240
    env = EnvPoolAsyncEnv("CartPole-v1", num_envs, 2, lambda seed: RandomOrderPool(
        num_envs, 2, seed, horizon, order_seed))  # fmt: skip
    mts = env.reset(seed=5)
    got_steps = [(mts.steps[AGENT], mts.active[AGENT])]
    for _ in range(calls):
        mts = env.step({AGENT: np.ones(num_envs, np.int64)})
        assert mts.stepped.sum() == 2
        got_steps.append((mts.steps[AGENT], mts.active[AGENT]))
    got = per_slot_streams(got_steps, num_envs)
    expected = reference_streams(num_envs, 5, horizon, max(len(rows) for rows in got))
    lengths = sorted(len(rows) for rows in got)
    assert lengths[0] != lengths[-1]  # the order was uneven: some slots stepped more often than others
    for slot in range(num_envs):
        assert len(got[slot]) >= 30, (slot, len(got[slot]))
        for k, (row, e_row) in enumerate(zip(got[slot], expected[slot], strict=False)):
            np.testing.assert_allclose(row[0], e_row[0], rtol=0, atol=1e-6)
            assert row[1:] == e_row[1:], (slot, k)


def test_a_ppo_run_on_a_pool_returning_envs_in_random_order_loses_and_doubles_no_step(tmp_path, monkeypatch):
    """The sampler's per-slot compaction under an uneven order: every episode's return is its length
    (CartPole pays 1 a step) and the iterations count exactly the env steps taken."""
    from rlgear.plugins.envs import envpool_env

    monkeypatch.setattr(envpool_env, "_build", lambda name, num_envs, seed, kwargs: RandomOrderPool(
        num_envs, kwargs["batch_size"], seed, kwargs.get("max_episode_steps")))  # fmt: skip
    result = rlgear.train(
        {
            "algorithm": "ppo", "seed": 0,
            "env": {"adapter": "envpool", "name": "CartPole-v1", "kwargs": {"batch_size": 2}},
            "workers": {"num_envs_per_worker": 4},
            "training": {"train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 2},
            "stop": {"training_iteration": 3},
            "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
        }
    )  # fmt: skip
    assert 0.9 * 3 * 256 <= result["timesteps_total"] <= 3 * 256
    assert result["episodes_total"] > 0
    assert result["episode_return_mean"] == pytest.approx(result["episode_len_mean"])


def test_a_ppo_run_counts_the_envs_that_stepped_and_reports_single_agent_results(tmp_path):
    result = rlgear.train(
        {
            "algorithm": "ppo", "seed": 0,
            "env": {"adapter": "envpool", "name": "CartPole-v1", "kwargs": {"batch_size": 2}},
            "workers": {"num_envs_per_worker": 4},
            "training": {"train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 2},
            "stop": {"training_iteration": 3},
            "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
        }
    )  # fmt: skip
    # the auto fragment is 256 / 2 envs a step: every iteration steps 256 env slots, not 512; the
    # reset rows after each episode's end are no env steps (as in sync mode), so a few less
    assert 0.9 * 3 * 256 <= result["timesteps_total"] <= 3 * 256
    assert not any(key.startswith("policy_reward_mean/") for key in result)
    assert result["episodes_total"] > 0
    # CartPole pays 1 a step, so an episode's return is its length: steps are neither lost nor doubled
    assert result["episode_return_mean"] == pytest.approx(result["episode_len_mean"])


def test_a_worker_samples_whole_episodes_whose_lengths_match_their_returns(tmp_path):
    from rlgear.discovery import registry

    cls = registry.load_algorithm("ppo")
    raw = {"algorithm": "ppo", "seed": 1,
           "env": {"adapter": "envpool", "name": "CartPole-v1", "kwargs": {"batch_size": 2}},
           "workers": {"num_envs_per_worker": 4, "batch_mode": "complete_episodes"},
           "training": {"train_batch_size": 128, "sgd_minibatch_size": 64, "num_sgd_iter": 1},
           "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"}}  # fmt: skip
    trainer = cls(resolve(raw, training_class=cls.config_class))
    try:
        worker = trainer.workers.local_worker
        batch, steps = worker.sample_with_count()
        episodes = worker.pop_metrics()["episodes"]
    finally:
        trainer.stop()
    assert steps >= 128 and episodes
    assert all(e["episode_return"] == e["length"] for e in episodes)
    # whole episodes: the batch is runs of rows, each from an episode's FIRST row on (its LAST row is
    # the bootstrap row, which ppo's postprocessing leaves out), as long as that episode's env steps
    step_types = batch["step_types"].reshape(-1)
    starts = np.flatnonzero(step_types == int(StepType.FIRST))
    assert starts[0] == 0
    lengths = np.diff(np.append(starts, len(step_types)))
    # each was reported with that length. An episode that ends on the call's last env step is reported
    # now and its rows come with the next batch: which slots those are depends on the pool's timing,
    # so at most one per env is missing here
    in_batch, reported = Counter(lengths.tolist()), Counter(e["length"] for e in episodes)
    assert not in_batch - reported
    assert 0 <= len(episodes) - len(starts) <= 4


@pytest.mark.slow
def test_ppo_on_an_async_pool_solves_cartpole_within_150k_env_steps():
    """configs/ppo-cartpole.yaml on an envpool pool of 8 envs acting on 4 at a time. Measured 29 Nov
    2026 (seeds 0, 1, 2): async mode passes 475 at 89,207, 78,940 and 96,867 env steps; the same file
    on the sync pool at 71,396, 81,471 and 84,149.

    One envpool thread (``num_threads: 1``) steps the envs in the order their actions were sent, so
    the batches that come back, and so the run, are the same on any machine. With several threads on
    a loaded machine the envs that finish first vary from run to run, so each run is a different
    draw: one CI run so drew 158 at 150k. That order is no bug: the random-order tests below, and 24
    PPO runs on a pool returning a random batch of the ready envs (seeds 0-23, 30 Nov), all passed
    475 within 71k-112k env steps."""
    from rlgear.discovery import registry
    from tests.conftest import train_until_stop

    result = train_until_stop(
        registry.load_algorithm("ppo"), "ppo-cartpole.yaml", "seed=0", "env.adapter=envpool",
        "env.vectorization=native", "env.kwargs={batch_size: 4, num_threads: 1}",
    )  # fmt: skip
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 150_000 + 2048
