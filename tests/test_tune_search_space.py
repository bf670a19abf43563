"""Search spaces: parsing, counts (grid x samples), bounds, seeding, and the tune section's errors."""

from __future__ import annotations

import math

import pytest

from rlgear.errors import ConfigError
from rlgear.tune import search_space
from rlgear.tune.config import TuneConfig, build_tune
from rlgear.tune.experiment import make_trials
from tests.conftest import small_config


def fail(path, message):
    return ConfigError(f"test.yaml: {path}: {message}")


SPACE = {
    "algorithm": "ppo",
    "training": {
        "lr": {"loguniform": [1e-5, 1e-2]},
        "gamma": {"uniform": [0.9, 0.999]},
        "num_sgd_iter": {"randint": [1, 4]},
        "gae_lambda": {"grid_search": [0.9, 0.95, 1.0]},
        "optimizer": {"choice": ["adam", "sgd"]},
    },
    "model": {"hidden_sizes": {"grid_search": [[32], [64, 64]]}},
    "tune": {"scheduler_options": {"hyperparam_mutations": {"training.lr": {"uniform": [0, 1]}}}},
}


def test_grid_times_samples_gives_the_trial_count():
    variants = list(search_space.expand(SPACE, 4, seed=0, fail=fail))
    assert len(variants) == 4 * 3 * 2 == search_space.count(SPACE, 4, fail)
    # every grid point appears num_samples times
    grid_points = [
        (v.config["training"]["gae_lambda"], tuple(v.config["model"]["hidden_sizes"])) for v in variants
    ]
    assert all(grid_points.count(p) == 4 for p in set(grid_points))
    assert len(set(grid_points)) == 6


def test_distributions_stay_within_their_bounds():
    for variant in search_space.expand(SPACE, 50, seed=1, fail=fail):
        training = variant.config["training"]
        assert 1e-5 <= training["lr"] < 1e-2
        assert 0.9 <= training["gamma"] < 0.999
        assert training["num_sgd_iter"] in (1, 2, 3)  # randint's upper bound is excluded
        assert isinstance(training["num_sgd_iter"], int)
        assert training["optimizer"] in ("adam", "sgd")


def test_loguniform_is_uniform_in_log_space():
    domain = search_space.Domain("loguniform", (1e-5, 1e-1))
    import numpy as np

    rng = np.random.default_rng(0)
    logs = [math.log10(domain.sample(rng)) for _ in range(4000)]
    below = sum(v < -3 for v in logs) / len(logs)  # half the log-range lies below 1e-3
    assert 0.45 < below < 0.55


def test_the_same_seed_gives_the_same_trials_and_another_seed_others():
    first = [v.values for v in search_space.expand(SPACE, 3, seed=7, fail=fail)]
    again = [v.values for v in search_space.expand(SPACE, 3, seed=7, fail=fail)]
    other = [v.values for v in search_space.expand(SPACE, 3, seed=8, fail=fail)]
    assert first == again
    assert first != other


def test_the_tune_section_is_never_expanded():
    variant = next(search_space.expand(SPACE, 1, seed=0, fail=fail))
    assert variant.config["tune"] == SPACE["tune"]
    assert not any(path.startswith("tune") for path in variant.values)


def test_values_record_every_searched_path():
    variant = next(search_space.expand(SPACE, 1, seed=0, fail=fail))
    assert set(variant.values) == {
        "training.lr", "training.gamma", "training.num_sgd_iter", "training.gae_lambda",
        "training.optimizer", "model.hidden_sizes",
    }  # fmt: skip
    for path, value in variant.values.items():
        assert search_space.get_path(variant.config, path) == value


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"uniform": [1, 0]}, "training.lr.uniform: expected low < high"),
        ({"loguniform": [0, 1]}, "loguniform needs 0 < low"),
        ({"uniform": [1]}, "expected [low, high]"),
        ({"grid_search": []}, "expected a non-empty list"),
        ({"randint": [0.5, 3]}, "randint needs integer bounds"),
        ({"choice": "abc"}, "expected a non-empty list"),
    ],
)
def test_a_malformed_search_space_names_its_key(spec, message):
    with pytest.raises(ConfigError) as info:
        list(search_space.expand({"training": {"lr": spec}}, 1, seed=0, fail=fail))
    assert "test.yaml: training.lr" in str(info.value)
    assert message in str(info.value)


def test_trials_get_distinct_recorded_seeds_when_the_config_has_none(tmp_path):
    base = small_config(tmp_path, training={"lr": {"grid_search": [1e-3, 1e-4]}})
    base["seed"] = None
    trials = make_trials(base, TuneConfig(num_samples=2), _Fail())
    seeds = [t.config["seed"] for t in trials]
    assert len(trials) == 4 and len(set(seeds)) == 4 and all(isinstance(s, int) for s in seeds)
    again = make_trials(base, TuneConfig(num_samples=2), _Fail())
    assert [t.config["seed"] for t in again] == seeds


def test_every_trial_config_is_validated_before_anything_runs(tmp_path):
    base = small_config(tmp_path, training={"lr": {"grid_search": [1e-3, -1.0]}})
    with pytest.raises(ConfigError, match=r"training.lr: expected a positive number"):
        make_trials(base, TuneConfig(), _Fail())


class _Fail:
    source = "test.yaml"

    def __call__(self, path, message):
        return fail(path, message)


@pytest.mark.parametrize(
    ("tune", "message"),
    [
        ({"num_samples": 0}, "tune.num_samples: expected 1 or more"),
        ({"mode": "maximum"}, "tune.mode: expected one of max, min"),
        ({"max_failure": 1}, "tune.max_failure: unknown key; did you mean 'max_failures'?"),
        ({"executor": "slurm"}, "tune.executor: expected one of local, ray"),
        ({"checkpoint_freq": 0}, "tune.checkpoint_freq: expected 1 or more"),
        (
            {"metric": "episode_retrun_mean"},
            "tune.metric: not a result key; did you mean 'episode_return_mean'?",
        ),
    ],
)
def test_tune_section_errors_name_the_key(tune, message):
    with pytest.raises(ConfigError) as info:
        build_tune(tune, fail)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "metric", ["custom_metrics/pole_angle_mean", "evaluation/episode_return_mean", "time_total_s"]
)
def test_any_result_key_path_is_a_valid_metric(metric):
    assert build_tune({"metric": metric}, fail).metric == metric
