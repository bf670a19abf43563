"""Tests of plugin discovery (``rlgear.discovery.registry``) and callback hooks (``rlgear.discovery.hooks``).

Third-party and broken plugins are simulated without installing anything: a
``*.dist-info`` folder with ``METADATA`` and ``entry_points.txt`` next to the
plugin modules, put on ``PYTHONPATH`` of a subprocess, is a distribution as far
as ``importlib.metadata`` (and so stevedore and pluggy) is concerned. Each
subprocess gets its own ``HOME`` and ``XDG_CACHE_HOME`` so that stevedore's
entry-point cache cannot leak between runs.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import rlgear
from rlgear.discovery import hooks, registry
from rlgear.errors import PluginError, RLGearError
from tests.conftest import small_config

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = {"algorithm": "ppo", "env": "gymnasium", "backend": "torch", "scheduler": "fifo"}


# --------------------------------------------------------------------------- discovery (in-process)


@pytest.mark.parametrize(("kind", "name"), sorted(BUILTINS.items()))
def test_builtin_plugins_are_listed_with_package_and_version(kind, name):
    assert name in registry.names(kind)
    (info,) = [p for p in registry.available(kind) if p.name == name]
    assert info.kind == kind
    assert info.package == "rlgear"
    assert info.version == rlgear.__version__
    assert info.target.startswith("rlgear.plugins.")
    assert ":" in info.target


def test_available_is_sorted_by_name():
    for kind in registry.GROUPS:
        listed = [p.name for p in registry.available(kind)]
        assert listed == sorted(listed)


def test_the_four_driver_groups_are_the_documented_entry_point_groups():
    assert registry.GROUPS == {
        "algorithm": "rlgear.algorithms",
        "env": "rlgear.envs",
        "backend": "rlgear.backends",
        "scheduler": "rlgear.schedulers",
        "searcher": "rlgear.searchers",
        "logger": "rlgear.loggers",
        "exploration": "rlgear.exploration",
    }
    assert registry.HOOKS_GROUP == "rlgear.hooks"


def test_unknown_plugin_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown plugin kind 'model'"):
        registry.names("model")


def test_loading_a_builtin_returns_the_class_and_caches_it():
    from rlgear.trainer import Trainer

    cls = registry.load_algorithm("ppo")
    assert issubclass(cls, Trainer)
    assert registry.load("algorithm", "ppo") is cls


def test_unknown_name_lists_installed_plugins_and_the_closest_match():
    with pytest.raises(PluginError) as info:
        registry.load("algorithm", "ppoo")
    message = str(info.value)
    assert "unknown algorithm 'ppoo'" in message
    assert "did you mean 'ppo'" in message
    assert "installed algorithms: " in message
    installed = message.split("installed algorithms: ")[1]
    for name in registry.names("algorithm"):
        assert name in installed
    assert "\n" not in message


def test_unknown_name_far_from_any_plugin_still_lists_installed_ones():
    with pytest.raises(PluginError) as info:
        registry.load("scheduler", "hyperband-xyz")
    message = str(info.value)
    assert "did you mean" not in message
    assert "fifo" in message


def test_unknown_env_adapter_suggests_the_installed_one():
    with pytest.raises(PluginError, match="did you mean 'gymnasium'"):
        registry.load_env_adapter("gymnasum")


def test_plugin_errors_are_user_errors():
    assert issubclass(PluginError, RLGearError)


def test_listing_names_imports_no_plugin_module():
    code = (
        "import sys\n"
        "from rlgear import registry\n"
        "for kind in registry.GROUPS: registry.names(kind); registry.available(kind)\n"
        "print(sorted(m for m in sys.modules if m.startswith('rlgear.plugins.') or m in ('torch', 'gymnasium')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_listing_parses_each_distributions_metadata_once(monkeypatch):
    """rlgear registers dozens of entry points; parsing its METADATA for each one (twice) was over half
    the time of ``rlgear plugins``. Listing every kind, twice, parses it at most once."""
    import importlib.metadata

    reads = []
    original = importlib.metadata.PathDistribution.read_text

    def counting(self, filename):
        text = original(self, filename)
        if filename in ("METADATA", "PKG-INFO") and text is not None:  # one of them per parse
            reads.append(str(self._path))
        return text

    monkeypatch.setattr(importlib.metadata.PathDistribution, "read_text", counting)
    monkeypatch.setattr(registry, "_packages", {})
    for _ in range(2):
        listed = [info for kind in registry.GROUPS for info in registry.available(kind)]
    ours = [info for info in listed if info.package == "rlgear"]
    assert len(ours) > 30 and {info.version for info in ours} == {rlgear.__version__}
    rlgear_reads = [path for path in reads if Path(path).name.lower().startswith("rlgear")]
    assert len(rlgear_reads) <= 1, rlgear_reads


def test_a_reinstalled_distribution_is_listed_with_its_new_version(tmp_path, monkeypatch):
    """The metadata cache is keyed by the dist-info folder and its modification time."""
    import shutil

    entry_points = "[rlgear.algorithms]\nreinstalled_algo = reinstalled_mod:Algo\n"
    root = make_distribution(tmp_path / "site", "reinstalled", entry_points, {})
    monkeypatch.syspath_prepend(str(root))
    info_dir = root / "reinstalled-0.1.dist-info"

    def listed_version() -> str:
        (info,) = [i for i in registry.available("algorithm") if i.name == "reinstalled_algo"]
        return info.version

    assert listed_version() == "0.1"
    shutil.rmtree(info_dir)  # what pip does: the old folder goes, a new one is written
    info_dir.mkdir()
    (info_dir / "METADATA").write_text("Metadata-Version: 2.1\nName: reinstalled\nVersion: 0.2\n")
    (info_dir / "entry_points.txt").write_text(entry_points)
    os.utime(info_dir, ns=(os.stat(info_dir).st_atime_ns, os.stat(info_dir).st_mtime_ns + 10**9))
    assert listed_version() == "0.2"


# --------------------------------------------------------------------------- missing dependencies


@pytest.mark.parametrize(
    ("module", "extra"),
    [("tensorflow", "tf"), ("tensorflow.keras", "tf"), ("torch", "torch"), ("ray", "ray")],
)
def test_missing_optional_dependency_says_which_extra_to_install(module, extra):
    err = ModuleNotFoundError(f"No module named '{module}'", name=module)
    hint = registry.missing_dependency_hint(err)
    assert hint is not None
    assert f"pip install 'rlgear[{extra}]'" in hint


def test_missing_unknown_dependency_names_the_module():
    err = ModuleNotFoundError("No module named 'gym_foo'", name="gym_foo")
    hint = registry.missing_dependency_hint(err)
    assert hint is not None and "'gym_foo'" in hint


@pytest.mark.parametrize("err", [RuntimeError("boom"), ImportError("cannot import name 'x'")])
def test_other_errors_get_no_install_hint(err):
    assert registry.missing_dependency_hint(err) is None


def test_load_error_of_a_missing_tensorflow_reads_as_an_install_instruction():
    err = ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
    text = registry.describe_load_error("backend", "tf", "rlgear.plugins.backends.tf:TFBackend", err)
    assert text.startswith("backend 'tf' cannot be loaded")
    assert "pip install 'rlgear[tf]'" in text


def test_load_error_of_a_broken_plugin_carries_its_exception():
    err = RuntimeError("boom")
    text = registry.describe_load_error("algorithm", "x", "x_mod:X", err)
    assert "algorithm 'x'" in text and "x_mod:X" in text and "RuntimeError: boom" in text


def test_every_install_hint_names_an_extra_that_installs_the_missing_package():
    # Following the hint must actually install the module: an empty extra does nothing.
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "setup.cfg")
    extras = parser["options.extras_require"]
    for module, extra in registry.EXTRAS.items():
        assert extra in extras, f"setup.cfg has no extra '{extra}'"
        requirements = [line.strip() for line in extras[extra].splitlines() if line.strip()]
        assert any(req.startswith(module) for req in requirements), (
            f"the hint for a missing '{module}' says pip install 'rlgear[{extra}]', "
            f"but that extra installs {requirements or 'nothing'}"
        )


# --------------------------------------------------------------------------- hooks from code


class Recorder:
    def __init__(self):
        self.calls = []

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        self.calls.append(("on_train_result", trainer, dict(result)))
        result["custom_metrics/recorded"] = 1.0

    @rlgear.hookimpl
    def on_checkpoint(self, checkpoint_dir):  # a subset of the spec's arguments
        self.calls.append(("on_checkpoint", checkpoint_dir))


def test_hooks_passed_in_code_are_called_with_keyword_arguments():
    recorder = Recorder()
    manager = hooks.make_plugin_manager([recorder], autoload=False)
    trainer = object()
    result = {"training_iteration": 1}
    manager.hook.on_train_result(trainer=trainer, result=result)
    manager.hook.on_checkpoint(trainer=trainer, checkpoint_dir="/x/checkpoint_000001")
    assert recorder.calls == [
        ("on_train_result", trainer, {"training_iteration": 1}),
        ("on_checkpoint", "/x/checkpoint_000001"),
    ]
    assert result["custom_metrics/recorded"] == 1.0


def test_hooks_in_a_module_like_object_are_called():
    class Plugin:
        @staticmethod
        @rlgear.hookimpl
        def on_trainer_init(trainer):
            trainer.append("init")

    calls: list[str] = []
    manager = hooks.make_plugin_manager([Plugin], autoload=False)
    manager.hook.on_trainer_init(trainer=calls)
    assert calls == ["init"]


def test_the_same_hook_object_passed_twice_is_registered_once():
    recorder = Recorder()
    manager = hooks.make_plugin_manager([recorder, recorder], autoload=False)
    manager.hook.on_train_result(trainer=None, result={})
    assert len(recorder.calls) == 1


def test_hook_specs_are_registered_even_without_plugins():
    manager = hooks.make_plugin_manager(autoload=False)
    for name in ("on_trainer_init", "on_episode_start", "on_episode_end", "on_sample_end"):
        assert hasattr(manager.hook, name)
    manager.hook.on_train_result(trainer=None, result={})  # no implementations: a no-op


@pytest.fixture
def entry_point_loads(monkeypatch):
    groups: list[str] = []
    monkeypatch.setattr(hooks, "_load_entry_point_hooks", lambda manager: groups.append(hooks.HOOKS_GROUP))
    return groups


def test_entry_point_hooks_are_autoloaded_by_default(entry_point_loads, monkeypatch):
    monkeypatch.delenv(hooks.AUTOLOAD_ENV_VAR, raising=False)
    hooks.make_plugin_manager()
    assert entry_point_loads == ["rlgear.hooks"]


def test_environment_variable_switches_hook_autoloading_off(entry_point_loads, monkeypatch):
    monkeypatch.setenv("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")
    hooks.make_plugin_manager()
    assert entry_point_loads == []


def test_explicit_autoload_argument_wins_over_the_environment(entry_point_loads, monkeypatch):
    monkeypatch.setenv("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")
    hooks.make_plugin_manager(autoload=True)
    monkeypatch.delenv("RLGEAR_DISABLE_PLUGIN_AUTOLOAD")
    hooks.make_plugin_manager(autoload=False)
    assert entry_point_loads == ["rlgear.hooks"]


def test_misspelled_hook_implementation_is_reported_to_the_plugin_author():
    class Typo:
        @rlgear.hookimpl
        def on_train_reslt(self, trainer, result):
            pass

    with pytest.raises(RLGearError) as info:
        hooks.make_plugin_manager([Typo()], autoload=False)
    assert "on_train_reslt" in str(info.value)


# --------------------------------------------------------------------------- fake distributions


def make_distribution(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """A distribution 'installed' in ``root``: dist-info metadata plus its modules."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points).lstrip())
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source).lstrip())
    return root


