"""The TrialScheduler contract and the fifo plugin."""

from __future__ import annotations

from rlgear.discovery import registry
from rlgear.scheduler import Trial, TrialScheduler, TrialStatus


class Runner:
    def __init__(self, trials):
        self.trials = trials

    def get_trials(self):
        return self.trials


def test_fifo_is_registered_and_is_a_trial_scheduler():
    cls = registry.load_scheduler("fifo")
    assert issubclass(cls, TrialScheduler)


def test_fifo_runs_trials_in_the_order_they_were_added_and_never_stops_one():
    fifo = registry.load_scheduler("fifo")(metric="episode_return_mean", mode="max")
    trials = [Trial(config={"lr": lr}) for lr in (0.1, 0.01, 0.001)]
    runner = Runner(trials)
    for trial in trials:
        fifo.on_trial_add(runner, trial)
    assert fifo.choose_trial_to_run(runner) is trials[0]
    trials[0].status = TrialStatus.RUNNING
    assert fifo.choose_trial_to_run(runner) is trials[1]
    for value in (-1e9, 0.0, 1e9):
        assert (
            fifo.on_trial_result(runner, trials[0], {"episode_return_mean": value}) == TrialScheduler.CONTINUE
        )
    trials[1].status = trials[2].status = TrialStatus.TERMINATED
    trials[0].status = TrialStatus.PAUSED
    assert fifo.choose_trial_to_run(runner) is trials[0]
    trials[0].status = TrialStatus.TERMINATED
    assert fifo.choose_trial_to_run(runner) is None


def test_pending_trials_run_before_paused_ones():
    fifo = registry.load_scheduler("fifo")()
    paused, pending = Trial(config={}, status=TrialStatus.PAUSED), Trial(config={})
    assert fifo.choose_trial_to_run(Runner([paused, pending])) is pending


def test_trial_ids_are_unique():
    assert len({Trial(config={}).trial_id for _ in range(50)}) == 50
