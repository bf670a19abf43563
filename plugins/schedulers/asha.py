"""ASHA: asynchronous successive halving (Li et al. 2018, "A System for Massively Parallel
Hyperparameter Tuning", arXiv:1810.05934).

Rungs sit at ``grace_period * reduction_factor**k`` (in units of ``time_attr``)
below ``max_t``. When a trial reaches a rung its metric is recorded there; it
continues only if it is in the top ``1 / reduction_factor`` of the values the
rung has seen so far, else it is stopped. Trials reaching ``max_t`` stop.
With several ``brackets``, trials are spread over brackets whose first rung
is ``grace_period * reduction_factor**s`` (Hyperband-style hedging), as in
Ray Tune's AsyncHyperBandScheduler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config.schema import doc
from rlgear.errors import ConfigError
from rlgear.scheduler import Trial, TrialRunnerView, TrialScheduler
from rlgear.tune.display import metric_value


@dataclass
class ASHAOptions:
    """``tune.scheduler_options`` of the asha scheduler."""

    time_attr: str = doc("Result key that measures training progress (monotonic).", "training_iteration")
    grace_period: float = doc("Progress before a trial can first be stopped (the first rung).", 1)
    reduction_factor: float = doc("Keep the top 1/reduction_factor at every rung.", 4)
    max_t: float = doc("Progress at which every trial stops.", 100)
    brackets: int = doc("Number of brackets (1: plain ASHA).", 1)

    def check(self, fail: Any) -> None:
        if self.grace_period <= 0:
            raise fail(
                "tune.scheduler_options.grace_period", f"expected a positive number, got {self.grace_period}"
            )
        if self.reduction_factor <= 1:
            raise fail(
                "tune.scheduler_options.reduction_factor",
                f"expected a number above 1, got {self.reduction_factor}",
            )
        if self.max_t < self.grace_period:
            raise fail(
                "tune.scheduler_options.max_t",
                f"expected at least grace_period ({self.grace_period}), got {self.max_t}",
            )
        if self.brackets < 1:
            raise fail("tune.scheduler_options.brackets", f"expected 1 or more, got {self.brackets}")


class _Bracket:
    def __init__(self, min_t: float, max_t: float, reduction_factor: float, s: int):
        self.rf = reduction_factor
        count = int(math.log(max_t / min_t, reduction_factor) + 1e-9) if max_t > min_t else 0
        milestones = [min_t * reduction_factor ** (k + s) for k in range(count - s + 1)]
        self.rungs: list[tuple[float, dict[str, float]]] = [(m, {}) for m in milestones if m < max_t]

    def on_result(self, trial_id: str, progress: float, score: float) -> str:
        """Record ``score`` at every rung the trial just reached; STOP if below the rung's cutoff."""
        action = TrialScheduler.CONTINUE
        for milestone, recorded in reversed(self.rungs):  # the highest rung reached, as Ray does
            if progress < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            recorded[trial_id] = score
            if cutoff is not None and score < cutoff:
                action = TrialScheduler.STOP
            break
        return action

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))


class ASHAScheduler(TrialScheduler):
    description = "asynchronous successive halving: stop the worse trials early at rungs"
    options_class = ASHAOptions

    def __init__(
        self,
        metric: str | None = None,
        mode: str = "max",
        time_attr: str = "training_iteration",
        grace_period: float = 1,
        reduction_factor: float = 4,
        max_t: float = 100,
        brackets: int = 1,
    ):
        super().__init__(metric, mode)
        ASHAOptions(time_attr, grace_period, reduction_factor, max_t, brackets).check(_value_error)
        self.time_attr, self.max_t = time_attr, max_t
        self.options = (grace_period, max_t, reduction_factor)
        self.brackets = [_Bracket(grace_period, max_t, reduction_factor, s) for s in range(brackets)]
        self.trial_bracket: dict[str, int] = {}
        self.stopped_early: list[str] = []

    def on_trial_add(self, runner: TrialRunnerView, trial: Trial) -> None:
        # Hyperband's bracket sizes: bracket s gets a share proportional to rf^s / (s + 1), reversed.
        if trial.trial_id in self.trial_bracket:
            return
        rf = self.options[2]
        sizes = np.array([(len(self.brackets) / (s + 1)) * rf**s for s in range(len(self.brackets))])
        counts = np.bincount(list(self.trial_bracket.values()), minlength=len(self.brackets))
        self.trial_bracket[trial.trial_id] = int(np.argmin(counts / (sizes / sizes.sum())))

    def _score(self, result: dict[str, Any]) -> float | None:
        value = metric_value(result, self.metric) if self.metric else None
        if not isinstance(value, int | float):
            return None
        return float(value) if self.mode == "max" else -float(value)

    def on_trial_result(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> str:
        progress = result.get(self.time_attr)
        if progress is None:
            raise ConfigError(f"tune.scheduler_options.time_attr: results have no key '{self.time_attr}'")
        if progress >= self.max_t:
            return self.STOP
        score = self._score(result)
        if score is None:
            return self.CONTINUE  # no episode finished yet: nothing to rank by
        if trial.trial_id not in self.trial_bracket:
            self.on_trial_add(runner, trial)
        bracket = self.brackets[self.trial_bracket[trial.trial_id]]
        action = bracket.on_result(trial.trial_id, float(progress), score)
        if action == self.STOP:
            self.stopped_early.append(trial.trial_id)
        return action

    def get_state(self) -> dict[str, Any]:
        return {
            "trial_bracket": self.trial_bracket,
            "rungs": [[dict(recorded) for _, recorded in b.rungs] for b in self.brackets],
            "stopped_early": self.stopped_early,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.trial_bracket = {k: int(v) for k, v in state["trial_bracket"].items()}
        for bracket, rungs in zip(self.brackets, state["rungs"], strict=False):
            for (_, recorded), saved in zip(bracket.rungs, rungs, strict=False):
                recorded.clear()
                recorded.update(saved)
        self.stopped_early = list(state.get("stopped_early", []))


def _value_error(path: str, message: str) -> ValueError:
    raise ValueError(f"{path.rsplit('.', 1)[-1]}: {message}")
