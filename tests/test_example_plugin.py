"""The worked plugin example, ``examples/rlgear-example-plugin``, as a plugin author ships it.

The fast tests import ``rlgear_example`` from the example's source folder and
check the ``corridor`` env against the VectorEnv contract (``rlgear.env``) and
``simple_pg``'s postprocessing against the value truth table (docs/architecture.md,
"TimeStep semantics"). The
slow test installs the package into a throwaway virtualenv, as a user would,
and drives it through the ``rlgear`` CLI: the entry points must be found, and
a short run must learn.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlgear.config import resolve
from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType
from tests.venv_helpers import make_venv_with_package, rlgear_cli

EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "rlgear-example-plugin"
FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
LEFT, RIGHT = 0, 1


@pytest.fixture
def example(monkeypatch):
    """The ``rlgear_example`` package, imported from source (no install)."""
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR / "src"))
    import rlgear_example.corridor
    import rlgear_example.simple_pg

    return rlgear_example


def make_corridor(example, num_envs=1, horizon=None, **kwargs):
    return example.corridor.CorridorAdapter().make("corridor", num_envs, kwargs=kwargs, horizon=horizon)


def run(env, actions, seed=0):
    """reset(seed) then one step per entry of ``actions`` (each an action for every env)."""
    steps = [env.reset(seed=seed)]
    for action in actions:
        steps.append(env.step(np.full(env.num_envs, action, dtype=np.int64)))
    return steps


def column(steps, field, env=0):
    return [getattr(ts, field)[env].item() for ts in steps]


def cell(ts, env=0):
    return int(np.argmax(ts.observation[env]))


# --------------------------------------------------------------------------- corridor


def test_corridor_spaces_and_one_hot_observations(example):
    env = make_corridor(example, num_envs=3, length=7)
    assert env.observation_space == Box(np.zeros(7), np.ones(7), np.float32)
    assert env.action_space == Discrete(2)
    for ts in run(env, [RIGHT, LEFT, RIGHT] * 5):
        assert ts.observation.shape == (3, 7) and ts.observation.dtype == np.float32
        np.testing.assert_array_equal(ts.observation.sum(axis=1), 1.0)
        np.testing.assert_array_equal(ts.env_id, [0, 1, 2])
        assert ts.step_type.dtype == np.int32 and ts.reward.dtype == np.float32


def test_reset_is_first_with_zero_reward_and_zero_prev_action(example):
    env = make_corridor(example, num_envs=4, length=5)
    env.reset(seed=0)
    env.step(np.ones(4, dtype=np.int64))
    ts = env.reset(seed=1)  # also mid-episode: every env starts over
    np.testing.assert_array_equal(ts.step_type, FIRST)
    np.testing.assert_array_equal(ts.reward, 0.0)
    np.testing.assert_array_equal(ts.discount, 1.0)
    np.testing.assert_array_equal(ts.prev_action, 0)
    assert all(cell(ts, i) < 4 for i in range(4)), "an episode never starts on the goal"


def test_reaching_the_goal_terminates_then_the_next_step_is_first_and_ignores_its_action(example):
    env = make_corridor(example, length=2)  # the only start cell is 0, the goal is 1
    steps = run(env, [RIGHT] * 4)
    assert column(steps, "step_type") == [FIRST, LAST, FIRST, LAST, FIRST]
    assert column(steps, "discount") == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert column(steps, "reward") == pytest.approx([0.0, 0.99, 0.0, 0.99, 0.0])
    # RIGHT sent at a LAST step is ignored: the next step is a fresh start in cell 0
    # with prev_action 0, not a move (which would have stayed on the goal).
    assert column(steps, "prev_action") == [0, RIGHT, 0, RIGHT, 0]
    assert [cell(ts) for ts in steps] == [0, 1, 0, 1, 0]  # LAST shows the final observation


def test_max_steps_truncates_with_discount_one(example):
    env = make_corridor(example, length=5, max_steps=3)
    steps = run(env, [LEFT] * 5)  # walking into the wall never reaches the goal
    assert column(steps, "step_type") == [FIRST, MID, MID, LAST, FIRST, MID]
    assert column(steps, "discount") == [1.0] * 6
    assert column(steps, "reward") == pytest.approx([0.0, -0.01, -0.01, -0.01, 0.0, -0.01])
    assert column(steps, "prev_action") == [0, LEFT, LEFT, LEFT, 0, LEFT]


def test_run_horizon_truncates_before_the_envs_own_time_limit(example):
    env = make_corridor(example, length=5, max_steps=100, horizon=2)
    steps = run(env, [LEFT] * 4)
    assert column(steps, "step_type") == [FIRST, MID, LAST, FIRST, MID]
    assert column(steps, "discount") == [1.0] * 5


def test_env_i_is_seeded_with_seed_plus_i(example):
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(60, 3))
    batched = make_corridor(example, num_envs=3, length=8)
    singles = [make_corridor(example, length=8) for _ in range(3)]
    got = [batched.reset(seed=10)] + [batched.step(a) for a in actions]
    for i, env in enumerate(singles):
        want = [env.reset(seed=10 + i)] + [env.step(a[i : i + 1]) for a in actions]
        for ts_batched, ts_single in zip(got, want, strict=True):
            np.testing.assert_array_equal(ts_batched.observation[i], ts_single.observation[0])
            assert ts_batched.step_type[i] == ts_single.step_type[0]
    starts = {
        tuple(make_corridor(example, num_envs=3, length=8).reset(seed=s).observation.argmax(1))
        for s in range(10)
    }
    assert len(starts) > 1, "start cells must depend on the seed"


def test_adapter_errors_name_the_config_key(example):
    adapter = example.corridor.CorridorAdapter()
    with pytest.raises(ConfigError, match=r"env\.name: .*'corrdor'.*did you mean 'corridor'"):
        adapter.make("corrdor", 1, kwargs={})
    with pytest.raises(ConfigError, match=r"env\.kwargs\.lenght: .*did you mean 'length'"):
        adapter.make("corridor", 1, kwargs={"lenght": 5})
    with pytest.raises(ConfigError, match=r"env\.kwargs\.length: expected an integer >= 2, got 1"):
        adapter.make("corridor", 1, kwargs={"length": 1})


# --------------------------------------------------------------------------- simple_pg


def test_simple_pg_declares_its_plugin_contract(example):
    trainer = example.simple_pg.SimplePG
    assert trainer.name == "simple_pg"
    assert trainer.action_spaces == frozenset({"discrete"})
    assert trainer.policies == {"torch": "rlgear_example.simple_pg.torch_policy:SimplePGTorchPolicy"}
    config = resolve(
        {"algorithm": "simple_pg", "env": {"adapter": "corridor", "name": "corridor"}},
        training_class=example.simple_pg.SimplePGConfig,
    )
    assert config.training.vf_loss_coeff == 0.5
    with pytest.raises(ConfigError, match=r"training\.vf_loss_coeff: expected 0 or more"):
        resolve(
            {"algorithm": "simple_pg", "env": {"name": "corridor"}, "training": {"vf_loss_coeff": -1}},
            training_class=example.simple_pg.SimplePGConfig,
        )


def postprocess(example, gamma, **columns):
    config = resolve(
        {
            "algorithm": "simple_pg",
            "env": {"adapter": "corridor", "name": "corridor"},
            "training": {"gamma": gamma},
        },
        training_class=example.simple_pg.SimplePGConfig,
    )
    fragment = SampleBatch(
        {k: np.asarray(v, dtype=np.int32 if k == "step_types" else np.float32) for k, v in columns.items()}
    )
    return example.simple_pg.SimplePG.postprocess(fragment, None, config)


def test_postprocess_returns_stop_at_terminals_bootstrap_at_truncations_and_at_the_fragment_end(example):
    g = 0.9
    # Time-major [T+1=6, B=2]. Env 0: an episode terminated at t=2, the next one still
    # running at the end. Env 1: an episode truncated at t=2 (time limit).
    step_types = [[FIRST, FIRST], [MID, MID], [LAST, LAST], [FIRST, FIRST], [MID, MID], [MID, MID]]
    discounts = [[1, 1], [1, 1], [0, 1], [1, 1], [1, 1], [1, 1]]
    rewards = [[0, 0], [1, 1], [2, 2], [0, 0], [3, 3], [4, 4]]
    values = [[10, 10], [20, 20], [30, 30], [40, 40], [50, 50], [60, 60]]
    rows = postprocess(
        example,
        g,
        step_types=step_types,
        discounts=discounts,
        rewards=rewards,
        vf_preds=values,
        obs=np.zeros((6, 2)),
        actions=np.zeros((6, 2)),
    )

    def episode_returns(last_value):  # G[t] for t = 0, 1, then 3, 4 (the LAST row is dropped)
        g1 = 2 + g * last_value
        g4 = 4 + g * 60  # still running: bootstraps from the value of the fragment's last row
        return [1 + g * g1, g1, 3 + g * g4, g4]

    terminated, truncated = episode_returns(0.0), episode_returns(30.0)
    # Rows are flattened time-major: (t0 env0, t0 env1, t1 env0, t1 env1, ...).
    want = np.array([terminated, truncated]).T.ravel()
    np.testing.assert_allclose(rows[SampleBatch.VALUE_TARGETS], want, rtol=1e-6)
    vf = np.array([[10, 10], [20, 20], [40, 40], [50, 50]]).ravel()
    np.testing.assert_allclose(rows[SampleBatch.ADVANTAGES], want - vf, rtol=1e-6)
    np.testing.assert_array_equal(
        rows[SampleBatch.STEP_TYPES], [FIRST, FIRST, MID, MID, FIRST, FIRST, MID, MID]
    )


# --------------------------------------------------------------------------- installed, via the CLI


def make_venv_with_example(tmp_path: Path) -> Path:
    return make_venv_with_package(tmp_path, EXAMPLE_DIR)


TRAIN_CONFIG = """\
# simple_pg on a 6-cell corridor. A random walk from a random start needs ~22 steps
# (episode_return_mean ~0.78); walking straight right takes 3 on average (~0.97).
algorithm: simple_pg
seed: 0
env:
  adapter: corridor
  name: corridor
  kwargs: {length: 6}
