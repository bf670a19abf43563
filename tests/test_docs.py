"""The documentation site: it builds strictly, its config reference is complete, its examples work.

* ``mkdocs build --strict`` (mkdocs.yml at the root): a broken link, a missing
  page, an API object that no longer exists or a snippet file that moved fails.
* ``rlgear.config.reference.reference_markdown``: every config key with its help text.
* The plugin examples the pages include (``docs/examples/*.py``) are installed the
  way a plugin is, through entry points (a ``*.dist-info`` folder on the path of a
  subprocess), and exercised: the env against the TimeStep contract, the CEM
  algorithm trained and restored without a framework, the numpy backend (core's
  ``NoFrameworkBackend`` plus Python's random) serving a run, PPO on the gridworld with
  the goal hook loaded from its entry point, the median stopping rule in an experiment.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"

ENTRY_POINTS = """\
[rlgear.algorithms]
cem = my_cem:CEM

[rlgear.envs]
gridworld = my_gridworld:GridworldAdapter

[rlgear.backends]
numpy = my_numpy_backend:NumpyBackend

[rlgear.schedulers]
median_stopping = my_median_stopping:MedianStoppingRule

[rlgear.hooks]
goal_rate = my_goal_hook

[rlgear.loggers]
best = my_best_logger:BestResultLogger
"""


# --- the site -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> tuple[Path, str]:
    """``mkdocs build --strict`` once for this module: the site folder and the build's output."""
    tmp_path = tmp_path_factory.mktemp("docs")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return site, output


def page_text(site: Path, page: str) -> str:
    """A built page's text as a reader sees it: tags (syntax highlighting's spans) removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page).read_text()))


@pytest.mark.slow
def test_mkdocs_build_strict_succeeds(built_site):
    site, output = built_site
    assert "WARNING" not in output, output
    for page in ("index.html", "architecture/index.html", "plugins/algorithms/index.html",
                 "reference/config/ppo/index.html", "reference/trainer/index.html"):  # fmt: skip
        assert (site / page).is_file(), page
    ppo = (site / "reference/config/ppo/index.html").read_text()
    assert "training.clip_param" in ppo and "Clip range of the probability ratio" in ppo


# The example files each plugin page includes with a pymdownx.snippets line (`--8<-- "path"`).
PLUGIN_PAGE_EXAMPLES = {
    "plugins/algorithms.md": [
        "examples/rlgear-example-plugin/src/rlgear_example/simple_pg/config.py",
        "examples/rlgear-example-plugin/src/rlgear_example/simple_pg/simple_pg.py",
        "examples/rlgear-example-plugin/src/rlgear_example/simple_pg/torch_policy.py",
        "docs/examples/my_cem.py",
    ],
    "plugins/envs.md": ["docs/examples/my_gridworld.py"],
    "plugins/backends.md": ["docs/examples/my_numpy_backend.py"],
    "plugins/schedulers.md": ["docs/examples/my_median_stopping.py"],
    "plugins/loggers.md": ["docs/examples/my_best_logger.py"],
    "plugins/hooks.md": ["docs/examples/my_goal_hook.py"],
    "spaces.md": ["docs/examples/my_parking_env.py"],
    "multi-agent.md": ["docs/examples/my_self_play.py", "examples/mixed_ppo_dqn.py"],
}
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')


def test_snippet_lines_of_the_pages_are_intact():
    """Every line that starts a snippet include is exactly ``--8<-- "path"`` (``ruff format`` once broke them).

    pyproject.toml keeps ``ruff format`` away from docs/**/*.md, whose Python code blocks it
    would format, turning ``--8<-- "x"`` into ``--8 < --"x"``: text on the site, not the example.
    """
    found: dict[str, list[str]] = {}
    for path in sorted(DOCS.rglob("*.md")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("--8"):
                match = SNIPPET.match(line)
                assert match, f"{path.relative_to(ROOT)}:{number}: not a snippet line: {line!r}"
                assert (ROOT / match[1]).is_file(), (
                    f"{path.relative_to(ROOT)}:{number}: {match[1]} is missing"
                )
                found.setdefault(str(path.relative_to(DOCS)), []).append(match[1])
    assert found == PLUGIN_PAGE_EXAMPLES


def distinctive_lines(source: str) -> list[str]:
    """The ``class ...:`` and ``def ...:`` lines (first line of each) of a module's top-level definitions."""
    lines = source.splitlines()
    return [
        lines[node.lineno - 1].strip()
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef | ast.FunctionDef)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PLUGIN_PAGE_EXAMPLES))
def test_plugin_pages_show_the_code_of_the_examples_they_include(built_site, page):
    site, _ = built_site
    text = page_text(site, page.removesuffix(".md") + "/index.html")
    assert "--8" not in text, f"{page}: a snippet line is shown as text instead of the example"
    for example in PLUGIN_PAGE_EXAMPLES[page]:
        expected = distinctive_lines((ROOT / example).read_text())
        assert expected, f"{example} defines no class or function"
        missing = [line for line in expected if line not in text]
        assert not missing, f"{page} lacks these lines of {example}: {missing}"


@pytest.mark.slow
def test_the_hooks_api_reference_shows_the_types_of_the_arguments(built_site):
    site, _ = built_site
    text = re.sub(r"\s+", " ", page_text(site, "plugins/hooks/index.html"))
    for signature in (
        "on_trainer_init(trainer: Trainer) -> None",
        "on_episode_end( worker: RolloutWorker, episode: Episode ) -> None",  # wrapped: over 60 columns
        "on_sample_end( worker: RolloutWorker, batch: SampleBatch ) -> None",
        "on_checkpoint( trainer: Trainer, checkpoint_dir: str ) -> None",
    ):
        assert signature in text, signature
    assert "worker: Any" not in text and "trainer: Any" not in text


class _Loader(yaml.SafeLoader):
    """mkdocs.yml with its ``!relative`` and ``!ENV`` tags read as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _nav_files(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out.extend(_nav_files(value) if isinstance(value, list) else [value])
    return out


def test_nav_has_every_page_and_a_config_page_per_builtin_algorithm():
    from rlgear.discovery import registry

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    nav = _nav_files(config["nav"])
    builtin = sorted({p.name for p in registry.available("algorithm") if p.package == "rlgear"})
    assert builtin, "no built-in algorithm installed"
    for name in builtin:  # the pages themselves are generated by docs/hooks/rlgear_docs.py
        assert f"reference/config/{name}.md" in nav, f"mkdocs.yml's nav lacks reference/config/{name}.md"
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert written <= set(nav), f"pages missing from mkdocs.yml's nav: {sorted(written - set(nav))}"


def test_docs_and_readme_point_at_nothing_a_clone_lacks():
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text()
        for needle in ("DESIGN.md", "../shared", "shared/DEPENDENCY-NOTES"):
            assert needle not in text, f"{path.relative_to(ROOT)} mentions {needle}"


def test_code_and_tests_cite_the_docs_not_a_design_file_a_clone_lacks():
    """Docstrings and comments cite the page that holds a rule (docs/architecture.md ...), not DESIGN.md."""
    sources = [
        path
        for folder in ("core", "plugins", "tests", "docs", "examples", "bench")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".md", ".tmpl") and path != Path(__file__).resolve()
    ]
    assert len(sources) > 50
    citing = [str(path.relative_to(ROOT)) for path in sources if "DESIGN.md" in path.read_text()]
    assert citing == [], f"these cite DESIGN.md, which is not in the repository: {citing}"


# --- the config reference --------------------------------------------------------------------
def _cell(text: str) -> str:
    from rlgear.config.reference import _escape

    return _escape(text)


def test_reference_markdown_has_every_ppo_training_key_with_its_help():
    from rlgear.config.reference import reference_markdown
    from rlgear.config.schema import field_help
    from rlgear.plugins.algorithms.ppo import PPOConfig

    text = reference_markdown("ppo")
    assert text.startswith("# `training` for `ppo`")
    for name, (type_text, _, help_text) in field_help(PPOConfig).items():
        rows = [line for line in text.splitlines() if line.startswith(f"| `training.{name}`")]
        assert len(rows) == 1, f"training.{name}: {rows}"
        assert _cell(help_text) in rows[0] and _cell(type_text) in rows[0], rows[0]
    assert {f.name for f in dataclasses.fields(PPOConfig)} == set(field_help(PPOConfig))
    assert "| `training.clip_param` ★ |" in text  # ppo's own key
    assert "| `training.gamma` |" in text  # common, unchanged


def test_reference_markdown_has_every_section_key():
    from rlgear.config import (
        CheckpointConfig,
        EnvConfig,
        LoggingConfig,
        ModelConfig,
        RayConfig,
        TrainingConfig,
        WorkersConfig,
    )
    from rlgear.config.reference import reference_markdown
    from rlgear.config.schema import field_help
    from rlgear.tune.config import TuneConfig

    text = reference_markdown()
    sections = {
        "env": EnvConfig, "model": ModelConfig, "workers": WorkersConfig, "workers.ray": RayConfig,
        "training": TrainingConfig, "checkpoint": CheckpointConfig, "logging": LoggingConfig, "tune": TuneConfig,
    }  # fmt: skip
    for prefix, cls in sections.items():
        for name, (_, _, help_text) in field_help(cls).items():
            row = next((line for line in text.splitlines() if line.startswith(f"| `{prefix}.{name}`")), None)
            assert row is not None, f"{prefix}.{name} missing"
            assert _cell(help_text) in row, row
    for key in ("algorithm", "backend", "stop", "seed"):
        assert f"| `{key}` |" in text
    assert "| `tune.scheduler_options.grace_period` |" in text  # asha's options_class
    assert "**`fifo`** (rlgear): no options." in text


# --- the examples, installed through entry points ---------------------------------------------------
@pytest.fixture
def plugin_env(tmp_path):
    """Environment variables for a subprocess in which the docs' examples are installed plugins."""
    site = tmp_path / "site-packages"
    dist = site / "rlgear_docs_examples-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlgear-docs-examples\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    env = {k: v for k, v in os.environ.items() if k != "RLGEAR_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(EXAMPLES), env.get("PYTHONPATH", "")])
    return env


def run_python(code: str, env: dict[str, str], cwd: Path) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last, returned parsed."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_gridworld_example_keeps_the_timestep_contract(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from my_gridworld import GridworldAdapter

    from rlgear.errors import ConfigError
    from rlgear.testing import check_vector_env

    env = GridworldAdapter().make("gridworld", 4, kwargs={"size": 3, "max_steps": 10})
    counts = check_vector_env(env, steps=500)
    assert counts["episodes_terminated"] > 0 and counts["episodes_truncated"] > 0
    short = GridworldAdapter().make("gridworld", 2, kwargs={"size": 9}, horizon=3)
    short.reset(seed=0)
    steps = [short.step(np.zeros(2, dtype=np.int64)) for _ in range(3)]  # "up" into the wall
    assert list(steps[-1].step_type) == [2, 2] and list(steps[-1].discount) == [1.0, 1.0]  # truncated
    with pytest.raises(
        ConfigError, match=r"env\.kwargs\.sise: unknown gridworld option; did you mean .size."
    ):
        GridworldAdapter().make("gridworld", 2, kwargs={"sise": 4})


def test_numpy_backend_example_seeds_and_restores_numpy_and_python_random(monkeypatch):
    """What the example adds to core's NoFrameworkBackend (Python's random) and what it keeps (numpy's RNG)."""
    import random

    monkeypatch.syspath_prepend(str(EXAMPLES))
    from my_numpy_backend import NumpyBackend

    from rlgear.backend import NoFrameworkBackend

    saved_random, saved_numpy = (
        random.getstate(),
        np.random.get_state(),
    )  # the test leaves them as it found them
    try:
        backend = NumpyBackend()
        backend.setup(1, 3)
        first = (random.random(), np.random.rand())
        backend.setup(1, 3)
        assert (random.random(), np.random.rand()) == first  # setup seeds both generators

        random.gauss(0.0, 1.0)  # leaves a cached second normal: part of the state
        state = {k: v.copy() for k, v in backend.get_rng_state().items()}
        assert all(isinstance(v, np.ndarray) for v in state.values())  # safetensors-ready arrays
        expected = (random.gauss(0.0, 1.0), random.random(), np.random.rand())
        backend.reseed(99)
        assert (random.gauss(0.0, 1.0), random.random(), np.random.rand()) != expected
        backend.set_rng_state(state)
        assert (random.gauss(0.0, 1.0), random.random(), np.random.rand()) == expected

        core_state = NoFrameworkBackend().get_rng_state()  # a checkpoint written by core's backend
        numpy_next = np.random.rand()
        random_next = random.random()
        backend.set_rng_state(core_state)
        assert np.random.rand() == numpy_next  # numpy's RNG restored, Python's left where it was
        assert random.random() != random_next
    finally:
        random.setstate(saved_random)
        np.random.set_state(saved_numpy)


