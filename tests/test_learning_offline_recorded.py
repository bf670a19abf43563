"""End to end on recorded data, no test double: PPO runs record CartPole-v1 to a Minari dataset
with ``offline.output``, Minari reads it back, and ``bc`` learns from it (``offline.input``)
through the public entry, reaching the recorded episodes' return greedily.

Budget (2 loaded CPU cores, seed 0 for PPO, 1 for BC): PPO 30k env steps (configs/ppo-cartpole.yaml,
~10-15 s), then a second run from its weights records 8k env steps (~3-5 s), then BC 3 x 200
gradient steps with 10 greedy evaluation episodes after each (~5 s). 16 s in all here; the
recorded episodes all returned 500 and BC reached 500 greedily from the first iteration.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from rlgear.discovery import registry

pytestmark = pytest.mark.slow
minari = pytest.importorskip("minari", reason="needs Minari: pip install 'rlgear[offline]'")

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
DATASET_ID = "rlgear-e2e/cartpole-ppo-v0"
TRAIN_STEPS, RECORD_STEPS = 30_000, 8_000


def _ppo_config(tmp_path: Path, **sections) -> dict:
    raw = yaml.safe_load((CONFIGS / "ppo-cartpole.yaml").read_text())
    raw.pop("stop")
    raw.pop("checkpoint")
    raw["seed"] = 0
    raw["logging"] = {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"}
    return {**raw, **sections}


def _train_until(trainer, timesteps: int) -> dict:
    while True:
        result = trainer.train()
        if result["timesteps_total"] >= timesteps:
            return result


def _record_trained_ppo(tmp_path: Path) -> None:
    """Two real runs: PPO learns for TRAIN_STEPS without recording, then a run with
    ``offline.output`` starts from its weights and records the episodes of RECORD_STEPS more
    (recording from the start would mostly hold the untrained policy's short episodes)."""
    learner = registry.load_algorithm("ppo")(_ppo_config(tmp_path))
    try:
        _train_until(learner, TRAIN_STEPS)
        snapshot = learner.save_to_object()
    finally:
        learner.stop()
    recorder = registry.load_algorithm("ppo")(_ppo_config(tmp_path, offline={"output": DATASET_ID}))
    try:
        recorder.restore_from_object(snapshot)
        _train_until(recorder, TRAIN_STEPS + RECORD_STEPS)
    finally:
        recorder.stop()  # completes the dataset


def test_bc_on_a_recorded_ppo_dataset_reaches_the_recorded_return(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    _record_trained_ppo(tmp_path)

    dataset = minari.load_dataset(DATASET_ID)  # Minari's own reader
    returns = np.array([episode.rewards.sum() for episode in dataset])
    assert dataset.total_episodes == len(returns) >= 10
    assert dataset.spec.env_spec is not None and dataset.spec.env_spec.id == "CartPole-v1"
    assert "action_logp" in dataset[0].infos
    data_mean = float(returns.mean())
    assert data_mean >= 200, returns  # good data: the trained PPO policy, sampled stochastically

    raw = {
        "algorithm": "bc",
        "seed": 1,
        "env": {"name": "CartPole-v1"},
        "offline": {"input": DATASET_ID},
        "training": {
            "num_gradient_steps_per_iteration": 200,
            "lr": 1e-3,
            "evaluation_episodes": 10,
            "ope_interval": 0,
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer = registry.load_algorithm("bc")(raw)
    try:
        assert trainer.data.total_steps == dataset.total_steps and trainer.data.has_action_logp
        results = [trainer.train() for _ in range(3)]
    finally:
        trainer.stop()
    greedy = [r["evaluation/episode_return_mean"] for r in results]
    assert results[-1]["learner/num_gradient_steps"] == 600
    # Greedy BC of the recorded (stochastic) policy: at least 90% of the data's mean return.
    assert max(greedy) >= 0.9 * data_mean, (greedy, data_mean)
