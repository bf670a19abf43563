"""Searchers: random/grid give the trials of before, optuna's TPE beats random, resume, ASHA, errors."""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlgear
from rlgear.discovery import registry
from rlgear.errors import ConfigError, PluginError
from rlgear.scheduler import TrialStatus
from rlgear.tune import experiment_state as es
from rlgear.tune.config import TuneConfig, build_tune
from rlgear.tune.experiment import _Fail, make_source, make_trials, run
from rlgear.tune.search_space import Domain
from tests.conftest import installed, small_config

needs_optuna = pytest.mark.skipif(
    not installed("optuna"), reason="needs Optuna: pip install 'rlgear[optuna]'"
)
FAIL = _Fail("test.yaml", {})


def progress(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "progress.jsonl").read_text().splitlines()]


# --- random and grid: the trials of before ------------------------------------------------------

#: What rlgear gave for this config with tune.seed 7 before searchers were plugins (search_space.expand
#: and make_trials of that release, run once): values, then the seed each trial drew (config seed: null).
BEFORE = [
    ({"training.gae_lambda": 0.9, "training.num_sgd_iter": 3, "training.lr": 0.004916334261664325,
      "training.optimizer": "sgd"}, 1868869222),
    ({"training.gae_lambda": 1.0, "training.num_sgd_iter": 2, "training.lr": 4.7382892627140336e-05,
      "training.optimizer": "sgd"}, 1653865098),
    ({"training.gae_lambda": 0.9, "training.num_sgd_iter": 1, "training.lr": 0.00417503707257038,
      "training.optimizer": "adam"}, 1880887030),
    ({"training.gae_lambda": 1.0, "training.num_sgd_iter": 3, "training.lr": 0.002908608407565185,
      "training.optimizer": "adam"}, 240361926),
]  # fmt: skip


def before_config(tmp_path):
    training = {
        "lr": {"loguniform": [1e-5, 1e-2]},
        "num_sgd_iter": {"randint": [1, 4]},
        "gae_lambda": {"grid_search": [0.9, 1.0]},
        "optimizer": {"choice": ["adam", "sgd"]},
    }
    return {**small_config(tmp_path, training=training), "seed": None}


@pytest.mark.parametrize("searcher", ["random", None])
def test_random_gives_exactly_the_trials_of_before(tmp_path, searcher):
    tune = TuneConfig(num_samples=2, seed=7, **({"searcher": searcher} if searcher else {}))
    trials = make_trials(before_config(tmp_path), tune, FAIL)
    assert [(list(t.values.items()), t.config["seed"]) for t in trials] == [
        (list(values.items()), seed) for values, seed in BEFORE
    ]  # the same values, drawn in the same order
    assert [t.trial_id for t in trials] == ["trial_000", "trial_001", "trial_002", "trial_003"]


def test_grid_gives_the_grid_of_before_and_refuses_a_distribution(tmp_path):
    config = small_config(tmp_path, training={"lr": {"grid_search": [1e-3, 3e-4, 1e-4]}})
    grid = make_trials(config, TuneConfig(num_samples=2, searcher="grid"), FAIL)
    random = make_trials(config, TuneConfig(num_samples=2), FAIL)
    assert [t.values for t in grid] == [t.values for t in random]
    assert [t.values["training.lr"] for t in grid] == [1e-3, 3e-4, 1e-4] * 2
    config["training"]["gamma"] = {"uniform": [0.9, 0.99]}
    with pytest.raises(ConfigError) as info:
        make_trials(config, TuneConfig(searcher="grid"), FAIL)
    assert "test.yaml: training.gamma.uniform: tune.searcher grid enumerates grid_search values only" in str(
        info.value
    )