def subprocess_env(plugin_root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != hooks.AUTOLOAD_ENV_VAR}
    env.update(
        PYTHONPATH=str(plugin_root),
        HOME=str(plugin_root / "home"),
        XDG_CACHE_HOME=str(plugin_root / "cache"),
        COLUMNS="200",
        PYTHONDONTWRITEBYTECODE="1",
        **extra,
    )
    return env


def run_rlgear(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlgear", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def flat(text: str) -> str:
    """Text with all whitespace runs collapsed (rich wraps long lines)."""
    return " ".join(text.split())


FAKEPLUG_ENTRY_POINTS = """
    [rlgear.algorithms]
    broken = broken_mod:Algo
    needs_tf = tf_mod:Algo

    [rlgear.hooks]
    counter = hook_mod
"""
FAKEPLUG_MODULES = {
    "broken_mod": 'raise RuntimeError("boom from broken_mod")\n',
    # Explicit, so the test does not depend on whether tensorflow happens to be installed.
    "tf_mod": """
        raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
    """,
    "hook_mod": """
        import rlgear

        @rlgear.hookimpl
        def on_train_result(trainer, result):
            result["custom_metrics/from_entry_point"] = 1.0
    """,
}

# A plugin that imports fine but is not what its group promises, and a broken hook.
WRONGPLUG_ENTRY_POINTS = """
    [rlgear.algorithms]
    notatrainer = plain_mod:Thing

    [rlgear.hooks]
    badhook = bad_hook_mod
"""
WRONGPLUG_MODULES = {
    "plain_mod": "class Thing:\n    pass\n",
    "bad_hook_mod": 'raise RuntimeError("boom from bad_hook_mod")\n',
}


@pytest.fixture(scope="module")
def fakeplug(tmp_path_factory) -> Path:
    return make_distribution(
        tmp_path_factory.mktemp("fakeplug"), "fakeplug", FAKEPLUG_ENTRY_POINTS, FAKEPLUG_MODULES
    )


@pytest.fixture(scope="module")
def wrongplug(tmp_path_factory) -> Path:
    return make_distribution(
        tmp_path_factory.mktemp("wrongplug"), "wrongplug", WRONGPLUG_ENTRY_POINTS, WRONGPLUG_MODULES
    )


@pytest.fixture(scope="module")
def plugin_listings(fakeplug, wrongplug) -> dict[str, subprocess.CompletedProcess]:
    """``rlgear plugins`` with each fake distribution, run concurrently (each imports torch)."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "rlgear", "plugins"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(root),
        )
        for name, root in (("fakeplug", fakeplug), ("wrongplug", wrongplug))
    }
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


def listing_row(stdout: str, name: str) -> str:
    rows = [line for line in stdout.splitlines() if f" {name} " in line]
    assert rows, f"no row for {name!r} in:\n{stdout}"
    return rows[0]


@pytest.mark.xdist_group("plugin_listings")  # one xdist worker runs the module fixture
def test_plugins_command_reports_broken_plugins_and_keeps_the_others(plugin_listings):
    out = plugin_listings["fakeplug"]
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert "ok" in listing_row(out.stdout, "ppo")
    for name in ("gymnasium", "torch", "fifo"):
        assert "ok" in listing_row(out.stdout, name)
    row = listing_row(out.stdout, "broken")
    assert "fakeplug" in row and "0.1" in row and "error" in row
    # An optional dependency that is not installed is not an error: it says what to install.
    row = listing_row(out.stdout, "needs_tf")
    assert "fakeplug" in row and "not installed" in row and "error" not in row
    text = flat(out.stdout)
    assert "RuntimeError: boom from broken_mod" in text
    assert "needs_tf cannot be loaded" not in text  # not listed among the load errors


@pytest.mark.xdist_group("plugin_listings")  # one xdist worker runs the module fixture
def test_plugins_command_shows_the_install_hint_verbatim(plugin_listings):
    # The hint must survive the terminal rendering: "[tf]" is not markup.
    text = flat(plugin_listings["fakeplug"].stdout)
    assert "pip install 'rlgear[tf]'" in text


@pytest.mark.xdist_group("plugin_listings")  # one xdist worker runs the module fixture
def test_plugins_command_shows_package_and_version_of_builtins(plugin_listings):
    out = plugin_listings["fakeplug"]
    row = listing_row(out.stdout, "ppo")
    assert "algorithm" in row and "rlgear" in row and rlgear.__version__ in row


@pytest.mark.xdist_group("plugin_listings")  # one xdist worker runs the module fixture
def test_plugins_command_lists_hook_plugins(plugin_listings):
    # docs/plugins/index.md, "`rlgear plugins`": it lists every installed plugin of every kind;
    # rlgear.hooks is a plugin group.
    out = plugin_listings["fakeplug"]
    row = listing_row(out.stdout, "counter")
    assert "fakeplug" in row


@pytest.mark.xdist_group("plugin_listings")  # one xdist worker runs the module fixture
def test_plugins_command_survives_an_algorithm_that_is_not_a_trainer(plugin_listings):
    out = plugin_listings["wrongplug"]
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    assert out.returncode == 0
    assert "ok" in listing_row(out.stdout, "ppo")
    assert "error" in listing_row(out.stdout, "notatrainer")
    assert "rlgear.Trainer" in flat(out.stdout)


@pytest.mark.xdist_group("plugin_listings")  # one xdist worker runs the module fixture
def test_plugins_command_reports_a_hook_plugin_that_fails_to_import(plugin_listings):
    out = plugin_listings["wrongplug"]
    assert "Traceback" not in out.stdout + out.stderr
    text = flat(out.stdout + out.stderr)
    assert "badhook" in text
    assert "boom from bad_hook_mod" in text


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [("broken", "RuntimeError: boom from broken_mod"), ("needs_tf", "pip install 'rlgear[tf]'")],
)
def test_training_a_plugin_that_fails_to_import_is_a_one_line_error(fakeplug, tmp_path, algorithm, expected):
    config = tmp_path / "run.yaml"
    config.write_text(f"algorithm: {algorithm}\nenv: {{name: CartPole-v1}}\n")
    runs = tmp_path / "runs"
    out = run_rlgear(["train", str(config), "--set", f"logging.dir={runs}"], subprocess_env(fakeplug))
    assert out.returncode == 2
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("rlgear: error:")
    assert f"algorithm '{algorithm}'" in lines[0]
    assert expected in lines[0]
    assert not runs.exists()


def test_training_an_algorithm_that_is_not_a_trainer_is_a_one_line_error(wrongplug, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("algorithm: notatrainer\nenv: {name: CartPole-v1}\n")
    env = subprocess_env(wrongplug, RLGEAR_DISABLE_PLUGIN_AUTOLOAD="1")
    out = run_rlgear(["train", str(config)], env)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"rlgear: error: {config}: algorithm: ")
    assert "algorithm 'notatrainer' must resolve to a subclass of rlgear.Trainer" in line


HOOK_SCRIPT = """
import json, os, sys
import rlgear

def config(name):
    return {
        "algorithm": "ppo",
        "env": {"name": "CartPole-v1"},
        "seed": 0,
        "training": {"train_batch_size": 200, "sgd_minibatch_size": 100, "num_sgd_iter": 1},
        "workers": {"num_envs_per_worker": 4},
        "stop": {"timesteps_total": 600},
        "checkpoint": {"at_end": False},
        "logging": {"dir": sys.argv[1], "name": name, "tensorboard": False},
    }

out = {}
result = rlgear.train(config("autoload"))
out["autoload"] = [result.get("custom_metrics/from_entry_point"), result["timesteps_total"]]
os.environ["RLGEAR_DISABLE_PLUGIN_AUTOLOAD"] = "1"
result = rlgear.train(config("disabled"))
out["disabled"] = [result.get("custom_metrics/from_entry_point"), result["timesteps_total"]]
print(json.dumps(out))
"""


def test_entry_point_hooks_run_unless_autoload_is_disabled(fakeplug, tmp_path):
    script = tmp_path / "hook_run.py"
    script.write_text(HOOK_SCRIPT)
    runs = tmp_path / "runs"
    out = subprocess.run(
        [sys.executable, str(script), str(runs)],
        capture_output=True,
        text=True,
        env=subprocess_env(fakeplug),
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout.strip().splitlines()[-1])
    value, steps = results["autoload"]
    assert value == 1.0
    assert steps >= 600
    value, steps = results["disabled"]
    assert value is None
    assert steps >= 600


def test_a_hook_plugin_that_fails_to_import_is_reported_without_a_traceback(wrongplug, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "algorithm: ppo\nenv: {name: CartPole-v1}\nseed: 0\n"
        "training: {train_batch_size: 200, sgd_minibatch_size: 100, num_sgd_iter: 1}\n"
        "workers: {num_envs_per_worker: 4}\nstop: {timesteps_total: 200}\n"
        "checkpoint: {at_end: false}\n"
        f"logging: {{dir: {tmp_path / 'runs'}, tensorboard: false, progress: none}}\n"
    )
    out = run_rlgear(["train", str(config)], subprocess_env(wrongplug))
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-2000:]
    text = flat(out.stdout + out.stderr)
    assert "badhook" in text
    assert "boom from bad_hook_mod" in text


def test_a_missing_submodule_of_an_installed_package_is_named_without_an_install_hint():
    from rlgear.discovery.registry import missing_dependency_hint

    hint = missing_dependency_hint(ModuleNotFoundError("No module named 'json.nosuch'", name="json.nosuch"))
    assert hint == (
        "the module 'json.nosuch' does not exist, although the package 'json' is installed "
        "(a wrong entry point, or a file missing from that package's build)"
    )
    absent = missing_dependency_hint(ModuleNotFoundError("No module named 'nopkg_xyz'", name="nopkg_xyz"))
    assert "'nopkg_xyz', which is not installed" in absent


def test_the_support_matrix_has_no_column_for_a_broken_backend(monkeypatch, capsys):
    from rlgear import cli
    from rlgear.discovery import registry

    reports = registry.inspect_all()
    broken = registry.PluginReport(
        registry.PluginInfo("backend", "brokenbackend", "x:Y", "brokenpkg", "0.1"), error="boom"
    )
    missing = registry.PluginReport(
        registry.PluginInfo("backend", "tfish", "x:Z", "rlgear", "0"), error="no tf", missing_extra="tf"
    )
    reports["backend"] = [*reports["backend"], broken, missing]
    monkeypatch.setattr(registry, "inspect_all", lambda: reports)
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    matrix = out[out.index("algorithm support") :]
    header = next(line for line in matrix.splitlines() if "discrete" in line)
    assert "brokenbackend" not in header and "tfish" not in header and "torch" in header
    row = next(line for line in out.splitlines() if " tfish " in line)
    assert "not installed (pip install 'rlgear[tf]')" in row


RAISING_HOOK_MODULES = {
    "raising_hook": """
        import rlgear

        @rlgear.hookimpl
        def on_train_result(trainer, result):
            if result["training_iteration"] >= 2:
                raise ValueError("the dashboard is down")
    """,
}


def test_a_hook_that_raises_stops_the_run_with_one_line_a_checkpoint_and_the_way_out(tmp_path):
    """It used to kill every run (built-in PPO too) with pluggy's traceback, no checkpoint, no plugin named."""
    root = make_distribution(
        tmp_path / "site",
        "flakyhooks",
        "\n    [rlgear.hooks]\n    dashboard = raising_hook\n",
        RAISING_HOOK_MODULES,
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            small_config(tmp_path, stop={"training_iteration": 50}, logging={"dir": str(tmp_path / "runs")})
        )
    )
    out = run_rlgear(["train", str(config)], subprocess_env(root))
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert "hook plugin 'dashboard' (package flakyhooks) raised in on_train_result" in line
    assert "ValueError: the dashboard is down" in line and "RLGEAR_DISABLE_PLUGIN_AUTOLOAD=1" in line
    assert "checkpoint checkpoint_000002 written; continue with --resume" in line
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "checkpoint_000002").is_dir()
    # The way out works: the same run without entry-point hooks goes on.
    resumed = run_rlgear(
        ["train", str(config), "--resume", str(run_dir), "--set", "stop.training_iteration=3"],
        subprocess_env(root, **{hooks.AUTOLOAD_ENV_VAR: "1"}),
    )
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize(
    ("value", "disabled"),
    [("1", True), ("true", True), ("yes", True), ("0", False), ("", False), ("false", False), ("off", False)],
)
def test_the_autoload_switch_reads_its_value_not_just_its_presence(monkeypatch, value, disabled):
    monkeypatch.setenv(hooks.AUTOLOAD_ENV_VAR, value)
    assert hooks.autoload_disabled() is disabled


