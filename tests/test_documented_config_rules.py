"""Rules of the README's config reference that no fast test held until issue 37.

Each was found by planting a violation of the rule in the code and running the fast suite:
nothing failed. Each test quotes the rule it holds. (Others of the same hunt sit beside the
code they test: ``policy_mapping``'s first match in test_multi_agent.py, ``checkpoint.keep:
null`` in test_checkpoint.py, ``env.wrappers_vector``'s order in test_env_wrappers.py,
``*_token`` secrets in test_secrets.py.)
"""

from __future__ import annotations

import pytest
import yaml

import rlgear
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.run import checkpoint as ckpt
from tests.conftest import small_config

pytest.importorskip("torch")


def only_run_dir(tmp_path):
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def test_a_null_seed_is_picked_and_recorded_in_the_runs_config(tmp_path):
    """README: "`seed: null` (the default) picks a seed and records it in the run's `config.yaml`"."""
    rlgear.train(
        small_config(tmp_path, seed=None, stop={"training_iteration": 1}, checkpoint={"at_end": False})
    )
    seed = yaml.safe_load((only_run_dir(tmp_path) / "config.yaml").read_text())["seed"]
    assert isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, seed


@pytest.mark.parametrize("at_end", [True, False])
def test_checkpoint_at_end_writes_one_checkpoint_when_the_run_stops(tmp_path, at_end):
    """README: "`checkpoint.at_end` | `true` | checkpoint when the run ends (stop criterion or Ctrl-C)"."""
    config = small_config(tmp_path, stop={"training_iteration": 2}, checkpoint={"every": 0, "at_end": at_end})
    rlgear.train(config)
    saved = [path.name for path in ckpt.list_checkpoints(only_run_dir(tmp_path))]
    assert saved == (["checkpoint_000002"] if at_end else [])


def test_evaluation_runs_every_n_iterations(tmp_path):
    """README: "With `training.evaluation_interval: N`, every N iterations also report
    `evaluation/episode_return_mean` etc."."""
    trainer = PPO(small_config(tmp_path, training={"evaluation_interval": 2, "evaluation_episodes": 1}))
    try:
        evaluated = ["evaluation/episode_return_mean" in trainer.train() for _ in range(4)]
    finally:
        trainer.stop()
    assert evaluated == [False, True, False, True]


def test_truncated_episodes_count_in_the_episode_statistics(tmp_path):
    """README: "Episode statistics are over the last `metrics_window` (100) finished episodes,
    truncated episodes included". With a 5-step horizon every CartPole episode is truncated (a
    random policy needs more than 5 steps to drop the pole)."""
    trainer = PPO(small_config(tmp_path, workers={"horizon": 5}))
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    assert result["episodes_this_iter"] > 0
    assert result["episode_len_mean"] == 5.0 and result["episode_return_mean"] == 5.0, result