def test_a_resumed_source_continues_the_same_sequence_and_seeds(tmp_path):
    config = before_config(tmp_path)
    tune = TuneConfig(num_samples=2, seed=7)
    first = make_source(config, tune, FAIL)
    made = [first.next_trial() for _ in range(2)]
    state = json.loads(json.dumps(first.get_state()))
    again = make_source(config, tune, FAIL)
    again.set_state(state)
    rest = [again.next_trial(), again.next_trial()]
    assert [(t.values, t.config["seed"]) for t in made + rest] == BEFORE
    assert [t.trial_id for t in rest] == ["trial_002", "trial_003"]
    assert again.next_trial() is None and again.done


def test_an_unknown_searcher_names_the_key_and_the_closest_one(tmp_path):
    with pytest.raises(PluginError) as info:
        make_source(small_config(tmp_path), TuneConfig(searcher="optuan"), FAIL)
    message = str(info.value)
    assert "test.yaml: tune.searcher: unknown searcher 'optuan'; did you mean 'optuna'?" in message
    assert "rlgear.searchers" in message


def test_an_unknown_searcher_option_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"tune.searcher_options.sed: unknown option of searcher 'random'"):
        make_source(small_config(tmp_path), TuneConfig(searcher_options={"sed": 1}), FAIL)


def test_searcher_keys_are_tune_keys():
    tune = build_tune({"searcher": "optuna", "searcher_options": {"sampler": "RandomSampler"}}, FAIL)
    assert tune.searcher == "optuna" and tune.searcher_options == {"sampler": "RandomSampler"}
    with pytest.raises(
        ConfigError, match=r"tune.searcher_option: unknown key; did you mean 'searcher_options'"
    ):
        build_tune({"searcher_option": {}}, FAIL)


def test_a_missing_optuna_names_the_extra_to_install(monkeypatch):
    err = ModuleNotFoundError("No module named 'optuna'", name="optuna")
    assert registry.missing_dependency_hint(err) == (
        "it needs optuna, which is not installed: pip install 'rlgear[optuna]'"
    )


def test_listing_searchers_imports_neither_a_searcher_nor_optuna():
    code = (
        "import sys, json\n"
        "from rlgear.discovery import registry\n"
        "print(json.dumps({'names': registry.names('searcher'), 'loaded': sorted(m for m in sys.modules "
        "if m.startswith('rlgear.plugins.searchers') or m == 'optuna')}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"grid", "optuna", "random"} <= set(data["names"])
    assert data["loaded"] == []


# --- optuna -----------------------------------------------------------------------------------------

SPACE = {
    "training.x": Domain("uniform", (-5.0, 5.0)),
    "training.y": Domain("uniform", (-5.0, 5.0)),
    "training.lr": Domain("loguniform", (1e-5, 1e-1)),
}


def toy(values: dict) -> float:
    """Maximum 0 at x=1.5, y=-2, lr=1e-3: no env stepping, the objective is the trial's metric."""
    return -(
        (values["training.x"] - 1.5) ** 2
        + (values["training.y"] + 2.0) ** 2
        + (math.log10(values["training.lr"]) + 3.0) ** 2
    )


def trials_to_reach(name: str, folder: Path, tolerance: float, cap: int, seed: int) -> int | None:
    """Trials the searcher needs, one at a time as the runner asks it, until the toy is within tolerance."""
    searcher = registry.load_searcher(name)(SPACE, metric="m", mode="max", num_samples=cap, seed=seed)
    searcher.attach(folder)
    for i in range(cap):
        values = searcher.suggest(f"trial_{i:03d}")
        value = toy(values)
        searcher.on_trial_complete(f"trial_{i:03d}", {"m": value})
        if value >= -tolerance:
            return i + 1
    return None


@needs_optuna
@pytest.mark.slow
def test_tpe_reaches_the_optimum_in_fewer_trials_than_random(tmp_path):
    # seed 1, within 1.0 of the optimum: TPE needs 13 trials, random 105 (optuna 5.0.0).
    tpe = trials_to_reach("optuna", tmp_path, tolerance=1.0, cap=60, seed=1)
    random = trials_to_reach("random", tmp_path, tolerance=1.0, cap=2000, seed=1)
    assert tpe is not None and tpe <= 20, tpe
    assert random is not None and random > 2 * tpe, (tpe, random)


@needs_optuna
def test_search_spaces_map_onto_optuna_distributions():
    import optuna

    from rlgear.plugins.searchers.optuna_search import distribution

    assert distribution(Domain("uniform", (0.0, 2.0))) == optuna.distributions.FloatDistribution(0.0, 2.0)
    assert distribution(Domain("loguniform", (1e-5, 1e-2))) == optuna.distributions.FloatDistribution(
        1e-5, 1e-2, log=True
    )
    # rlgear's randint excludes its upper bound, Optuna's IntDistribution includes it
    assert distribution(Domain("randint", (1, 4))) == optuna.distributions.IntDistribution(1, 3)
    assert distribution(Domain("choice", ("a", 2, None))) == optuna.distributions.CategoricalDistribution(
        ("a", 2, None)
    )


@needs_optuna
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"grid_search": [1, 2]},
            "training.lr.grid_search: tune.searcher optuna samples values, it does not",
        ),
        (
            {"choice": [[64], [64, 64]]},
            "training.lr.choice: Optuna chooses only among None, bool, int, float",
        ),
    ],
)
def test_a_space_optuna_cannot_express_is_a_config_error(tmp_path, spec, message):
    config = small_config(tmp_path, training={"lr": spec})
    with pytest.raises(ConfigError) as info:
        make_source(config, TuneConfig(searcher="optuna"), FAIL)
    assert f"test.yaml: {message}" in str(info.value)


@needs_optuna
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sampler": "TPESampel"}, "sampler: unknown Optuna sampler 'TPESampel'; did you mean 'TPESampler'?"),
        (
            {"sampler_kwargs": {"n_startup": 3}},
            "sampler_kwargs.n_startup: not a parameter of optuna.samplers.TPE",
        ),
        (
            {"sampler": "QMCSampler", "sampler_kwargs": {"qmc_type": "nope"}},
            "sampler_kwargs: optuna.samplers.QMCSampler refused them: The `qmc_type='nope'` is invalid",
        ),
        ({"max_concurrent": 0}, "max_concurrent: expected 1 or more, got 0"),
    ],
)
def test_optuna_option_errors_name_the_key(tmp_path, options, message):
    config = small_config(tmp_path, training={"lr": {"loguniform": [1e-4, 1e-2]}})
    with pytest.raises(ConfigError) as info:
        make_source(config, TuneConfig(searcher="optuna", searcher_options=options), FAIL)
    assert f"test.yaml: tune.searcher_options.{message}" in str(info.value)


def optuna_config(tmp_path, samples=3, iterations=2, **tune):
    config = small_config(tmp_path, training={"lr": {"loguniform": [1e-4, 1e-2]}})
    config["stop"] = {"training_iteration": iterations}
    config["tune"] = {"searcher": "optuna", "num_samples": samples, "checkpoint_freq": 1, **tune}
    return config


def study_of(experiment_dir: Path):
    import optuna

    from rlgear.plugins.searchers.optuna_search import STUDY_FILE

    return optuna.load_study(study_name="rlgear", storage=f"sqlite:///{experiment_dir / STUDY_FILE}")


@needs_optuna
@pytest.mark.slow
def test_optuna_asks_one_trial_at_a_time_and_hears_each_final_metric(tmp_path):
    result = run(optuna_config(tmp_path), progress="none")
    assert [t.trial_id for t in result.trials] == ["trial_000", "trial_001", "trial_002"]
    assert all(t.status == TrialStatus.TERMINATED for t in result.trials)
    rows = [progress(Path(t.logdir)) for t in result.trials]
    for earlier, later in itertools.pairwise(rows):  # max_concurrent 1: asked after the last ended
        assert earlier[-1]["timestamp"] <= later[0]["timestamp"]
    study = study_of(result.experiment_dir)
    by_id = {t.user_attrs["rlgear_trial_id"]: t for t in study.trials}
    for trial in result.trials:
        frozen = by_id[trial.trial_id]
        assert frozen.state.name == "COMPLETE"
        assert frozen.value == trial.last_result["episode_return_mean"]
        assert frozen.params["training.lr"] == trial.values["training.lr"] == trial.config["training"]["lr"]
    assert study.direction.name == "MAXIMIZE"