SECOND_PPO_MODULES = {
    "third_ppo": """
        from rlgear.plugins.algorithms.ppo import PPO

        class ThirdPartyPPO(PPO):
            pass
    """,
}


def test_a_third_party_ppo_does_not_break_the_built_in_and_a_config_can_pick_it(tmp_path):
    root = make_distribution(
        tmp_path / "site",
        "thirdppo",
        "\n    [rlgear.algorithms]\n    ppo = third_ppo:ThirdPartyPPO\n",
        SECOND_PPO_MODULES,
    )
    probe = textwrap.dedent(
        """
        import warnings
        from rlgear import config
        from rlgear.discovery import registry
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(registry.load_algorithm("ppo").__name__)
        print(caught[0].message if caught else "no warning")
        print(registry.load_algorithm("ppo@thirdppo").__name__)
        raw = {"algorithm": {"name": "ppo", "package": "thirdppo"}, "env": {"name": "CartPole-v1"}}
        print(config.resolve(raw).algorithm)
        try:
            registry.load_algorithm("ppo@nosuchpkg")
        except Exception as err:
            print(err)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=subprocess_env(root), timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "PPO"  # the built-in, as before the package was installed
    assert "also provided by thirdppo; using rlgear's built-in (pick another with 'ppo@thirdppo'" in lines[1]
    assert lines[2] == "ThirdPartyPPO" and lines[3] == "ppo@thirdppo"
    assert "package 'nosuchpkg' does not provide the algorithm 'ppo'" in lines[4]
    assert "thirdppo (third_ppo:ThirdPartyPPO)" in lines[4] and "rlgear (" in lines[4]
    listing = run_rlgear(["plugins"], subprocess_env(root))
    assert listing.returncode == 0 and "Traceback" not in listing.stderr
    rows = [line for line in listing.stdout.splitlines() if " ppo " in line and "algorithm" in line]
    assert len(rows) == 2 and all("ok" in row for row in rows), listing.stdout