workers:
  num_envs_per_worker: 4
training:
  train_batch_size: 256
  lr: 0.01
stop:
  timesteps_total: 4000
logging:
  tensorboard: false
"""


@pytest.mark.slow
def test_installed_example_is_listed_by_rlgear_plugins_and_learns_the_corridor(tmp_path):
    python = make_venv_with_example(tmp_path)
    listing = rlgear_cli(python, "plugins", cwd=tmp_path).stdout
    for name in ("simple_pg", "corridor", "rlgear-example-plugin"):
        assert name in listing, f"'{name}' missing from `rlgear plugins`:\n{listing}"
    assert "load error" not in listing, listing

    config = tmp_path / "simple_pg-corridor.yaml"
    config.write_text(TRAIN_CONFIG)
    runs = tmp_path / "runs"
    rlgear_cli(
        python,
        "train",
        str(config),
        "--set",
        f"logging.dir={runs}",
        "--set",
        "logging.name=corridor",
        "--progress",
        "none",
        cwd=tmp_path,
    )

    run_dir = runs / "corridor"
    lines = (run_dir / "progress.jsonl").read_text().splitlines()
    results = [json.loads(line) for line in lines if line.strip()]
    assert len(results) >= 3
    first, last = results[0], results[-1]
    assert last["timesteps_total"] >= 4000
    assert list(run_dir.glob("checkpoint_*")), "the run must end with a checkpoint"
    # Seed 0 gives 0.72 -> 0.97 and episode lengths 23 -> 3; a policy that did not
    # learn stays near the random walk's 0.78 and 22 (checked with lr 1e-7).
    assert last["episode_return_mean"] > first["episode_return_mean"]
    assert last["episode_return_mean"] >= 0.93, results
    assert last["episode_len_mean"] <= 5.0, results
