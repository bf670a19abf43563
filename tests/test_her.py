"""Hindsight experience replay (``training.her_strategy``): relabeling, config errors, runs, resume.

The relabeling tests build fragments whose achieved goals encode where they come from
(``[column, episode, step]``) and whose real desired goal is a marker no achieved goal has, so
every relabeled goal can be traced back to its step, episode and worker column.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.blocks.replay_buffers import NEXT_OBS, ReplayBuffer, n_step_transitions
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.dqn import DQN, DQNConfig
from rlgear.plugins.algorithms.sac import SAC, SACConfig
from rlgear.plugins.envs.goal_envs import BitFlippingEnv, PointReachEnv
from rlgear.plugins.families.replay import her
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Dict, Discrete
from rlgear.timestep import StepType

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
GAMMA = 0.9
MARKER = -7.0  # the real desired goal: no achieved goal equals it

# Sorted Dict layout: achieved_goal [0:3], desired_goal [3:6], observation [6:7].
GOAL_SPACE = Dict(
    {
        "observation": Box(np.full(1, -np.inf), np.full(1, np.inf)),
        "achieved_goal": Box(np.full(3, -np.inf), np.full(3, np.inf)),
        "desired_goal": Box(np.full(3, -np.inf), np.full(3, np.inf)),
    }
)
LAYOUT = her.goal_layout(GOAL_SPACE)


def reward_fn(achieved, desired, info):
    """0 where the goals match, else -1 (vectorized)."""
    assert len(info) == len(achieved)
    return np.where(np.all(achieved == desired, axis=-1), 0.0, -1.0)


def terminated_fn(achieved, desired, info):
    return np.all(achieved == desired, axis=-1)


def fragment_of(
    step_types: list[list[int]], terminated_at: set[tuple[int, int]] = frozenset()
) -> SampleBatch:
    """A ``[T+1, B]`` fragment; step ``t`` of column ``b`` in episode ``e`` achieves ``[b, e, t]``."""
    types = np.array(step_types, dtype=np.int32)
    rows, cols = types.shape
    obs = np.zeros((rows, cols, 7), np.float32)
    episode = np.cumsum(types == F, axis=0)
    for t in range(rows):
        for b in range(cols):
            obs[t, b, 0:3] = [b, episode[t, b], t]
            obs[t, b, 3:6] = MARKER
            obs[t, b, 6] = t
    discounts = np.ones((rows, cols), np.float32)
    for t, b in terminated_at:
        discounts[t, b] = 0.0
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.arange(rows * cols).reshape(rows, cols),
            SampleBatch.REWARDS: np.full((rows, cols), -1.0, np.float32),
            SampleBatch.DISCOUNTS: discounts,
            SampleBatch.STEP_TYPES: types,
            SampleBatch.EPS_ID: np.zeros((rows, cols), np.int64),
        }
    )


# Column 0: episodes 1 (rows 0-3) and 2 (rows 4-7); column 1: one episode (rows 0-7).
TWO_COLUMNS = [[F, F], [M, M], [M, M], [L, M], [F, M], [M, M], [M, M], [L, L]]


def relabel(fragment, strategy, k=4, seed=0, terminated=terminated_fn):
    return her.relabel_transitions(
        fragment,
        strategy=strategy,
        k=k,
        gamma=GAMMA,
        layout=LAYOUT,
        compute_reward=reward_fn,
        compute_terminated=terminated,
        rng=np.random.default_rng(seed),
    )


def split(rows, num_real, k):
    real = SampleBatch({key: value[:num_real] for key, value in rows.items()})
    copies = SampleBatch({key: value[num_real:] for key, value in rows.items()})
    assert len(copies) == num_real * k
    return real, copies


# ----------------------------------------------------------------------------- relabeling
def test_real_transitions_come_first_unchanged():
    fragment = fragment_of(TWO_COLUMNS)
    expected = n_step_transitions(fragment, 1, GAMMA)
    real, _ = split(relabel(fragment, "future"), len(expected), 4)
    for key in expected:
        np.testing.assert_array_equal(real[key], expected[key], err_msg=key)


@pytest.mark.parametrize("strategy", her.STRATEGIES)
def test_relabeled_goals_come_from_the_same_episode_and_column(strategy):
    fragment = fragment_of(TWO_COLUMNS)
    num_real = len(n_step_transitions(fragment, 1, GAMMA))
    real, copies = split(relabel(fragment, strategy, k=8), num_real, 8)
    source = np.repeat(np.arange(num_real), 8)
    goal_b, goal_episode, goal_t = copies[SampleBatch.OBS][:, 3:6].T
    own_b, own_episode, own_t = real[SampleBatch.OBS][source, 0:3].T
    np.testing.assert_array_equal(goal_b, own_b)  # never another worker column
    np.testing.assert_array_equal(goal_episode, own_episode)  # never another episode
    # next_obs carries the same goal; everything but the desired goal is the real row's
    np.testing.assert_array_equal(copies[NEXT_OBS][:, 3:6], copies[SampleBatch.OBS][:, 3:6])
    for key in (SampleBatch.OBS, NEXT_OBS):
        np.testing.assert_array_equal(
            np.delete(copies[key], [3, 4, 5], axis=1), np.delete(real[key][source], [3, 4, 5], axis=1)
        )
    np.testing.assert_array_equal(copies[SampleBatch.ACTIONS], real[SampleBatch.ACTIONS][source])
    # episode bounds of each real row: column 0 rows 0-3 and 4-7, column 1 rows 0-7
    first = np.where((own_b == 0) & (own_episode == 2), 4, 0)
    last = np.where((own_b == 0) & (own_episode == 1), 3, 7)
    if strategy == "future":
        assert ((goal_t > own_t) & (goal_t <= last)).all()  # later steps only
        assert len(set(goal_t[(own_b == 1) & (own_t == 0)])) >= 3  # drawn among them
    elif strategy == "final":
        np.testing.assert_array_equal(goal_t, last)
    else:
        assert ((goal_t > first) & (goal_t <= last)).all()
        assert (goal_t <= own_t).any()  # earlier steps too


def test_rewards_and_terminations_are_recomputed_under_the_new_goal():
    fragment = fragment_of(TWO_COLUMNS, terminated_at={(7, 1)})
    num_real = len(n_step_transitions(fragment, 1, GAMMA))
    _, copies = split(relabel(fragment, "future", k=6), num_real, 6)
    achieved_next, goal = copies[NEXT_OBS][:, 0:3], copies[NEXT_OBS][:, 3:6]
    reached = np.all(achieved_next == goal, axis=1)
    assert reached.any() and not reached.all()
    np.testing.assert_array_equal(copies[SampleBatch.REWARDS], np.where(reached, 0.0, -1.0))
    np.testing.assert_allclose(copies[SampleBatch.DISCOUNTS], np.where(reached, 0.0, GAMMA))
    # without compute_terminated a copy keeps its real transition's discount (the env's termination)
    real, copies = split(relabel(fragment, "future", k=6, terminated=None), num_real, 6)
    np.testing.assert_array_equal(copies[SampleBatch.DISCOUNTS], np.repeat(real[SampleBatch.DISCOUNTS], 6))
    assert (real[SampleBatch.DISCOUNTS] == 0).sum() == 1


@pytest.mark.parametrize("k", [1, 4])
def test_replayed_minibatches_hold_k_relabeled_rows_per_real_one(k):
    buffer = ReplayBuffer(100_000, seed=0)
    for seed in range(40):
        buffer.add(relabel(fragment_of(TWO_COLUMNS), "future", k=k, seed=seed))
    rows = buffer.sample(20_000)
    relabeled = rows[SampleBatch.OBS][:, 3] != MARKER
    assert abs(relabeled.mean() - k / (k + 1)) < 0.015


def test_future_goals_are_drawn_uniformly_over_the_later_steps():
    fragment = fragment_of([[F], [M], [M], [M], [M], [L]])  # steps 0..5
    rows = her.relabel_transitions(
        fragment,
        strategy="future",
        k=20_000,
        gamma=GAMMA,
        layout=LAYOUT,
        compute_reward=reward_fn,
        rng=np.random.default_rng(1),
    )
    goal_t = rows[SampleBatch.OBS][5:][:20_000, 5]  # copies of the transition at step 0
    counts = np.bincount(goal_t.astype(int), minlength=6)
    assert counts[0] == 0
    np.testing.assert_allclose(counts[1:] / 20_000, 0.2, atol=0.015)


def test_a_transition_whose_episode_leaves_the_fragment_is_refused():
    with pytest.raises(ValueError, match=r"whole episodes.*complete_episodes"):
        relabel(fragment_of([[F], [M], [M]]), "future")
    with pytest.raises(ValueError, match="whole episodes"):
        relabel(fragment_of([[M], [M], [L]]), "episode")


def test_goal_draws_are_reproducible_and_differ_between_episodes():
    config = config_mod.resolve(
        dqn_raw("rlgear/BitFlipping-v0", env_kwargs={"n_bits": 4}), training_class=DQNConfig
    )
    bits = np.array([[[0, 0, 0, 0]], [[1, 0, 0, 0]], [[1, 1, 0, 0]], [[1, 1, 1, 0]]], np.float32)
    obs = np.concatenate([bits, np.full_like(bits, 1.0), bits], axis=-1)  # ag, dg, observation
    fragment = SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.zeros((4, 1), np.int64),
            SampleBatch.REWARDS: np.full((4, 1), -1.0, np.float32),
            SampleBatch.DISCOUNTS: np.ones((4, 1), np.float32),
            SampleBatch.STEP_TYPES: np.array([[F], [M], [M], [L]], np.int32),
            SampleBatch.EPS_ID: np.zeros((4, 1), np.int64),
        }
    )
    first, again = her.hindsight_transitions(fragment, config), her.hindsight_transitions(fragment, config)
    np.testing.assert_array_equal(first[SampleBatch.OBS], again[SampleBatch.OBS])
    other = SampleBatch({**fragment, SampleBatch.EPS_ID: np.ones((4, 1), np.int64)})
    assert not np.array_equal(
        her.hindsight_transitions(other, config)[SampleBatch.OBS], first[SampleBatch.OBS]
    )


# ----------------------------------------------------------------------------- goal layout
def test_goal_layout_matches_the_preprocessors_flat_observation():
    space = Dict(
        {**GOAL_SPACE, "action_mask": Box(np.zeros(2), np.ones(2)), "aux": Box(np.zeros(2), np.ones(2))}
    )
    layout = her.goal_layout(space)
    obs = {
        "achieved_goal": np.array([[1.0, 2.0, 3.0]]),
        "desired_goal": np.array([[4.0, 5.0, 6.0]]),
        "observation": np.array([[7.0]]),
        "aux": np.array([[8.0, 9.0]]),
        "action_mask": np.array([[1, 1]]),
    }
    flat = ObservationPreprocessor(space, Discrete(2)).transform(obs)
    np.testing.assert_array_equal(flat[0, layout.achieved], [1, 2, 3])
    np.testing.assert_array_equal(flat[0, layout.desired], [4, 5, 6])
    assert layout.goal_shape == (3,)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            Box(np.zeros(3), np.ones(3)),
            "needs a Dict observation with keys observation, achieved_goal, desired_goal",
        ),
        (
            Dict(
                {"observation": Box(np.zeros(1), np.ones(1)), "achieved_goal": Box(np.zeros(1), np.ones(1))}
            ),
            "lacks the key 'desired_goal'",
        ),
        (
            Dict({**GOAL_SPACE, "desired_goal": Discrete(3)}),
            r"observation\['desired_goal'\] must be a Box or MultiBinary",
        ),
        (Dict({**GOAL_SPACE, "desired_goal": Box(np.zeros(2), np.ones(2))}), "they must match"),
    ],
)
def test_goal_layout_refuses_what_is_not_a_goal_env(space, message):
    with pytest.raises(ValueError, match=message):
        her.goal_layout(space)


# ----------------------------------------------------------------------------- config and runs
class DictEnvWithoutReward(gym.Env):
    """A goal-shaped Dict observation, but no compute_reward."""

    observation_space = BitFlippingEnv(3).observation_space
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def dqn_raw(env, env_kwargs=None, training=None, **sections):
    raw = {
        "algorithm": "dqn",
        "seed": 0,
        "env": {"name": env, "kwargs": env_kwargs or {}},
        "workers": {
            "num_envs_per_worker": 2,
            "rollout_fragment_length": 4,
            "batch_mode": "complete_episodes",
        },
        "model": {"hidden_sizes": [16]},
        "training": {
            "her_strategy": "future",
            "env_steps_per_training_step": 8,
            "learning_starts": 16,
            "train_batch_size": 8,
            "training_intensity": 2.0,
            "buffer_size": 2000,
            "target_network_update_freq": 16,
            "epsilon_timesteps": 100,
            **(training or {}),
        },
        "logging": {"tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"workers": {"batch_mode": "truncate_episodes"}},
            "workers.batch_mode: .*whole episodes: set it to complete_episodes",
        ),
        ({"training": {"n_step": 3}}, "training.n_step: .*one-step transitions"),
        ({"model": {"observation_filter": "mean_std"}}, "model.observation_filter: .*set it to none"),
        ({"training": {"her_k": 0}}, "training.her_k: expected a positive integer, got 0"),
        ({"training": {"her_strategy": "later"}}, "training.her_strategy"),
    ],
)
def test_config_errors_name_the_key(changes, message):
    raw = dqn_raw("rlgear/BitFlipping-v0")
    for section, values in changes.items():
        raw[section] = {**raw[section], **values}
    with pytest.raises(ConfigError, match=message):
        DQN.check_config(config_mod.resolve(raw, training_class=DQNConfig))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("CartPole-v1", "training.her_strategy: env CartPole-v1: needs a Dict observation with keys"),
        (
            "tests.test_her:DictEnvWithoutReward",
            "training.her_strategy: env tests.test_her:DictEnvWithoutReward has no compute_reward",
        ),
    ],
)
def test_an_env_that_is_no_goal_env_is_refused_when_the_run_starts(env, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        DQN(config_mod.resolve(dqn_raw(env), training_class=DQNConfig), logdir=tmp_path)


def stored_rows(trainer):
    buffer = trainer.replay_buffer
    return {key: buffer._storage[key][: len(buffer)] for key in buffer.columns}


def test_dqn_run_stores_k_relabeled_copies_with_the_envs_rewards(tmp_path):
    trainer = DQN(
        config_mod.resolve(dqn_raw("rlgear/BitFlipping-v0", {"n_bits": 4}), training_class=DQNConfig),
        logdir=tmp_path,
    )
    try:
        for _ in range(4):
            trainer.train()
        rows = stored_rows(trainer)
        assert (
            len(trainer.replay_buffer) == 5 * trainer.timesteps_total
        )  # 1 real + her_k=4 copies per env step
        achieved, goal = rows[NEXT_OBS][:, 0:4], rows[NEXT_OBS][:, 4:8]
        np.testing.assert_array_equal(rows[NEXT_OBS][:, 4:8], rows[SampleBatch.OBS][:, 4:8])
        reached = np.all(achieved == goal, axis=1)  # BitFlippingEnv.compute_reward / compute_terminated
        assert reached.mean() > 0.2  # random play reaches a 4-bit goal rarely: most of these are relabeled
        np.testing.assert_array_equal(rows[SampleBatch.REWARDS], np.where(reached, 0.0, -1.0))
        np.testing.assert_allclose(
            rows[SampleBatch.DISCOUNTS], np.where(reached, 0.0, trainer.config.training.gamma)
        )
    finally:
        trainer.stop()


def test_checkpoint_resume_of_a_her_run_restores_the_buffer_and_goes_on(tmp_path):
    raw = dqn_raw("rlgear/BitFlipping-v0", {"n_bits": 4})
    trainer = DQN(config_mod.resolve(raw, training_class=DQNConfig), logdir=tmp_path / "a")
    restored = DQN(config_mod.resolve(raw, training_class=DQNConfig), logdir=tmp_path / "b")
    try:
        for _ in range(3):
            trainer.train()
        path = trainer.save()
        restored.restore(path)
        ours, theirs = stored_rows(trainer), stored_rows(restored)
        for key in ours:
            np.testing.assert_array_equal(theirs[key], ours[key], err_msg=key)
        before = len(restored.replay_buffer)
        restored.train()
        # 1 real + 4 relabeled rows per transition (episodes begun before the restore are dropped)
        added = len(restored.replay_buffer) - before
        assert added > 0 and added % 5 == 0
    finally:
        trainer.stop()
        restored.stop()


def test_sac_runs_with_her_on_the_point_env(tmp_path):
    raw = dqn_raw(
        "rlgear/PointReach-v0",
        training={
            "her_strategy": "final",
            "her_k": 2,
            "learning_starts": 16,
            "train_batch_size": 16,
            "training_intensity": 16.0,
        },
    )
    raw["algorithm"] = "sac"
    for key in ("target_network_update_freq", "epsilon_timesteps"):
        del raw["training"][key]
    trainer = SAC(config_mod.resolve(raw, training_class=SACConfig), logdir=tmp_path)
    try:
        for _ in range(3):
            result = trainer.train()
        assert result["learner/num_grad_updates"] > 0
        rows = stored_rows(trainer)
        assert len(trainer.replay_buffer) == 3 * trainer.timesteps_total
        env = PointReachEnv()
        rewards = env.compute_reward(rows[NEXT_OBS][:, 0:2], rows[NEXT_OBS][:, 2:4], None)
        np.testing.assert_array_equal(rows[SampleBatch.REWARDS], rewards)
    finally:
        trainer.stop()
