"""Fast tests of the ``pg`` and ``a2c`` algorithms: postprocessing, config checks, a continuous-action run.

Postprocessing is checked against small fragments computed by hand (the value truth
table of docs/architecture.md, "TimeStep semantics": a terminated episode adds
nothing after its LAST step, a truncated one bootstraps from its last value, LAST
rows and the bootstrap row are never trained on). The config checks are the out-of-range hyperparameters
(a ``ConfigError`` naming the key), PG without a baseline needing complete
episodes, and A2C's SB3 defaults; each trainer also runs one iteration on a
continuous-action env. The losses themselves (values, statistics and updates on
both backends) are checked against a numpy reference in
``test_actor_critic_loss_reference.py``; learning to a target return is in
``test_learning_pg_a2c.py``.

The trainers are built directly (not by name): the registry learns ``pg`` and
``a2c`` from the package's entry points.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.config import resolve
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.a2c import A2C, A2CConfig
from rlgear.plugins.algorithms.pg import PG, PGConfig
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box
from rlgear.timestep import StepType

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
CARTPOLE_OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))
PENDULUM_OBS = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
PENDULUM_ACT = Box(np.array([-2.0]), np.array([2.0]))


def run_config(tmp_path, trainer_cls, env="CartPole-v1", training=None, workers=None):
    raw = {
        "algorithm": trainer_cls.name,
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2, **(workers or {})},
        "training": {"train_batch_size": 64, **(training or {})},
        "model": {"hidden_sizes": [16, 16]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    return resolve(raw, training_class=trainer_cls.config_class)


def fragment(step_types, rewards, discounts, values):
    """A time-major ``[T+1, B]`` fragment (obs and actions are placeholders)."""
    step_types = np.asarray(step_types, dtype=np.int32)
    shape = step_types.shape
    return SB(
        {
            SB.OBS: np.zeros((*shape, 1), dtype=np.float32),
            SB.ACTIONS: np.zeros(shape, dtype=np.int64),
            SB.STEP_TYPES: step_types,
            SB.REWARDS: np.asarray(rewards, dtype=np.float32),
            SB.DISCOUNTS: np.asarray(discounts, dtype=np.float32),
            SB.VF_PREDS: np.asarray(values, dtype=np.float32),
        }
    )


def two_episode_ends():
    """Column 0: an episode terminates at t=2; column 1: it is truncated at t=2 (time limit).

    Both then start a new episode at t=3; t=4 is the bootstrap row.
    """
    return fragment(
        step_types=[[FIRST, FIRST], [MID, MID], [LAST, LAST], [FIRST, FIRST], [MID, MID]],
        rewards=[[0, 0], [1, 1], [2, 2], [0, 0], [4, 4]],
        discounts=[[1, 1], [1, 1], [0, 1], [1, 1], [1, 1]],
        values=[[10, 10], [20, 20], [30, 30], [40, 40], [50, 50]],
    )


# With gamma 0.5. Returns, column 0 (terminated): G3 = 4 + 0.5 * 50 = 29 (bootstrap row),
# G1 = 2 (no bootstrap past a true terminal), G0 = 1 + 0.5 * 2 = 2.
# Column 1 (truncated): G1 = 2 + 0.5 * V2 = 17, G0 = 1 + 0.5 * 17 = 9.5, G3 = 29.
# Trainable rows, time-major: (t0, c0), (t0, c1), (t1, c0), (t1, c1), (t3, c0), (t3, c1).
RETURNS = [2.0, 9.5, 2.0, 17.0, 29.0, 29.0]
VALUES = [10.0, 10.0, 20.0, 20.0, 40.0, 40.0]


# ----------------------------------------------------------------------------- pg postprocessing


def test_pg_postprocess_returns_bootstrap_only_at_truncation_and_fragment_end(tmp_path):
    config = run_config(tmp_path, PG, training={"gamma": 0.5})
    rows = PG.postprocess(two_episode_ends(), None, config)
    assert len(rows) == 6  # LAST rows and the bootstrap row dropped
    np.testing.assert_allclose(rows[SB.VALUE_TARGETS], RETURNS)
    np.testing.assert_allclose(rows[SB.ADVANTAGES], np.subtract(RETURNS, VALUES))
    np.testing.assert_array_equal(rows[SB.STEP_TYPES], [FIRST, FIRST, MID, MID, FIRST, FIRST])


def test_pg_without_baseline_uses_monte_carlo_returns_and_ignores_values(tmp_path):
    config = run_config(
        tmp_path,
        PG,
        training={"gamma": 0.5, "use_baseline": False},
        workers={"batch_mode": "complete_episodes"},
    )
    # A whole episode cut by a time limit (LAST, discount 1): no value to bootstrap from, so 0.
    episode = fragment(
        step_types=[[FIRST], [MID], [MID], [LAST]],
        rewards=[[0], [1], [2], [3]],
        discounts=[[1], [1], [1], [1]],
        values=[[100], [100], [100], [100]],
    )
    rows = PG.postprocess(episode, None, config)
    # G2 = 3, G1 = 2 + 0.5 * 3 = 3.5, G0 = 1 + 0.5 * 3.5 = 2.75; the advantages are the returns.
    np.testing.assert_allclose(rows[SB.VALUE_TARGETS], [2.75, 3.5, 3.0])
    np.testing.assert_allclose(rows[SB.ADVANTAGES], [2.75, 3.5, 3.0])


def test_pg_without_baseline_needs_complete_episodes(tmp_path):
    config = run_config(tmp_path, PG, training={"use_baseline": False})
    with pytest.raises(ConfigError, match=r"training\.use_baseline: .*batch_mode: complete_episodes"):
        PG(config)


# ----------------------------------------------------------------------------- a2c postprocessing


def test_a2c_postprocess_with_lambda_1_gives_bootstrapped_returns(tmp_path):
    config = run_config(tmp_path, A2C, training={"gamma": 0.5, "gae_lambda": 1.0})
    rows = A2C.postprocess(two_episode_ends(), None, config)
    np.testing.assert_allclose(rows[SB.VALUE_TARGETS], RETURNS)
    np.testing.assert_allclose(rows[SB.ADVANTAGES], np.subtract(RETURNS, VALUES))


def test_a2c_postprocess_with_lambda_0_gives_one_step_td_errors(tmp_path):
    config = run_config(tmp_path, A2C, training={"gamma": 0.5, "gae_lambda": 0.0})
    rows = A2C.postprocess(two_episode_ends(), None, config)
    # delta_t = r_{t+1} + 0.5 * d_{t+1} * V_{t+1} - V_t:
    # t0: 1 + 10 - 10 = 1 (both); t1: 2 + 0 - 20 = -18 (terminated), 2 + 15 - 20 = -3 (truncated);
    # t3: 4 + 25 - 40 = -11 (both).
    advantages = [1.0, 1.0, -18.0, -3.0, -11.0, -11.0]
    np.testing.assert_allclose(rows[SB.ADVANTAGES], advantages)
    np.testing.assert_allclose(rows[SB.VALUE_TARGETS], np.add(advantages, VALUES))


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    ("trainer_cls", "key", "value"),
    [
        (A2C, "gae_lambda", 1.5),
        (A2C, "vf_loss_coeff", -1.0),
        (A2C, "entropy_coeff", -0.01),
        (PG, "vf_loss_coeff", -1.0),
        (PG, "entropy_coeff", -0.01),
    ],
)
def test_out_of_range_hyperparameter_is_a_config_error_naming_the_key(tmp_path, trainer_cls, key, value):
    with pytest.raises(ConfigError, match=rf"training\.{key}"):
        run_config(tmp_path, trainer_cls, training={key: value})


def test_a2c_defaults_are_sb3s():
    config = A2CConfig()
    assert (config.optimizer, config.lr, config.train_batch_size) == ("rmsprop", 7e-4, 40)
    assert (config.gae_lambda, config.grad_clip, config.entropy_coeff) == (1.0, 0.5, 0.0)
    assert not config.normalize_advantages
    assert PGConfig().use_baseline


# The losses themselves (exact values, statistics and updates on both backends) are checked
# against a numpy reference in tests/test_actor_critic_loss_reference.py.


@pytest.mark.parametrize("trainer_cls", [A2C, PG])
def test_trainer_runs_an_iteration_with_continuous_actions(tmp_path, trainer_cls):
    trainer = trainer_cls(run_config(tmp_path, trainer_cls, env="Pendulum-v1"))
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    assert result["timesteps_total"] >= 64
    assert np.isfinite(result["learner/total_loss"])
