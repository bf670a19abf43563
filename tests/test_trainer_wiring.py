"""The wiring between sampling, replay, the metrics window and the learner, checked through real trainers.

The losses are checked against numpy references elsewhere; these tests catch
a correct loss fed the wrong rows: importance weights dropped between the
replay buffer and the learner, a metrics window that keeps every episode, or
the fragment's bootstrap row (or a LAST row) reaching ``learn_on_batch``.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear.blocks.replay_buffers import BATCH_INDEXES, WEIGHTS
from rlgear.discovery import registry
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.metrics import MetricsWindow
from rlgear.timestep import StepType
from tests.conftest import small_config

SCRIPTED = "tests.test_gymnasium_timesteps:ScriptedEnv"


def spy_on_learner(trainer, method="learn_on_batch"):
    """Record a copy of every batch the trainer's policy learns from through ``method``.

    ``compute_gradients`` for A3C: its workers compute the gradients and the
    learner only applies them, so the batch is seen where the gradient is taken
    (with ``num_workers: 0`` that is the driver's own policy, ``trainer.policy``).
    """
    seen: list[dict] = []
    learn = getattr(trainer.policy, method)

    def recording(batch):
        seen.append({"batch": SB({k: np.array(v) for k, v in batch.items()})})
        return learn(batch)

    setattr(trainer.policy, method, recording)
    return seen


def make_trainer(tmp_path, algorithm, training, **sections):
    """A small run of ``algorithm``; ``training`` replaces small_config's PPO settings whole."""
    raw = small_config(tmp_path, algorithm=algorithm, **sections)
    raw["training"] = training
    return registry.load_algorithm(algorithm)(raw)


# ----------------------------------------------------------------------------- prioritized replay


def test_dqn_learns_from_the_importance_weights_the_buffer_computed_and_feeds_back_td_errors(tmp_path):
    trainer = make_trainer(
        tmp_path,
        "dqn",
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        model={"hidden_sizes": [16]},
        training={
            "env_steps_per_training_step": 8, "learning_starts": 16, "train_batch_size": 8,
            "training_intensity": 2.0, "buffer_size": 200, "prioritized_replay": True,
            "prioritized_replay_alpha": 0.7, "prioritized_replay_beta": 0.4,
            "final_prioritized_replay_beta": 1.0, "prioritized_replay_beta_annealing_timesteps": 64,
        },
    )  # fmt: skip
    buffer = trainer.replay_buffer
    calls = []
    learn = trainer.policy.learn_on_batch

    def recording(batch):
        # Before the learner's priority update: the priorities the batch was sampled with.
        calls.append((SB({k: np.array(v) for k, v in batch.items()}), buffer.priorities()))
        return learn(batch)

    trainer.policy.learn_on_batch = recording
    try:
        results = [trainer.train() for _ in range(6)]
    finally:
        trainer.stop()
    assert len(calls) > 4
    beta = results[-1]["learner/prioritized_replay_beta"]
    batch, priorities = calls[-1]
    assert WEIGHTS in batch, "the minibatch reached the learner without its importance weights"
    indexes = batch[BATCH_INDEXES]
    # Schaul et al. 2016: w_i = (N P(i))^-beta / max_k (N P(k))^-beta, P(i) = p_i^alpha / sum p^alpha.
    probabilities = priorities**0.7 / np.sum(priorities**0.7)
    raw = (len(priorities) * probabilities) ** -beta
    expected = raw[indexes] / raw.max()
    np.testing.assert_allclose(batch[WEIGHTS], expected, rtol=1e-5)
    assert np.ptp(batch[WEIGHTS]) > 0.01  # not all equal: dropping them would change the loss
    # The learner's |TD errors| went back as the new priorities of the rows it learned from.
    last = {int(i): p for i, p in zip(indexes, trainer.policy.td_errors, strict=True)}
    for index, td_error in last.items():
        assert buffer.priorities()[index] == pytest.approx(td_error + buffer.eps, rel=1e-5)


# ----------------------------------------------------------------------------- the metrics window


def test_metrics_window_statistics_are_over_the_last_n_episodes_only():
    window = MetricsWindow(size=3)
    window.add({"episode_return": float(r), "length": int(r) + 1} for r in (10, 20, 1, 2, 6))
    stats = window.stats()
    assert stats["episode_return_mean"] == pytest.approx(3.0)
    assert (stats["episode_return_min"], stats["episode_return_max"]) == (1.0, 6.0)
    assert stats["episode_len_mean"] == pytest.approx(4.0)


def test_trainer_results_are_over_the_last_metrics_window_episodes(tmp_path):
    class EpisodeLog:
        def __init__(self):
            self.returns = []

        @rlgear.hookimpl
        def on_episode_end(self, worker, episode):
            self.returns.append(episode.episode_return)

    log = EpisodeLog()
    trainer = registry.load_algorithm("ppo")(
        small_config(
            tmp_path,
            env={
                "name": SCRIPTED,
                "kwargs": {"lengths": [9, 2, 5, 1], "terminated": [True, False, True, True]},
            },
            training={
                "train_batch_size": 32,
                "sgd_minibatch_size": 32,
                "num_sgd_iter": 1,
                "metrics_window": 4,
            },
        ),
        hooks=[log],
    )
    try:
        result = {}
        for _ in range(3):
            result = trainer.train()
    finally:
        trainer.stop()
    assert len(log.returns) > 8
    last = log.returns[-4:]
    assert result["episode_return_mean"] == pytest.approx(np.mean(last))
    assert (result["episode_return_min"], result["episode_return_max"]) == (min(last), max(last))
    assert np.mean(last) != pytest.approx(np.mean(log.returns))  # the window matters for this data


# ----------------------------------------------------------------------------- rows that reach the learner


@pytest.mark.parametrize("algorithm", ["ppo", "pg", "a2c", "a3c"])
def test_the_learner_sees_each_transition_once_and_never_a_last_or_bootstrap_row(tmp_path, algorithm):
    """Scripted episodes of 3 (terminated) and 2 (truncated) steps, fragments of 4 steps.

    Every fragment ends on a bootstrap row, the next fragment's first row: it
    may be learned only there, once. LAST rows are never learned. So the rows
    learned are exactly the transitions sampled: one per env step. A3C (with
    ``num_workers: 0``, in-process) is watched at ``compute_gradients``, where
    its worker turns the batch into the gradient the learner applies.
    """
    training = {"train_batch_size": 8}
    if algorithm == "ppo":
        training.update(sgd_minibatch_size=8, num_sgd_iter=1)
    trainer = make_trainer(
        tmp_path,
        algorithm,
        training,
        env={"name": SCRIPTED, "kwargs": {"lengths": [3, 2], "terminated": [True, False]}},
        workers={"num_workers": 0, "num_envs_per_worker": 2, "rollout_fragment_length": 4},
    )
    seen = spy_on_learner(trainer, "compute_gradients" if algorithm == "a3c" else "learn_on_batch")
    try:
        for _ in range(3):
            trainer.train()
        steps = trainer.timesteps_total
        if algorithm == "a3c":  # every gradient computed was applied: the rows seen are the rows learned
            assert trainer.policy.num_grad_updates == len(seen)
    finally:
        trainer.stop()
    assert seen, "the spy saw no batch: the learner was not reached through the watched method"
    rows = [
        (int(e), int(t))
        for call in seen
        for e, t in zip(call["batch"]["eps_id"], call["batch"]["t"], strict=True)
    ]
    step_types = np.concatenate([call["batch"][SB.STEP_TYPES] for call in seen])
    assert (step_types != StepType.LAST).all()
    assert len(rows) == len(set(rows)), "a row was learned twice (a bootstrap row reached the learner)"
    assert len(rows) == steps  # one learned row per sampled env step, no more, no fewer
    # obs = [episode index, step]: an episode of length L contributes its steps 0..L-1 only.
    observations = np.concatenate([call["batch"][SB.OBS] for call in seen])
    assert set(observations[:, 1].astype(int)) <= {0, 1, 2}