def test_numpy_backend_example_passes_the_backend_check(plugin_env, tmp_path):
    out = run_python(
        """
        import json
        from rlgear.testing import check_plugin

        report = check_plugin("numpy", kind="backend")
        print(json.dumps({"ok": report.ok, "failures": report.describe_failures() if not report.ok else ""}))
        """,
        plugin_env,
        tmp_path,
    )
    assert out["ok"], out["failures"]


def test_numpy_backend_example_serves_a_run_whose_policy_lists_it_and_checkpoints_its_rng(
    plugin_env, tmp_path
):
    """What the page says: a policy listed under "numpy" and not framework_free runs on the example backend."""
    (tmp_path / "numpy_cem.py").write_text(
        textwrap.dedent(
            """
            from my_cem import CEM, LinearPolicy

            class RandomLinearPolicy(LinearPolicy):
                framework_free = False  # runs on the backend its key names, not on core's

            class NumpyCEM(CEM):
                policies = {"numpy": "numpy_cem:RandomLinearPolicy"}
            """
        )
    )
    out = run_python(
        f"""
        import json, random
        from numpy_cem import NumpyCEM

        config = {{
            "algorithm": "cem", "backend": "numpy", "seed": 3, "env": {{"name": "CartPole-v1"}},
            "workers": {{"num_envs_per_worker": 2}},
            "training": {{"population": 4, "episodes_per_candidate": 1}},
            "logging": {{"dir": {str(tmp_path / "runs")!r}, "tensorboard": False, "progress": "none"}},
        }}
        trainer = NumpyCEM(config)
        after_setup = random.getstate()
        random.seed(3)
        seeded = random.getstate() == after_setup
        trainer.train()
        random.random()  # the saved state is not the seeded one, which the restoring trainer's setup sets
        path = trainer.save({str(tmp_path / "ckpt")!r})
        expected = [random.random() for _ in range(3)]
        again = NumpyCEM(config)
        again.restore(path)
        print(json.dumps({{"backend": type(trainer.backend).__module__, "name": trainer.backend_name,
                          "seeded": seeded, "restored": [random.random() for _ in range(3)] == expected}}))
        """,
        {**plugin_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), plugin_env["PYTHONPATH"]])},
        tmp_path,
    )
    assert (out["backend"], out["name"]) == ("my_numpy_backend", "numpy")
    assert out["seeded"], "setup(num_threads, seed) did not seed Python's random"
    assert out["restored"], "restoring the checkpoint did not put Python's random back"