class InterruptAt:
    """Sends this process SIGINT (Ctrl-C) when trial ``trial_id``'s trainer reports ``iteration``."""

    def __init__(self, lr_of_trial, iteration):
        self.lr_of_trial, self.iteration, self.sent = lr_of_trial, iteration, False

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        lr = self.lr_of_trial()
        at = result["training_iteration"] == self.iteration
        if not self.sent and lr is not None and trainer.config.training.lr == lr and at:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


@needs_optuna
@pytest.mark.slow
def test_resume_continues_the_study_without_asking_finished_trials_again(tmp_path):
    config = optuna_config(tmp_path, samples=3, iterations=3, name="study")
    experiment = tmp_path / "runs" / "study"

    def second_trial_lr():
        try:
            state = json.loads((experiment / es.STATE_FILE).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        trials = state["trials"]
        return trials[1]["config"]["training"]["lr"] if len(trials) > 1 else None

    interrupted = run(config, hooks=[InterruptAt(second_trial_lr, 2)], progress="none")
    statuses = [t.status for t in interrupted.trials]
    assert statuses == [TrialStatus.TERMINATED, TrialStatus.RUNNING], statuses
    study = study_of(experiment)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]
    orphan = (
        study.ask()
    )  # as the searcher asks trial_002, then killed before the experiment state recorded it
    orphan.set_user_attr("rlgear_trial_id", "trial_002")
    assert orphan.number == 2

    resumed = run(config, resume=experiment, progress="none")
    assert [t.trial_id for t in resumed.trials] == ["trial_000", "trial_001", "trial_002"]
    assert all(t.status == TrialStatus.TERMINATED for t in resumed.trials)
    first, second, _ = (progress(Path(t.logdir)) for t in resumed.trials)
    assert [r["training_iteration"] for r in first] == [1, 2, 3]  # finished before: not run again
    assert [r["training_iteration"] for r in second] == [1, 2, 3]  # continued from its checkpoint
    study = study_of(experiment)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE"]
    assert [t.user_attrs["rlgear_trial_id"] for t in study.trials] == [
        "trial_000", "trial_001", "trial_002", "trial_002",
    ]  # fmt: skip
    assert study.trials[1].value == resumed.trials[1].last_result["episode_return_mean"]
    assert study.trials[3].params["training.lr"] == resumed.trials[2].config["training"]["lr"]


@needs_optuna
@pytest.mark.slow
def test_asha_stops_trials_and_optuna_hears_their_metric_at_the_stop(tmp_path):
    config = optuna_config(
        tmp_path,
        samples=4,
        iterations=4,
        scheduler="asha",
        scheduler_options={"grace_period": 1, "reduction_factor": 2, "max_t": 4},
        metric="learner/cur_lr",  # deterministic: a higher lr ranks higher at every rung
    )
    result = run(config, progress="none")
    assert all(t.status == TrialStatus.TERMINATED for t in result.trials)
    iterations = [t.last_result["training_iteration"] for t in result.trials]
    assert min(iterations) < 4 <= max(iterations), iterations  # some stopped early by ASHA, some ran out
    study = study_of(result.experiment_dir)
    by_id = {t.user_attrs["rlgear_trial_id"]: t for t in study.trials}
    for trial in result.trials:
        frozen = by_id[trial.trial_id]
        assert frozen.state.name == "COMPLETE"
        assert frozen.value == pytest.approx(trial.last_result["learner/cur_lr"])


# --- the docs' example and import isolation ----------------------------------------------------------


