"""``rlgear new algorithm|env|scheduler|hook NAME``: the package it writes.

The fast tests check names, the refusal to overwrite, the files written and
their metadata, and run ``check_plugin`` on each generated plugin in this
process (its ``src/`` and a ``*.dist-info`` built from its ``pyproject.toml`` on
``sys.path``, as ``tests/test_registry.py`` fakes an installed package). The
slow test installs all four packages into a throwaway virtualenv with pip, as
a user would, then runs ``rlgear plugins --check NAME`` and each package's own
tests there, untouched.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlgear import cli
from rlgear.cli import scaffold
from rlgear.cli.scaffold import ScaffoldError, create
from rlgear.discovery import registry

KINDS = ["algorithm", "env", "scheduler", "hook", "exploration"]
GROUPS = {
    "algorithm": "rlgear.algorithms",
    "env": "rlgear.envs",
    "scheduler": "rlgear.schedulers",
    "hook": "rlgear.hooks",
    "exploration": "rlgear.exploration",
}
FILES = {
    "algorithm": [
        "README.md", "configs/{name}-cartpole.yaml", "pyproject.toml", "src/rlgear_{name}/__init__.py",
        "src/rlgear_{name}/config.py", "src/rlgear_{name}/torch_policy.py", "src/rlgear_{name}/trainer.py",
        "tests/test_{name}.py",
    ],
    "env": [
        "README.md", "configs/ppo-{name}.yaml", "pyproject.toml", "src/rlgear_{name}/__init__.py",
        "src/rlgear_{name}/env.py", "tests/test_{name}.py",
    ],
    "scheduler": [
        "README.md", "configs/tune-{name}.yaml", "pyproject.toml", "src/rlgear_{name}/__init__.py",
        "src/rlgear_{name}/scheduler.py", "tests/test_{name}.py",
    ],
    "hook": [
        "README.md", "pyproject.toml", "src/rlgear_{name}/__init__.py", "src/rlgear_{name}/hooks.py",
        "tests/test_{name}.py",
    ],
    "exploration": [
        "README.md", "configs/dqn-{name}.yaml", "pyproject.toml", "src/rlgear_{name}/__init__.py",
        "src/rlgear_{name}/exploration.py", "tests/test_{name}.py",
    ],
}  # fmt: skip


def written(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- names and folders


@pytest.mark.parametrize("name", ["my-algo", "1st", "class", "my algo", "", "a.b"])
def test_a_name_that_is_not_a_python_identifier_is_refused(tmp_path, name):
    with pytest.raises(ScaffoldError, match="expected a Python identifier"):
        create("algorithm", name, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_the_refusal_suggests_an_identifier_and_is_a_one_line_cli_error(tmp_path, capsys):
    assert cli.main(["new", "env", "grid-world", "--dir", str(tmp_path / "pkg")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "rlgear: error: plugin name 'grid-world': expected a Python identifier (letters, digits and "
        "underscores, not starting with a digit, not a keyword): it becomes the module rlgear_grid-world; "
        "e.g. 'grid_world'"
    ]


def test_an_existing_non_empty_folder_is_never_overwritten(tmp_path, capsys):
    target = tmp_path / "pkg"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")
    with pytest.raises(ScaffoldError, match="exists and is not empty; rlgear new never overwrites"):
        create("hook", "my_metric", target)
    assert written(target) == ["mine.txt"] and (target / "mine.txt").read_text() == "keep me"
    assert cli.main(["new", "hook", "my_metric", "--dir", str(target)]) == 2
    assert "never overwrites" in capsys.readouterr().err


def test_an_existing_empty_folder_is_used(tmp_path):
    target = tmp_path / "pkg"
    target.mkdir()
    assert create("hook", "my_metric", target).directory == target


def test_a_name_another_package_registers_is_refused(tmp_path):
    with pytest.raises(ScaffoldError, match=r"algorithm 'ppo' is already registered by rlgear"):
        create("algorithm", "ppo", tmp_path / "pkg")
    create("hook", "ppo", tmp_path / "hook")  # another kind's name space: fine


def test_the_default_folder_is_rlgear_name_in_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["new", "scheduler", "median"]) == 0
    assert (tmp_path / "rlgear-median" / "pyproject.toml").is_file()
    out = capsys.readouterr().out
    assert out.startswith("created ./rlgear-median (scheduler 'median', package rlgear-median):")
    assert 'pip install -e "./rlgear-median[test]"' in out and "rlgear plugins --check median" in out


def test_class_names_come_from_the_plugin_name():
    assert scaffold.class_name("my_algo") == "MyAlgo"
    assert scaffold.class_name("cem") == "Cem"
    assert scaffold.class_name("_x2") == "X2"


# --------------------------------------------------------------------------- what is written


@pytest.mark.parametrize("kind", KINDS)
def test_the_files_written(tmp_path, kind):
    name = f"my_{kind}"
    result = create(kind, name, tmp_path / "pkg")
    assert written(result.directory) == sorted(f.format(name=name) for f in FILES[kind])
    assert sorted(p.relative_to(result.directory).as_posix() for p in result.files) == written(
        result.directory
    )
    for path in result.files:
        text = path.read_text()
        assert "$" not in text.replace("$$", ""), f"{path}: an unrendered placeholder"
        assert "__package__" not in path.as_posix() and "__name__" not in path.as_posix()
        if path.suffix == ".py":
            compile(text, str(path), "exec")


@pytest.mark.parametrize("kind", KINDS)
def test_pyproject_declares_the_entry_point_in_the_kinds_group_and_depends_on_rlgear(tmp_path, kind):
    name = f"my_{kind}"
    directory = create(kind, name, tmp_path / "pkg").directory
    project = tomllib.loads((directory / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["project"]["name"] == f"rlgear-{name}"
    assert "rlgear" in project["project"]["dependencies"]
    (group, entries), *others = project["project"]["entry-points"].items()
    assert not others and group == GROUPS[kind] and list(entries) == [name]
    module = entries[name].partition(":")[0]
    assert (
        module.startswith(f"rlgear_{name}.")
        and (directory / "src" / (module.replace(".", "/") + ".py")).is_file()
    )


@pytest.mark.parametrize("kind", KINDS)
def test_the_readme_says_how_to_install_test_and_run(tmp_path, kind):
    readme = (create(kind, "thing", tmp_path / "pkg").directory / "README.md").read_text()
    for text in ("pip install -e", "rlgear plugins --check thing", "pytest", "## Run"):
        assert text in readme


def test_the_algorithms_config_documents_every_field(tmp_path):
    directory = create("algorithm", "my_pg", tmp_path / "pkg").directory
    text = (directory / "src/rlgear_my_pg/config.py").read_text()
    assert "class MyPgConfig(TrainingConfig):" in text
    fields = [
        line for line in text.splitlines() if line.startswith("    ") and ": " in line and " = " in line
    ]
    assert fields and all("= doc(" in line for line in fields), fields


def test_the_generated_code_is_lint_clean(tmp_path):
    for kind in KINDS:
        create(kind, f"my_{kind}", tmp_path / kind)
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    for kind in KINDS:  # each package on its own: its import name is first-party, rlgear third-party
        result = subprocess.run(
            [ruff, "check", "--no-cache", "--select", "E,F,W,I,B,UP,SIM", "--line-length", "110", "."],
            cwd=tmp_path / kind, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_templates_are_package_data():
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    assert "cli/templates/**/*.tmpl" in parser["options.package_data"]["rlgear"]


# --------------------------------------------------------------------------- the generated plugins pass


def fake_install(directory: Path, site: Path) -> None:
    """Make the package at ``directory`` importable with its entry points, without pip."""
    project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: 0.1.0\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines.extend(f"{k} = {v}" for k, v in entries.items())
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def installed(tmp_path):
    """``installed(kind, name)``: scaffold, then make the package importable in this process."""
    from stevedore import ExtensionManager

    added: list[str] = []

    def install(kind: str, name: str) -> Path:
        directory = create(kind, name, tmp_path / kind).directory
        site = tmp_path / f"site-{kind}"
        fake_install(directory, site)
        for path in (str(site), str(directory / "src")):
            sys.path.insert(0, path)
            added.append(path)
        importlib.invalidate_caches()
        ExtensionManager.ENTRY_POINT_CACHE.clear()  # stevedore reads each group once per process
        return directory

    yield install
    for path in added:
        sys.path.remove(path)
    for module in [m for m in sys.modules if m.startswith("rlgear_chk")]:
        del sys.modules[module]
    importlib.invalidate_caches()
    ExtensionManager.ENTRY_POINT_CACHE.clear()


@pytest.mark.parametrize("kind", KINDS)
def test_the_generated_plugin_passes_rlgear_plugins_check(installed, kind, capsys):
    name = f"chk_{kind}"
    installed(kind, name)
    infos = registry.available_hooks() if kind == "hook" else registry.available(kind)
    assert name in [i.name for i in infos]
    status = cli.main(["plugins", "--check", name, "--json"])  # check_plugin, through the command
    report = json.loads(capsys.readouterr().out)
    assert status == 0, [f for f in report["findings"] if not f["ok"]]
    assert report["package"] == f"rlgear-{name}" and report["kind"] == kind


def test_the_example_configs_are_valid_for_the_installed_plugins(installed):
    from rlgear import config as config_mod
    from rlgear.config import read_yaml
    from rlgear.tune.config import build_tune, make_scheduler, split_tune_section

    algorithm = installed("algorithm", "chk_algo")
    config = config_mod.load(algorithm / "configs/chk_algo-cartpole.yaml")
    assert config.algorithm == "chk_algo" and type(config.training).__name__ == "ChkAlgoConfig"
    env = installed("env", "chk_env")
    config = config_mod.load(env / "configs/ppo-chk_env.yaml")
    assert config.env.adapter == "chk_env" and registry.load_env_adapter("chk_env").default_env == "chk_env"
    scheduler = installed("scheduler", "chk_sched")
    _, raw_tune = split_tune_section(read_yaml(scheduler / "configs/tune-chk_sched.yaml"))

    def fail(path, message):
        return AssertionError(f"{path}: {message}")

    built = make_scheduler(build_tune(raw_tune, fail), fail)
    assert type(built).__name__ == "ChkSchedScheduler" and built.grace_period == 4


# --------------------------------------------------------------------------- installed with pip


@pytest.fixture(scope="module")
def installed_runs(tmp_path_factory):
    """The five generated packages pip-installed into one throwaway virtualenv (seeing this rlgear),
    then ``rlgear plugins --check NAME`` and the package's own pytest for each: kind -> (check, tests).

    Two kinds at a time (the machine has two cores); each kind's check and tests run one after the other.
    """
    from tests.venv_helpers import make_venv_with_package, rlgear_cli

    root = tmp_path_factory.mktemp("scaffolded")
    packages = {
        kind: create(kind, f"new_{kind}", root / "packages" / f"rlgear-new_{kind}").directory
        for kind in KINDS
    }
    python = make_venv_with_package(root, packages["algorithm"])
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--quiet", *[str(packages[k]) for k in KINDS[1:]]],
        check=True, cwd=root, timeout=600,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def check_then_test(
        kind: str,
    ) -> tuple[subprocess.CompletedProcess | AssertionError, subprocess.CompletedProcess]:
        try:
            checked: subprocess.CompletedProcess | AssertionError = rlgear_cli(
                python, "plugins", "--check", f"new_{kind}", cwd=packages[kind]
            )  # asserts exit status 0
        except AssertionError as err:
            checked = err
        tests = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=packages[kind], env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        return checked, tests

    with ThreadPoolExecutor(max_workers=2) as pool:  # the longest (algorithm, hook) first
        futures = {
            kind: pool.submit(check_then_test, kind)
            for kind in ("algorithm", "hook", "env", "scheduler", "exploration")
        }
        return {kind: future.result() for kind, future in futures.items()}


@pytest.mark.slow
@pytest.mark.xdist_group("scaffold")  # one xdist worker builds the module-scoped venv once, not both
@pytest.mark.parametrize("kind", KINDS)
def test_an_installed_generated_package_passes_the_check_and_its_own_tests(installed_runs, kind):
    checked, tests = installed_runs[kind]
    if isinstance(checked, AssertionError):
        raise checked
    assert "checks passed" in checked.stdout and f"rlgear-new_{kind}" in checked.stdout, checked.stdout
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout
