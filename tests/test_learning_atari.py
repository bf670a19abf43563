"""Learning test: PPO on Atari Pong through ``env.preset: atari`` and the Nature CNN (``pip install 'rlgear[atari]'``).

Pong is not learned in a CPU test's budget (PPO needs about 1-2M env steps), so this test
claims no learning. What it holds the short run to, falsifiably:

- the run goes end to end through the preset (sticky actions, frame skip 4, 84x84x4 uint8
  stacks), the Nature CNN (chosen for the 84x84 stack by default) and the learner's reward
  clipping, with finite losses and no update skipped;
- episodes finish and the run reports Pong's own score: a mean in [-21, -17]. Random play
  scores -20.4 (30 episodes, seeds 0-29, std 0.66, min -21, max -19, 905 agent steps long
  on average; measured with the preset on the gymnasium adapter). A score outside that band
  would mean the returns were clipped, scaled or cut at lost points (-21 is the floor; a
  policy this fresh does not win 4+ points more than random).

Measured (seed 0, 2 envs, 256-step batches): 2 episodes at 2302 env steps, mean -20.0, about
2 s per 256 env steps once started on the loaded 2-core machine (75 s in all, start included).
"""

from __future__ import annotations

import math

import pytest

from rlgear.config.conv import NATURE_FILTERS, conv_layers
from rlgear.plugins.algorithms.ppo import PPO
from tests.conftest import CONFIGS

pytest.importorskip("ale_py", reason="needs ale-py: pip install 'rlgear[atari]'")
pytest.importorskip("cv2", reason="needs OpenCV: pip install 'rlgear[atari]'")

RANDOM_PLAY_RETURN = -20.4


@pytest.mark.slow
def test_ppo_runs_pong_end_to_end_through_the_atari_preset_and_the_nature_cnn():
    from rlgear import config as config_mod
    from rlgear.run.runner import should_stop

    config = config_mod.load(
        CONFIGS / "ppo-pong.yaml",
        [
            "logging.tensorboard=false",
            "logging.progress=none",
            "seed=0",
            "workers.num_envs_per_worker=2",
            "training.train_batch_size=256",
            "training.sgd_minibatch_size=64",
            "stop={timesteps_total: 3072}",
        ],
        training_class=PPO.config_class,
    )
    assert config.env.preset == "atari" and config.training.clip_rewards is True
    trainer = PPO(config)
    try:
        policy = trainer.workers.local_worker.policy
        spec = conv_layers(policy.observation_space, config.model)
        assert policy.observation_space.shape == (84, 84, 4)
        assert [[layer.out_channels, layer.kernel, layer.stride] for layer in spec.layers] == NATURE_FILTERS
        while True:
            result = trainer.train()
            assert math.isfinite(result["learner/total_loss"]), result
            assert result["learner/num_nonfinite_updates"] == 0, result
            if should_stop(result, config.stop):
                break
    finally:
        trainer.stop()
    assert result["episodes_total"] >= 2, result
    assert -21.0 <= result["episode_return_mean"] <= -17.0, result
    assert result["timesteps_total"] <= 3072 + 256
