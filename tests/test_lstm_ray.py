"""Recurrent policies on remote Ray workers: the state lives in each worker's evaluator."""

from __future__ import annotations

import numpy as np

from rlgear.discovery import registry
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import small_config

LSTM = {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 5, "hidden_sizes": [16]}


def _state(evaluator):
    return [s.copy() for s in evaluator._state]


def _sample(evaluator):
    return evaluator.sample()


def test_remote_workers_sample_sequences_and_keep_their_state_across_weight_syncs(tmp_path, ray_session):
    config = small_config(
        tmp_path,
        model=LSTM,
        workers={"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 16},
        training={"train_batch_size": 64, "sgd_minibatch_size": 20, "num_sgd_iter": 2},
    )
    trainer = registry.load_algorithm("ppo")(config)
    try:
        result = trainer.train()
        assert result["timesteps_total"] > 0 and np.isfinite(result["learner/total_loss"])
        workers = trainer.workers
        (worker_id,) = workers.remote_worker_ids
        before = dict(workers.foreach_worker_with_id(lambda _, w: _state(w)))[worker_id]
        assert np.abs(before[0]).max() > 0  # mid-episode state on the worker
        workers.sync_weights()
        after = dict(workers.foreach_worker_with_id(lambda _, w: _state(w)))[worker_id]
        for a, b in zip(before, after, strict=True):
            np.testing.assert_array_equal(a, b)
        batch = dict(workers.foreach_worker_with_id(lambda _, w: _sample(w)))[worker_id]
        mask = batch[SB.SEQ_MASK].reshape(-1, 5)
        assert 0 < mask.sum() <= 32 + 2 and (np.diff(mask, axis=1) <= 0).all()  # 16 steps x 2 envs
        firsts = batch[SB.STEP_TYPES] == 0
        assert firsts.any() and not batch[SB.state_in(0)][firsts].any()
    finally:
        trainer.stop()
