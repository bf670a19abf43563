"""Result keys named in a config: ``stop`` thresholds and ``tune.metric``.

The keys every result has (:data:`RESULT_KEYS`) are checked when the config is read
(:func:`check_result_key`, :func:`build_stop` for the ``stop`` section); key paths
(``learner/...``, ``custom_metrics/...``) exist only once results arrive, so
:class:`ResultKeyCheck` checks them against the first results of the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear.config.schema import is_search_space
from rlgear.errors import ConfigError, did_you_mean

#: Keys every result has; ``stop`` may also name ``learner/*``,
#: ``evaluation/*`` and ``custom_metrics/*`` keys.
RESULT_KEYS = (
    "training_iteration", "timesteps_total", "timesteps_this_iter", "time_this_iter_s",
    "time_total_s", "episodes_this_iter", "episodes_total", "episode_return_mean",
    "episode_return_min", "episode_return_max", "episode_len_mean", "env_steps_per_s",
)  # fmt: skip


def check_result_key(key: str, where: str, fail) -> None:
    """Refuse a name that no result can have (``stop`` keys, ``tune.metric``), with the closest key.

    A key path (``learner/...``, ``evaluation/...``, ``custom_metrics/...``)
    is accepted as it is: which of those exist depends on the algorithm and
    the hooks, and custom metrics appear only once episodes have ended.
    """
    if key not in RESULT_KEYS and "/" not in key:
        raise fail(
            where,
            f"not a result key{did_you_mean(key, RESULT_KEYS)} "
            f"(result keys: {', '.join(RESULT_KEYS)}, learner/*, evaluation/*, custom_metrics/*)",
        )


class ResultKeyCheck:
    """Checks key paths (``custom_metrics/...``, ``learner/...``) against the first results that have them.

    Why: which of those keys exist depends on the algorithm and the hooks, so
    they can't be checked when the config is read; a typo in a stop key would
    otherwise run to the other limit. A path is checked at the first result
    holding any key with its prefix (custom metrics appear once episodes end),
    and must then be one of that result's keys.

    A ``custom_metrics/`` path is also judged when no result has any custom
    metric: custom metrics come only from hooks (``episode.custom_metrics`` in
    ``on_episode_end``, or keys that ``on_train_result`` adds), so a run without
    one usually lacks the hook that records it (not passed, not installed, or
    entry-point hooks turned off). It is refused at the first result at which
    the run (each trial of an experiment, counted apart by the result's
    ``trial_id``) has reported ``CUSTOM_METRICS_GRACE_RESULTS`` (3) results since
    it started or resumed and at least one episode ended during them: by then
    ``on_train_result`` ran on every result and ``on_episode_end`` for at least
    one episode. A run whose episodes never end is not judged. A hook that
    records a metric for only some episodes should record it for every episode
    (0.0 when it does not apply): a stop key or ``tune.metric`` on it is judged
    as soon as any other custom metric is reported, and with none by this rule.
    """

    #: Results (of one run or trial) after which a ``custom_metrics/`` path is judged even when no
    #: result has any ``custom_metrics/`` key, provided an episode ended during them.
    CUSTOM_METRICS_GRACE_RESULTS = 3

    def __init__(self, keys: dict[str, str]):
        #: key path -> where it was given (``stop.custom_metrics/x``, ``tune.metric``)
        self.pending = {key: where for key, where in keys.items() if "/" in key and key not in RESULT_KEYS}
        #: per run or trial (``trial_id``, None for a single run): [results seen, episodes ended in them]
        self._seen: dict[Any, list[int]] = {}

    def check(self, result: Mapping[str, Any]) -> None:
        """Raise ConfigError for a pending key its prefix's keys show to be a typo, or that no hook reports."""
        seen = self._seen.setdefault(result.get("trial_id"), [0, 0])
        seen[0] += 1
        seen[1] += int(result.get("episodes_this_iter") or 0)
        hooks_had_their_chance = seen[0] >= self.CUSTOM_METRICS_GRACE_RESULTS and seen[1] > 0
        for key, where in list(self.pending.items()):
            prefix = key.rsplit("/", 1)[0] + "/"
            have = sorted(k for k in result if str(k).startswith(prefix))
            if not have:
                if prefix == "custom_metrics/" and hooks_had_their_chance:
                    del self.pending[key]
                    raise ConfigError(
                        f"{where}: the results have no key '{key}' (the custom_metrics/* keys of this run: "
                        f"none, after {seen[0]} results and {seen[1]} finished episodes). Custom metrics come "
                        "from hooks (episode.custom_metrics in on_episode_end, or keys on_train_result adds): "
                        "is the hook that records it passed (hooks=[...]) or installed (an rlgear.hooks entry "
                        "point; RLGEAR_DISABLE_PLUGIN_AUTOLOAD=1 turns those off)?"
                    )
                continue  # not reported yet (no episode ended, no evaluation yet)
            del self.pending[key]
            if key not in result:
                shown = ", ".join(have[:12]) + (" ..." if len(have) > 12 else "")
                raise ConfigError(
                    f"{where}: the results have no key '{key}'{did_you_mean(key, have)} "
                    f"(the {prefix}* keys of this run: {shown})"
                )


def build_stop(value: Any, fail) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail("stop", f"expected a mapping of result keys to thresholds, got {value!r}")
    out = {}
    for key, threshold in value.items():
        if is_search_space(threshold):
            raise fail(
                f"stop.{key}", "search spaces are expanded by 'rlgear tune'; 'rlgear train' needs a number"
            )
        check_result_key(str(key), f"stop.{key}", fail)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise fail(f"stop.{key}", f"expected a number (the threshold), got {threshold!r}")
        out[str(key)] = threshold
    return out