def docs_example_searcher() -> type:
    """The HaltonSearcher of docs/plugins/searchers.md, executed as written there."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "plugins" / "searchers.md").read_text()
    code = (
        text.split("## Example: a searcher in 30 lines", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    )
    namespace: dict = {}
    exec(compile(code, "docs/plugins/searchers.md", "exec"), namespace)
    return namespace["HaltonSearcher"]


def test_the_docs_example_searcher_suggests_inside_the_space_and_resumes():
    cls = docs_example_searcher()
    space = {"training.x": Domain("uniform", (0.0, 2.0)), "training.y": Domain("uniform", (-1.0, 1.0))}
    searcher = cls(space, metric="m", num_samples=4)
    first = [searcher.suggest(f"trial_{i:03d}") for i in range(2)]
    again = cls(space, metric="m", num_samples=4)
    again.set_state(json.loads(json.dumps(searcher.get_state())))
    rest = [again.suggest("trial_002"), again.suggest("trial_003"), again.suggest("trial_004")]
    points = first + rest[:2]
    assert rest[2] == cls.FINISHED
    assert len({tuple(p.values()) for p in points}) == 4
    assert all(0.0 <= p["training.x"] <= 2.0 and -1.0 <= p["training.y"] <= 1.0 for p in points)
    with pytest.raises(
        ConfigError, match=r"training.z.choice: the halton searcher takes uniform spaces only"
    ):
        cls.check_space({"training.z": Domain("choice", (1, 2))}, FAIL)


def test_a_random_experiment_never_imports_optuna(tmp_path):
    code = (
        "import sys, json\n"
        "from tests.conftest import small_config\n"
        "from tests.test_tune_searchers import FAIL\n"
        "from pathlib import Path\n"
        "from rlgear.tune.config import TuneConfig\n"
        "from rlgear.tune.experiment import make_trials\n"
        f"config = small_config(Path({str(tmp_path)!r}), training={{'lr': {{'loguniform': [1e-4, 1e-2]}}}})\n"
        "trials = make_trials(config, TuneConfig(num_samples=3), FAIL)\n"
        "print(json.dumps({'trials': len(trials), 'optuna': 'optuna' in sys.modules}))\n"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=root
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"trials": 3, "optuna": False}


@needs_optuna
@pytest.mark.slow
def test_sigkill_mid_study_then_resume_finishes_it_with_every_trial_told_once(tmp_path):
    import yaml

    config = optuna_config(tmp_path, samples=3, iterations=12, name="killed")
    config["tune"]["checkpoint_freq"] = 2
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    experiment = tmp_path / "runs" / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlgear", "tune", str(path), "--progress", "none"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # trial_000 done, trial_001 checkpointed mid-way
            time.sleep(0.1)
            try:
                state = json.loads((experiment / es.STATE_FILE).read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            trials = state["trials"]
            if len(trials) == 2 and trials[1]["checkpoint"] and trials[1]["status"] == "RUNNING":
                break
        assert proc.poll() is None, proc.stderr.read().decode()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed = es.read_state(experiment)
    assert [t["status"] for t in killed["trials"]] == ["TERMINATED", "RUNNING"]
    checkpointed = int(Path(killed["trials"][1]["checkpoint"]).name.split("_")[1])

    result = run(path, resume=experiment, progress="none")
    assert [t.trial_id for t in result.trials] == ["trial_000", "trial_001", "trial_002"]
    assert all(t.status == TrialStatus.TERMINATED for t in result.trials)
    for trial in result.trials:  # nothing redone twice in progress.jsonl, every trial to its stop
        assert [r["training_iteration"] for r in progress(Path(trial.logdir))] == list(range(1, 13))
    assert checkpointed < 12
    study = study_of(experiment)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted(t.user_attrs["rlgear_trial_id"] for t in complete) == [
        "trial_000",
        "trial_001",
        "trial_002",
    ]
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in study.trials)  # FAIL: asked, never recorded
    for trial, frozen in zip(result.trials, complete, strict=True):
        assert frozen.value == trial.last_result["episode_return_mean"]