def test_parking_example_trains_with_its_mask_and_never_takes_a_taken_slot(monkeypatch, tmp_path):
    """The env asserts that no taken (masked) slot is chosen; the run must finish 3 iterations."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from rlgear import config as config_mod
    from rlgear.plugins.algorithms.ppo import PPO
    from tests.conftest import small_config

    raw = small_config(tmp_path, env={"name": "my_parking_env:ParkingEnv", "vectorization": "sync"})
    trainer = PPO(config_mod.resolve(raw, training_class=PPO.config_class))
    try:
        assert trainer.policy.observation_space.shape == (1,)  # "arrival"; the mask is not model input
        for _ in range(3):
            result = trainer.train()
    finally:
        trainer.stop()
    assert result["episodes_total"] > 0
    assert result["episode_return_mean"] >= 10 * 0.1  # each of the 10 cars parked in a free slot


def test_median_stopping_options_arrive_through_tune_scheduler_options(plugin_env, tmp_path):
    out = run_python(
        """
        import json
        from rlgear.config.schema import build
        from rlgear.errors import ConfigError
        from rlgear.tune.config import TuneConfig, make_scheduler

        def fail(path, message):
            return ConfigError(f"config: {path}: {message}")

        def scheduler(options):
            return make_scheduler(build(TuneConfig, {"scheduler": "median_stopping", "mode": "min",
                                                     "scheduler_options": options}, "tune", fail), fail)

        s = scheduler({"grace_period": 5})
        errors = []
        for bad in ({"grace": 1}, {"min_samples_required": 0}):
            try:
                scheduler(bad)
            except ConfigError as err:
                errors.append(str(err))
        print(json.dumps({"metric": s.metric, "mode": s.mode, "grace": s.grace_period,
                          "min_samples": s.min_samples_required, "errors": errors}))
        """,
        plugin_env,
        tmp_path,
    )
    assert out["metric"] == "episode_return_mean" and out["mode"] == "min"
    assert out["grace"] == 5 and out["min_samples"] == 2  # the options_class default, passed as a keyword
    assert "tune.scheduler_options.grace: unknown key; did you mean 'grace_period'?" in out["errors"][0]
    assert "tune.scheduler_options.min_samples_required: expected 1 or more" in out["errors"][1]


@pytest.mark.slow
def test_cem_example_trains_without_a_framework_and_restores(plugin_env, tmp_path):
    out = run_python(
        f"""
        import json, sys
        import numpy as np
        import rlgear
        from rlgear.discovery import registry
        from rlgear.errors import ConfigError

        config = {{
            "algorithm": "cem", "backend": "tf", "seed": 0, "env": {{"name": "CartPole-v1"}},
            "workers": {{"num_envs_per_worker": 2}},
            "training": {{"population": 6, "episodes_per_candidate": 1, "evaluation_interval": 1,
                          "evaluation_episodes": 2}},
            "stop": {{"training_iteration": 3}},
            "logging": {{"dir": {str(tmp_path / "runs")!r}, "tensorboard": False}},
        }}
        result = rlgear.train(config)
        CEM = registry.load_algorithm("cem")
        trainer = CEM(config)
        trainer.train()
        path = trainer.save({str(tmp_path / "ckpt")!r})
        again = CEM(config)
        again.restore(path)
        same = (np.array_equal(trainer.mean, again.mean) and np.array_equal(trainer.std, again.std)
                and trainer.rng.random() == again.rng.random() and again.iteration == 1)
        try:
            rlgear.train({{**config, "training": {{"lr": 0.01}}}})
            refused = ""
        except ConfigError as err:
            refused = str(err)
        from rlgear.testing import check_plugin
        report = check_plugin("cem", backend="numpy")
        print(json.dumps({{"check": report.describe_failures() if not report.ok else "ok",
                          "iteration": result["training_iteration"], "score": result["learner/score_mean"],
                          "episodes": result["episodes_this_iter"],
                          "evaluation": result["evaluation/episode_return_mean"], "same": bool(same),
                          "refused": refused, "frameworks": [m for m in ("torch", "tensorflow") if m in sys.modules]}}))
        """,
        plugin_env,
        tmp_path,
    )
    assert out["iteration"] == 3 and out["score"] > 0 and out["evaluation"] > 0
    assert out["episodes"] == 4  # only the mean's report episodes feed the run's episode metrics
    assert out["same"], "the checkpoint did not restore CEM's mean, std and RNG"
    assert out["check"] == "ok", out["check"]
    assert "training.lr: unknown key" in out["refused"]  # a gradient-free config has no lr
    assert out["frameworks"] == [], "a framework-free policy must import no framework, whatever backend says"


@pytest.mark.slow
def test_gridworld_with_ppo_and_the_goal_hook_from_its_entry_point(plugin_env, tmp_path):
    out = run_python(
        f"""
        import json
        import rlgear

        result = rlgear.train({{
            "algorithm": "ppo", "seed": 0,
            "env": {{"adapter": "gridworld", "name": "gridworld", "kwargs": {{"size": 5, "max_steps": 50}}}},
            "workers": {{"num_envs_per_worker": 4}},
            "training": {{"train_batch_size": 512, "sgd_minibatch_size": 64, "num_sgd_iter": 4, "lr": 0.001}},
            "stop": {{"custom_metrics/reached_goal_mean": 0.99, "timesteps_total": 40000}},
            "logging": {{"dir": {str(tmp_path / "runs")!r}, "tensorboard": False}},
        }})
        print(json.dumps({{k: v for k, v in result.items() if k.startswith("custom_metrics/") or k == "timesteps_total"}}))
        """,
        plugin_env,
        tmp_path,
    )
    assert out["custom_metrics/reached_goal_mean"] >= 0.99, out  # the hook saw episode.last_info
    assert out["custom_metrics/missed_goal_fraction"] == pytest.approx(
        1 - out["custom_metrics/reached_goal_mean"]
    )
    assert out["timesteps_total"] < 40000, out


@pytest.mark.slow
def test_median_stopping_stops_the_slow_trials_of_an_experiment(plugin_env, tmp_path):
    config = {
        "algorithm": "ppo", "seed": 0, "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 2},
        "training": {"train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 2,
                     "lr": {"grid_search": [0.00001, 0.0001, 0.001, 0.003]}},
        "stop": {"training_iteration": 8},
        "logging": {"dir": str(tmp_path / "runs"), "progress": "none", "tensorboard": False},
        "tune": {"scheduler": "median_stopping", "scheduler_options": {"grace_period": 3, "min_samples_required": 2}},
    }  # fmt: skip
    (tmp_path / "tune.yaml").write_text(yaml.safe_dump(config))
    out = run_python(
        """
        import json
        from rlgear.tune.experiment import run

        result = run("tune.yaml")
        print(json.dumps({t.trial_id: [t.values["training.lr"], t.last_result["training_iteration"]]
                          for t in result.trials}))
        """,
        plugin_env,
        tmp_path,
    )
    iterations = {lr: iteration for lr, iteration in out.values()}
    assert iterations[0.00001] < 8 and iterations[0.0001] < 8, out  # stopped early: below the median
    assert iterations[0.003] == 8, out


def test_best_logger_example_logs_a_run_and_passes_its_check(plugin_env, tmp_path):
    out = run_python(
        """
        import json
        from rlgear.api import train
        from rlgear.discovery.check import check_plugin

        config = {"algorithm": "ppo", "seed": 0, "env": {"name": "CartPole-v1"},
                  "workers": {"num_envs_per_worker": 2},
                  "training": {"train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 1},
                  "stop": {"training_iteration": 3},
                  "logging": {"dir": "runs", "name": "run", "progress": "none", "tensorboard": False,
                              "loggers": ["jsonl", "best"], "logger_options": {"best": {"metric": "timesteps_total"}}}}
        train(config)
        best = json.load(open("runs/run/best.json"))
        report = check_plugin("best", kind="logger")
        print(json.dumps({"best": best, "ok": report.ok}))
        """,
        plugin_env,
        tmp_path,
    )  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "runs/run/progress.jsonl").read_text().splitlines()]
    assert out["best"] == {"training_iteration": 3, "timesteps_total": rows[-1]["timesteps_total"]}
    assert out["ok"]
