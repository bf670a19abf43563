"""``training.clip_rewards``: the learner's rows hold clipped rewards, the reported returns the env's own."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rlgear.config import resolve
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import (
    ClippedRewardsPostprocess,
    clip_rewards,
    trainable_rows,
    with_clipped_rewards,
)
from tests.conftest import small_config


def test_true_takes_the_sign_and_a_number_clips_to_plus_minus_it():
    rewards = np.array([-7.0, -0.3, 0.0, 0.2, 5.0], np.float32)
    np.testing.assert_array_equal(clip_rewards(rewards, True), [-1, -1, 0, 1, 1])
    np.testing.assert_allclose(clip_rewards(rewards, 0.5), [-0.5, -0.3, 0.0, 0.2, 0.5])
    assert clip_rewards(rewards, True).dtype == np.float32


def test_unset_or_false_leaves_the_postprocess_function_alone(tmp_path):
    for value in (None, False):
        config = resolve(small_config(tmp_path, training={"clip_rewards": value}))
        assert with_clipped_rewards(trainable_rows, config) is trainable_rows


def test_the_wrapper_keeps_what_the_sampler_asks_of_the_function_and_pickles():
    def postprocess(fragment, policy, config):
        return fragment

    postprocess.makes_own_sequences = True
    wrapped = ClippedRewardsPostprocess(postprocess, True)
    assert wrapped.makes_own_sequences is True
    assert not hasattr(wrapped, "window_columns")
    clone = pickle.loads(pickle.dumps(ClippedRewardsPostprocess(trainable_rows, 2.0)))
    assert clone.clip == 2.0 and clone.postprocess is trainable_rows


@pytest.mark.parametrize("value", [0, -1.0])
def test_a_clip_that_is_not_positive_is_refused(tmp_path, value):
    with pytest.raises(ConfigError, match=r"training\.clip_rewards"):
        resolve(small_config(tmp_path, training={"clip_rewards": value}))


def test_ppo_learns_from_clipped_rewards_and_reports_the_env_returns(tmp_path):
    # CartPole pays 1 per step: clipped to 0.25, the rows hold 0.25 (0 at FIRST rows), while the
    # episode returns the run reports are the env's own (the step counts, far above 0.25 x length).
    config = resolve(
        small_config(
            tmp_path,
            training={
                "train_batch_size": 256,
                "sgd_minibatch_size": 64,
                "num_sgd_iter": 1,
                "clip_rewards": 0.25,
            },
        )
    )
    trainer = PPO(config)
    try:
        rows = trainer.workers.local_worker.sample()
        assert set(np.unique(rows[SampleBatch.REWARDS]).tolist()) <= {0.0, 0.25}
        assert (rows[SampleBatch.REWARDS] == 0.25).any()
        result = trainer.train()
        assert result["episodes_total"] > 0
        assert result["episode_return_mean"] >= 8  # CartPole episodes last 8+ steps, 1 point each
    finally:
        trainer.stop()
