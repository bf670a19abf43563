"""Learning tests: ``impala`` and ``a3c`` on CartPole-v1 with two remote workers on a real local Ray.

The tuned configs in ``configs/`` run as they are (``workers.num_workers: 2``,
one local Ray of 2 CPUs shared by the module), fixed seed, until the stop
criterion: ``episode_return_mean >= 400`` within 1M env steps (the issue's
target). Both get there far sooner (see the configs' comments); a run that
needs the whole budget fails here.
"""

from __future__ import annotations

import os
import time

import pytest

from rlgear.plugins.algorithms.a3c import A3C
from rlgear.plugins.algorithms.impala import IMPALA
from tests.conftest import needs_ray, train_until_stop

# Every test here trains on remote workers: each is skipped, with the reason, without Ray.
pytestmark = [needs_ray, pytest.mark.usefixtures("ray_session")]  # one local Ray for the module


@pytest.mark.slow
def test_impala_with_two_remote_workers_reaches_400_on_cartpole_within_1m_env_steps():
    result = train_until_stop(
        IMPALA, "impala-cartpole.yaml", "seed=0", "stop={episode_return_mean: 400, timesteps_total: 1000000}"
    )
    assert result["episode_return_mean"] >= 400, result
    assert result["timesteps_total"] <= 1_000_000 + 10_000
    assert result["learner/num_learner_updates"] > 0
    assert result["learner/policy_lag"] >= 1  # the samples really came from lagging remote workers


@pytest.mark.slow
def test_a3c_with_two_remote_workers_reaches_400_on_cartpole_within_1m_env_steps():
    result = train_until_stop(
        A3C, "a3c-cartpole.yaml", "seed=0", "stop={episode_return_mean: 400, timesteps_total: 1000000}"
    )
    assert result["episode_return_mean"] >= 400, result
    assert result["timesteps_total"] <= 1_000_000 + 10_000
    # every gradient applied came from a worker's own batch: one per 40 env steps
    assert result["learner/num_grad_updates"] >= result["timesteps_total"] // 40 - 10


@pytest.mark.slow
@pytest.mark.parametrize("trainer_cls", [IMPALA, A3C])
def test_async_training_survives_a_sigkilled_worker(tmp_path, trainer_cls):
    """The killed worker's in-flight requests are dropped, a fresh one takes its slot, learning goes on."""
    import signal

    import ray

    from tests.test_impala_a3c import run_config

    config = run_config(
        tmp_path,
        trainer_cls,
        workers={"num_workers": 2},
        training={"min_env_steps_per_iteration": 200},
    )
    trainer = trainer_cls(config)
    try:
        before = [trainer.train()]
        assert before[-1]["num_worker_restarts"] == 0
        victim = trainer.workers.remote_worker(1)
        os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)
        after = [trainer.train() for _ in range(2)]
        # The replacement starts in the background while worker 2 carries on.
        # A replacement imports torch before it answers: over 60 s on a loaded 2-core machine.
        deadline = time.monotonic() + 240
        while trainer.workers.healthy_remote_ids() != [1, 2] and time.monotonic() < deadline:
            after.append(trainer.train())
        assert after[-1]["num_worker_restarts"] == 1
        assert trainer.workers.remote_worker(1) is not victim
        assert trainer.workers.healthy_remote_ids() == [1, 2]
        assert all(r["timesteps_this_iter"] > 0 for r in after)
        updates = "learner/num_learner_updates" if trainer_cls is IMPALA else "learner/num_grad_updates"
        assert after[-1][updates] > before[-1][updates]
        assert after[-1]["timesteps_total"] > before[-1]["timesteps_total"]
    finally:
        trainer.stop()


@pytest.mark.slow
def test_a3c_with_continuous_actions_improves_on_pendulum():
    """Random play scores about -1200 to -1400 on Pendulum-v1; -700 needs a policy that swings up."""
    result = train_until_stop(
        A3C, "a3c-pendulum.yaml", "seed=0", "stop={episode_return_mean: -700, timesteps_total: 400000}"
    )
    assert result["episode_return_mean"] >= -700, result
    assert result["timesteps_total"] <= 400_000 + 10_000
