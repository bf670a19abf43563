"""The layering rules of docs/architecture.md, enforced by import-linter (``.importlinter``).

``lint-imports`` reads every import in the package, function-level ones included,
so a lazy ``import torch`` inside core breaks the build as surely as one at the top.
The contract lists core's modules by name; the completeness test makes sure a new
module of core cannot slip past it.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rlgear

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"


def contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return parser


def listed(section: str, key: str) -> set[str]:
    return {line.strip() for line in contracts()[section][key].splitlines() if line.strip()}


def lint_imports(tmp_path: Path, plant: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run import-linter on the package laid out as a wheel installs it, ``rlgear/`` with ``plugins/`` inside.

    In the source tree ``rlgear.plugins`` lives in plugins/, outside core/, where
    import-linter's graph builder (which walks the package's folder) cannot see it.
    ``plant`` appends lines to files of that copy (path relative to the package).
    """
    package = tmp_path / "rlgear"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(CORE, package, ignore=ignore)
    shutil.copytree(ROOT / "plugins", package / "plugins", ignore=ignore)
    for relative, line in (plant or {}).items():
        with open(package / relative, "a") as f:
            f.write(f"\n{line}\n")
    executable = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [executable, "--no-cache", str(ROOT / ".importlinter")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_import_linter_contracts_are_kept(tmp_path):
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 13 kept, 0 broken." in result.stdout, result.stdout


def test_import_linter_catches_a_planted_layering_slip_of_each_kind(tmp_path):
    result = lint_imports(
        tmp_path,
        plant={
            "trainer.py": "import rlgear.plugins.algorithms.ppo.config",  # core imports a plugin
            "plugins/algorithms/a2c/a2c.py": "from rlgear.plugins.algorithms.pg import config",  # algo -> algo
            "plugins/schedulers/fifo.py": "import torch",  # a scheduler imports a framework
            "plugins/backends/tf/__init__.py": "import rlgear.plugins.backends.torch",  # backend -> backend
            "policy.py": "import rlgear.sampling.metrics",  # a contract imports machinery below it
            "blocks/schedules.py": "import rlgear.distributed.rollout_ops",  # a building block -> distribution
            "sampling/metrics.py": "import rlgear.distributed.worker_set",  # sampling -> distribution
            "plugins/families/vtrace/vtrace_trainer.py": "import rlgear.plugins.families.replay",  # family -> family
            "plugins/families/replay/apex.py": "import rlgear.plugins.algorithms.dqn",  # family -> algorithm
            "plugins/families/evolution/population.py": "import rlgear.plugins.backends.torch",  # family -> backend
            "plugins/backends/torch/vtrace.py": "import rlgear.plugins.families.vtrace",  # backend -> family
            "plugins/exploration/rnd/common.py": "import rlgear.plugins.algorithms.ppo",  # exploration -> algo
            "plugins/algorithms/ppo/ppo.py": "import rlgear.plugins.exploration.rnd",  # algo -> exploration
        },
    )
    assert result.returncode != 0
    assert "Contracts: 0 kept, 13 broken." in result.stdout, result.stdout


def test_the_only_backend_to_family_imports_are_the_deprecated_sgd_path():
    """The base classes reach the on-policy SGD family only for 0.2-style policies, until 0.4."""
    assert listed("importlinter:contract:backends-import-no-algorithm-or-family", "ignore_imports") == {
        "rlgear.plugins.backends.torch.learning -> rlgear.plugins.families.onpolicy.legacy",
        "rlgear.plugins.backends.tf.learning -> rlgear.plugins.families.onpolicy.legacy",
    }


def test_every_core_module_is_under_the_no_plugin_contract():
    core_modules = {
        f"rlgear.{path.stem if path.is_file() else path.name}"
        for path in CORE.iterdir()
        if (path.suffix == ".py" and not path.name.startswith("_")) or (path / "__init__.py").is_file()
    }
    assert core_modules == listed("importlinter:contract:core-imports-no-plugin", "source_modules")


def test_the_top_level_holds_the_contracts_and_a_handful_of_subpackages():
    modules = sorted(p.stem for p in CORE.glob("*.py") if not p.name.startswith("_"))
    packages = sorted(p.name for p in CORE.iterdir() if (p / "__init__.py").is_file())
    assert packages == [
        "blocks",
        "cli",
        "config",
        "discovery",
        "distributed",
        "export",
        "external",
        "inference",
        "league",
        "offline",
        "run",
        "sampling",
        "tune",
    ]
    assert modules == [
        "api", "backend", "env", "errors", "exploration", "hookspecs", "learner", "numpy_policy", "policy", "preprocessing",
        "sample_batch", "scheduler", "searcher", "spaces", "testing", "timestep", "trainer", "value_ops",
    ]  # fmt: skip


def test_no_core_module_is_over_600_lines():
    sizes = {str(path.relative_to(CORE)): len(path.read_text().splitlines()) for path in CORE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 600} == {}


def test_no_family_trainer_is_left_in_core():
    names = {path.stem for path in CORE.rglob("*.py")}
    assert not names & {
        "apex",
        "replay_shards",
        "replay_trainer",
        "vtrace_trainer",
        "evolution",
        "population",
    }


@pytest.mark.parametrize(
    "old, new",
    [
        ("rlgear.rollout_ops", "rlgear.distributed.rollout_ops"),
        ("rlgear.postprocessing", "rlgear.sampling.postprocessing"),
        ("rlgear.replay_buffers", "rlgear.blocks.replay_buffers"),
        ("rlgear.registry", "rlgear.discovery.registry"),
        ("rlgear.checkpoint", "rlgear.run.checkpoint"),
        ("rlgear.client", "rlgear.external.client"),
        ("rlgear.schema", "rlgear.config.schema"),
        # 0.2 -> 0.3
        ("rlgear.execution.rollout_ops", "rlgear.distributed.rollout_ops"),
        ("rlgear.execution.multi_agent", "rlgear.sampling.sampler"),
        ("rlgear.execution.remote_worker", "rlgear.distributed.remote_worker"),
        ("rlgear.execution.inference", "rlgear.blocks.inference"),
        ("rlgear.execution.replay_trainer", "rlgear.plugins.families.replay.replay_trainer"),
        ("rlgear.execution.apex", "rlgear.plugins.families.replay.apex"),
        ("rlgear.execution.vtrace_trainer", "rlgear.plugins.families.vtrace.vtrace_trainer"),
        ("rlgear.execution.evolution", "rlgear.plugins.families.evolution.evolution"),
        ("rlgear.config.replay", "rlgear.plugins.families.replay.config"),
        ("rlgear.config.vtrace", "rlgear.plugins.families.vtrace.config"),
    ],
)
def test_an_old_import_path_gives_the_same_module_with_a_deprecation_warning(old, new):
    code = (
        "import importlib, warnings, sys\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\n"
        "assert old is new, (old, new)\n"
        f"assert new.__spec__.name == {new!r}, new.__spec__.name\n"
        "messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
        f"assert any({old!r} in m and {new!r} in m for m in messages), messages\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("old", ["rlgear.evaluator", "rlgear.execution.evaluator"])
def test_the_split_evaluator_module_still_gives_both_halves_with_a_warning(old):
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        "    import rlgear\n"
        "    evaluator_class = rlgear.Evaluator\n"
        "from rlgear.sampling.rollout_worker import RolloutWorker, env_seed\n"
        "from rlgear.distributed.worker_set import WorkerSet\n"
        "assert old.Evaluator is RolloutWorker and old.RolloutWorker is RolloutWorker\n"
        "assert old.WorkerSet is WorkerSet and old.env_seed is env_seed\n"
        "assert evaluator_class is RolloutWorker\n"
        "messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
        f"assert any({old!r} in m and 'rlgear.distributed.worker_set' in m for m in messages), messages\n"
        "assert any('rlgear.Evaluator is now rlgear.RolloutWorker' in m for m in messages), messages\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_from_import_of_a_moved_name_works():
    from rlgear.rollout_ops import synchronous_parallel_sample

    assert rlgear.distributed.rollout_ops.synchronous_parallel_sample is synchronous_parallel_sample


def test_an_unknown_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        __import__("rlgear.no_such_module")


LEGACY_PLUGIN = ROOT / "tests" / "data" / "legacy-0.1-plugin"
LEGACY_CONFIG = """\
algorithm: legacy_pg
seed: 0
env: {adapter: legacy_corridor, name: corridor, kwargs: {length: 6}}
workers: {num_envs_per_worker: 4}
training: {train_batch_size: 256, lr: 0.01}
stop: {timesteps_total: 3000}
logging: {tensorboard: false}
"""


@pytest.mark.slow
def test_a_plugin_written_against_the_0_1_import_paths_installs_and_trains(tmp_path):
    """tests/data/legacy-0.1-plugin imports rlgear.rollout_ops, rlgear.postprocessing, rlgear.schema ..."""
    from tests.venv_helpers import make_venv_with_package, rlgear_cli

    sources = "\n".join(p.read_text() for p in LEGACY_PLUGIN.rglob("*.py"))
    for old_path in ("rlgear.rollout_ops", "rlgear.postprocessing", "rlgear.schema"):
        assert f"from {old_path} import" in sources  # the package really uses the old paths
    python = make_venv_with_package(tmp_path, LEGACY_PLUGIN)
    listing = rlgear_cli(python, "plugins", cwd=tmp_path).stdout
    assert "legacy_pg" in listing and "legacy_corridor" in listing and "load error" not in listing, listing
    config = tmp_path / "legacy.yaml"
    config.write_text(LEGACY_CONFIG)
    rlgear_cli(
        python, "train", str(config), "--set", f"logging.dir={tmp_path / 'runs'}",
        "--set", "logging.name=legacy", "--progress", "none", cwd=tmp_path,
    )  # fmt: skip
    progress = (tmp_path / "runs" / "legacy" / "progress.jsonl").read_text().splitlines()
    assert progress and '"timesteps_total"' in progress[-1]
