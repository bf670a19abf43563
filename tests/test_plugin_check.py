"""``rlgear plugins --check NAME`` and ``rlgear.testing.check_plugin`` / ``assert_plugin_ok``.

Every built-in plugin passes its contract. Deliberately broken plugins, one or
more per kind, are registered in this process the way ``tests/test_registry.py``
fakes third-party packages: a ``*.dist-info`` folder with ``entry_points.txt``
next to the plugin modules, put on ``sys.path`` (``importlib.metadata`` and
stevedore read entry points from there). Each must be reported with the finding
that names its mistake, and the command must exit with status 1.
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from rlgear import cli
from rlgear.discovery import check, registry
from rlgear.errors import PluginError
from rlgear.testing import CheckReport, assert_plugin_ok, check_plugin
from tests.conftest import needs_tf

BUILTIN_ALGORITHMS = ["a2c", "a3c", "appo", "dqn", "impala", "pg", "ppo", "qrdqn"]


def finding(report: CheckReport, name: str) -> check.Finding:
    prefix = name if "(" in name else name + " ("  # 'short run' matches 'short run (CartPole-v1, torch)'
    matches = [f for f in report.findings if f.check == name or f.check.startswith(prefix)]
    assert matches, f"no finding '{name}' in {[f.check for f in report.findings]}"
    return matches[0]


def failed(report: CheckReport) -> list[str]:
    return [f.check for f in report.findings if not f.ok]


# --------------------------------------------------------------------------- built-ins


@pytest.mark.parametrize("name", BUILTIN_ALGORITHMS)
def test_every_builtin_algorithm_passes_on_torch(name):
    report = check_plugin(name, "algorithm", backend="torch")
    assert report.ok, report.describe_failures()
    assert (report.kind, report.package) == ("algorithm", "rlgear")
    for rule in ("name", "config fields documented", "capabilities", "short run", "result keys",
                 "learner stats finite", "loss path", "checkpoint round trip"):  # fmt: skip
        assert finding(report, rule).ok
    assert finding(report, "short run (CartPole-v1").ok
    continuous = "continuous" in registry.load_algorithm(name).action_spaces
    assert any(f.check.startswith("short run (Pendulum-v1") for f in report.findings) == continuous
    assert finding(report, "policy (tf)").message.startswith("not checked")  # --backend torch


@pytest.mark.slow
@needs_tf
@pytest.mark.parametrize("name", BUILTIN_ALGORITHMS)
def test_every_builtin_algorithm_passes_with_every_backend_it_declares(name):
    report = assert_plugin_ok(name, "algorithm")  # imports the tf policies too
    assert "is a rlgear.policy.Policy" in finding(report, "policy (tf)").message


def test_the_gymnasium_adapter_passes_on_its_default_env():
    report = assert_plugin_ok("gymnasium", "env")
    assert "'CartPole-v1' x 4" in finding(report, "make").message
    assert "check_vector_env" in finding(report, "TimeStep contract").message
    assert finding(report, "horizon").ok


def test_the_gymnasium_adapter_builds_the_env_named_by_env_name():
    report = assert_plugin_ok("gymnasium", "env", env_name="Pendulum-v1")
    assert "'Pendulum-v1' x 4" in finding(report, "make").message


def test_the_external_adapter_passes_and_says_what_it_cannot_step():
    report = assert_plugin_ok("external", "env")
    contract = finding(report, "TimeStep contract")
    assert contract.ok and contract.message.startswith("not checked: ") and "TCP" in contract.message


@pytest.mark.parametrize("name", ["fifo", "asha", "pbt"])
def test_every_builtin_scheduler_passes(name):
    report = assert_plugin_ok(name, "scheduler")
    assert "same" in finding(report, "state round trip").message


def test_asha_stops_the_falling_trials_of_the_synthetic_population():
    assert "STOP" in finding(check_plugin("asha"), "decisions").message


def test_the_torch_backend_passes():
    report = assert_plugin_ok("torch", "backend")
    assert "TorchPolicy" in finding(report, "base policy class").message
    assert finding(report, "rng state round trip").ok


@needs_tf
@pytest.mark.slow
def test_the_tf_backend_passes():
    report = assert_plugin_ok("tf", "backend")
    assert "TFPolicy" in finding(report, "base policy class").message


def test_the_kind_is_found_without_kind_when_the_name_is_unique():
    assert check_plugin("fifo").kind == "scheduler"


# --------------------------------------------------------------------------- names


def test_an_unknown_name_is_the_usual_did_you_mean_error():
    with pytest.raises(PluginError) as raised:
        check_plugin("ppoo")
    message = str(raised.value)
    assert "unknown plugin 'ppoo'; did you mean 'ppo' (algorithm)?" in message
    assert "schedulers: asha, fifo, pbt" in message and "\n" not in message
    with pytest.raises(PluginError, match=r"unknown scheduler 'ppo'"):
        check_plugin("ppo", "scheduler")


def test_an_unknown_name_is_a_one_line_error_with_status_2(capsys):
    assert cli.main(["plugins", "--check", "gymnasum"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlgear: error: unknown plugin 'gymnasum'; did you mean 'gymnasium' (env)?")
    assert len(err.strip().splitlines()) == 1


def test_check_options_need_check(capsys):
    assert cli.main(["plugins", "--json"]) == 2
    assert "--json: only with --check NAME" in capsys.readouterr().err


# --------------------------------------------------------------------------- broken plugins

ENTRY_POINTS = """
    [rlgear.algorithms]
    undocumented_algo = chk_algos:Undocumented
    forgetful_algo = chk_algos:Forgetful
    import_error_algo = chk_import_error:Algo
    twin = chk_algos:Twin
    idle_algo = chk_algos:Idle
    picky_algo = chk_algos:Picky
    vague_algo = chk_algos:Vague

    [rlgear.envs]
    nofirst_env = chk_envs:NoFirstAdapter
    nodefault_env = chk_envs:NoDefaultAdapter
    nohorizon_env = chk_envs:NoHorizonAdapter
    ma_broken_env = chk_envs:MultiAgentBrokenAdapter
    ma_nohorizon_env = chk_envs:MultiAgentNoHorizonAdapter

    [rlgear.schedulers]
    wrong_decision = chk_schedulers:WrongDecision
    set_state = chk_schedulers:SetState
    twin = chk_schedulers:TwinScheduler

    [rlgear.hooks]
    typo_hooks = chk_hooks
    extra_arg_hooks = chk_hooks:extra_arg

    [rlgear.backends]
    forgetful_backend = chk_backend:ForgetfulBackend
"""

MODULES = {
    "chk_algos": """
        from dataclasses import dataclass

        from rlgear.plugins.algorithms.pg import PG, PGConfig


        @dataclass
        class UndocumentedConfig(PGConfig):
            extra_knob: float = 0.5  # no doc(): users can't know what it does


        class Undocumented(PG):
            name = "undocumented_algo"
            config_class = UndocumentedConfig
            policies = {"torch": PG.policies["torch"]}
            action_spaces = frozenset({"discrete"})


        class Forgetful(PG):
            name = "forgetful_algo"
            policies = {"torch": PG.policies["torch"]}
            action_spaces = frozenset({"discrete"})

            def training_step(self):
                self.steps_done = getattr(self, "steps_done", 0) + 1
                return super().training_step()

            def get_algorithm_state(self):
                return {"steps_done": getattr(self, "steps_done", 0)}  # saved, never restored


        class Idle(PG):
            name = "idle_algo"
            policies = {"torch": PG.policies["torch"]}
            action_spaces = frozenset({"discrete"})

            def training_step(self):
                self.workers.local_worker.sample()  # samples, never learns (and never sets weights)
                return {"nothing": 0.0}


        class Picky(PG):
            '''Like a third-party CEM: scores whole episodes of one env, one step per sample, and its
            setup() refuses anything else, one key at a time.'''

            name = "picky_algo"
            policies = {"torch": PG.policies["torch"]}
            action_spaces = frozenset({"discrete"})

            def setup(self, config):
                workers = config.workers
                if workers.batch_mode != "complete_episodes":
                    raise config.fail(
                        "workers.batch_mode",
                        f"picky_algo scores whole episodes: it needs complete_episodes, not {workers.batch_mode}",
                    )
                if workers.num_envs_per_worker != 1:
                    raise config.fail(
                        "workers.num_envs_per_worker",
                        f"picky_algo steps one env: expected 1, got {workers.num_envs_per_worker}",
                    )
                if workers.rollout_fragment_length != 1:
                    raise config.fail(
                        "workers.rollout_fragment_length",
                        f"picky_algo takes one step per sample (expected 1, got {workers.rollout_fragment_length})",
                    )
                super().setup(config)


        class Vague(PG):
            '''Refuses the short run's env count without saying which value it wants.'''

            name = "vague_algo"
            policies = {"torch": PG.policies["torch"]}
            action_spaces = frozenset({"discrete"})

            def setup(self, config):
                if config.workers.num_envs_per_worker != 3:
                    raise config.fail("workers.num_envs_per_worker", "vague_algo needs its own number of envs")
                super().setup(config)


        class Twin(PG):
            name = "twin"
            policies = {"torch": PG.policies["torch"]}
            action_spaces = frozenset({"discrete"})
    """,
    "chk_import_error": 'raise RuntimeError("boom from chk_import_error")\n',
    "chk_envs": """
        import numpy as np

        from rlgear.env import EnvAdapter, VectorEnv
        from rlgear.spaces import Box, Discrete
        from rlgear.timestep import StepType, TimeStep


        class NoFirstEnv(VectorEnv):
            '''Every step ends an episode, and the next step is LAST again instead of FIRST.'''

            def __init__(self, num_envs):
                self.num_envs = num_envs
                self.observation_space = Box(np.zeros(1), np.ones(1), np.float32)
                self.action_space = Discrete(2)

            def _ts(self, step_type, actions):
                n = self.num_envs
                return TimeStep(
                    step_type=np.full(n, step_type, dtype=np.int32),
                    reward=np.zeros(n, dtype=np.float32),
                    discount=np.full(n, 0.0 if step_type == StepType.LAST else 1.0, dtype=np.float32),
                    observation=np.zeros((n, 1), dtype=np.float32),
                    prev_action=np.asarray(actions, dtype=np.int64),
                    env_id=np.arange(n, dtype=np.int32),
                )

            def reset(self, seed=None):
                return self._ts(StepType.FIRST, np.zeros(self.num_envs))

            def step(self, actions):
                return self._ts(StepType.LAST, actions)


        class NoFirstAdapter(EnvAdapter):
            default_env = "nofirst"

            def make(self, name, num_envs, *, kwargs, vectorization="sync", horizon=None, worker_index=0):
                return NoFirstEnv(num_envs)


        class NoDefaultAdapter(EnvAdapter):
            '''Declares no default_env: the check needs --env-name (and then passes).'''

            def make(self, name, num_envs, *, kwargs, vectorization="sync", horizon=None, worker_index=0):
                from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter

                return GymnasiumAdapter().make(name, num_envs, kwargs=kwargs, horizon=horizon)


        class NoHorizonAdapter(EnvAdapter):
            '''Ignores the run's horizon.'''

            default_env = "CartPole-v1"

            def make(self, name, num_envs, *, kwargs, vectorization="sync", horizon=None, worker_index=0):
                from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter

                return GymnasiumAdapter().make(name, num_envs, kwargs=kwargs)


        class MultiAgentBrokenAdapter(EnvAdapter):
            '''A multi-agent env that ends a slot's episode while an agent is still going.'''

            default_env = "scripted"

            def make(self, name, num_envs, *, kwargs, vectorization="sync", horizon=None, worker_index=0):
                from tests.test_check_multi_agent_env import ScriptedEnv

                return ScriptedEnv("early_episode_end", num_envs)


        class MultiAgentNoHorizonAdapter(EnvAdapter):
            '''PettingZoo's relay env (6-step episodes) ignoring the run's horizon.'''

            default_env = "tests.pettingzoo_envs:RelayParallelEnv"

            def make(self, name, num_envs, *, kwargs, vectorization="sync", horizon=None, worker_index=0):
                from rlgear.plugins.envs.pettingzoo_env import PettingZooAdapter

                return PettingZooAdapter().make(name, num_envs, kwargs=kwargs)
    """,
    "chk_schedulers": """
        from rlgear.plugins.schedulers.fifo import FIFOScheduler
        from rlgear.scheduler import TrialScheduler


        class WrongDecision(TrialScheduler):
            def on_trial_result(self, runner, trial, result):
                return "KEEP_GOING"


        class SetState(TrialScheduler):
            '''Its state is a Python set: not JSON.'''

            def __init__(self, metric=None, mode="max"):
                super().__init__(metric, mode)
                self.seen = set()

            def on_trial_result(self, runner, trial, result):
                self.seen.add(trial.trial_id)
                return self.CONTINUE

            def get_state(self):
                return {"seen": self.seen}


        class TwinScheduler(FIFOScheduler):
            pass
    """,
    "chk_hooks": """
        import rlgear


        @rlgear.hookimpl
        def on_episode_ended(episode):  # no such hook: it would never run
            pass


        class ExtraArg:
            @rlgear.hookimpl
            def on_train_result(self, trainer, result, dashboard):  # no hook passes 'dashboard'
                pass


        extra_arg = ExtraArg()
    """,
    "chk_backend": """
        import numpy as np

        from rlgear.backend import Backend


        class ForgetfulBackend(Backend):
            framework = "numpy"

            def setup(self, num_threads, seed):
                self.rng = np.random.default_rng(seed)

            def reseed(self, seed):
                self.rng = np.random.default_rng(seed)

            def get_rng_state(self):
                return {"numpy": np.array(self.rng.bit_generator.state["state"]["state"] % 2**63, dtype=np.int64)}

            def set_rng_state(self, state):
                pass  # forgets to restore

            def version(self):
                return np.__version__
    """,
}


@pytest.fixture(scope="module")
def broken_plugins(tmp_path_factory):
    """The distribution 'chkplug' holding every broken plugin, importable in this process."""
    root = tmp_path_factory.mktemp("chkplug")
    info = root / "chkplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chkplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS).lstrip())
    for module, source in MODULES.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source).lstrip())
    sys.path.insert(0, str(root))
    forget_entry_points()
    yield root
    sys.path.remove(str(root))
    for module in MODULES:
        sys.modules.pop(module, None)
    forget_entry_points()


def forget_entry_points() -> None:
    """Make this process read entry points again: importlib's path caches, stevedore's per-group cache."""
    from stevedore import ExtensionManager

    importlib.invalidate_caches()
    ExtensionManager.ENTRY_POINT_CACHE.clear()


def test_an_undocumented_config_field_is_named_with_the_fix(broken_plugins):
    report = check_plugin("undocumented_algo")
    assert failed(report) == ["config fields documented"], report.describe_failures()
    documented = finding(report, "config fields documented")
    assert documented.message == "no help text for: extra_knob"
    assert "rlgear.config.schema.doc(" in documented.fix


def test_state_a_trainer_saves_but_does_not_restore_is_found(broken_plugins):
    report = check_plugin("forgetful_algo")
    assert failed(report) == ["checkpoint round trip (CartPole-v1, torch)"], report.describe_failures()
    round_trip = finding(report, "checkpoint round trip")
    assert "state['algorithm_state'] differs after restore in steps_done" in round_trip.message
    assert "set_algorithm_state" in round_trip.fix


def test_an_algorithm_that_never_learns_is_reported(broken_plugins):
    report = check_plugin("idle_algo")
    assert failed(report) == ["loss path (CartPole-v1, torch)"], report.describe_failures()
    assert "weights did not change" in finding(report, "loss path").message


def check_overrides_in(fix: str) -> dict:
    """The dict of the ``check_overrides = {...}`` a fix advises (Python source, as it says)."""
    import ast

    assert "check_overrides = {" in fix, fix
    source = fix.split("check_overrides = ", 1)[1]
    depth = 0
    for end, char in enumerate(source):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return ast.literal_eval(source[: end + 1])
    raise AssertionError(f"unbalanced dict in {fix!r}")


def test_settings_setup_refuses_are_advised_as_the_check_overrides_that_fix_them(broken_plugins, monkeypatch):
    report = check_plugin("picky_algo")
    assert failed(report) == ["short run (CartPole-v1, torch)"], report.describe_failures()
    refused = finding(report, "short run")
    assert "raised ConfigError: rlgear plugins --check: workers.batch_mode:" in refused.message
    assert "--debug" not in refused.fix
    advised = check_overrides_in(refused.fix)  # every key setup() refuses, one after the other
    assert advised == {
        "workers": {"batch_mode": "complete_episodes", "num_envs_per_worker": 1, "rollout_fragment_length": 1}
    }
    assert "(the short run's trainer builds with it)" in refused.fix
    monkeypatch.setattr(registry.load_algorithm("picky_algo"), "check_overrides", advised)
    assert check_plugin("picky_algo").ok  # the advice, declared as it is written, passes the check


def test_a_value_the_error_does_not_name_is_a_placeholder_at_its_key(broken_plugins):
    refused = finding(check_plugin("vague_algo"), "short run")
    assert not refused.ok
    assert 'check_overrides = {"workers": {"num_envs_per_worker": <value>}}' in refused.fix
    assert "fill in <value>: what workers.num_envs_per_worker must be" in refused.fix


def test_the_check_overrides_advice_is_on_the_fail_line_of_the_table(broken_plugins, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")
    assert cli.main(["plugins", "--check", "vague_algo"]) == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("│ short run (CartPole-v1")]
    assert " FAIL " in line and "vague_algo needs its own number of envs" in line
    fix = out.split(line, 1)[1]
    assert 'check_overrides = {"workers": {"num_envs_per_worker": <value>}}' in fix


def test_a_plugin_that_fails_to_import_is_one_finding_with_the_registry_error(broken_plugins, capsys):
    report = check_plugin("import_error_algo")
    assert [(f.check, f.ok) for f in report.findings] == [("import", False)]
    message = report.findings[0].message
    assert "algorithm 'import_error_algo' (chk_import_error:Algo) failed to import" in message
    assert "RuntimeError: boom from chk_import_error" in message
    assert cli.main(["plugins", "--check", "import_error_algo"]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "FAIL" in out.out


def test_an_env_that_breaks_the_timestep_rules_is_reported(broken_plugins, capsys):
    report = check_plugin("nofirst_env")
    assert failed(report) == ["TimeStep contract"]
    contract = finding(report, "TimeStep contract")
    assert "the step after a LAST must be FIRST, got LAST" in contract.message
    assert "the step after a LAST is the next FIRST" in contract.fix
    assert cli.main(["plugins", "--check", "nofirst_env"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_an_env_adapter_that_ignores_the_horizon_is_reported(broken_plugins):
    report = check_plugin("nohorizon_env")
    assert failed(report) == ["horizon"]
    assert "ran 4 steps without a LAST with horizon=3" in finding(report, "horizon").message
    assert "make(..., horizon=H)" in finding(report, "horizon").fix


def test_a_multi_agent_env_that_breaks_the_table_is_reported(broken_plugins, capsys):
    report = check_plugin("ma_broken_env")
    assert failed(report) == ["TimeStep contract"]
    contract = finding(report, "TimeStep contract")
    assert "check_multi_agent_env: step 2, env 1: episode_end while agent(s) ['y'] are still going" in (
        contract.message
    )
    assert "rlgear.env.MultiAgentTimeStep" in contract.fix
    assert cli.main(["plugins", "--check", "ma_broken_env"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_a_multi_agent_env_adapter_that_ignores_the_horizon_is_reported(broken_plugins):
    pytest.importorskip("pettingzoo", reason="needs PettingZoo: pip install 'rlgear[pettingzoo]'")
    report = check_plugin("ma_nohorizon_env")
    assert failed(report) == ["horizon"]
    assert "env 0 ran 3 steps without episode_end" in finding(report, "horizon").message


def test_the_pettingzoo_adapter_passes_on_simple_spread_and_connect_four():
    pytest.importorskip("pettingzoo", reason="needs PettingZoo: pip install 'rlgear[pettingzoo]'")
    pytest.importorskip("mpe2", reason="needs mpe2: pip install 'rlgear[pettingzoo]'")
    report = assert_plugin_ok("pettingzoo", "env")
    assert "'mpe2:simple_spread_v3' x 4, multi-agent (agent_0: Box(18,) -> Discrete(n=5)" in (
        finding(report, "make").message
    )
    assert "check_multi_agent_env" in finding(report, "TimeStep contract").message
    report = assert_plugin_ok("pettingzoo", "env", env_name="pettingzoo.classic.connect_four_v3")
    assert "spaces for 2 agents" in finding(report, "spaces").message and finding(report, "horizon").ok


def test_an_env_adapter_without_a_default_env_needs_env_name(broken_plugins):
    report = check_plugin("nodefault_env")
    assert failed(report) == ["env name"]
    assert (
        "--env-name" in finding(report, "env name").fix and "default_env" in finding(report, "env name").fix
    )
    assert check_plugin("nodefault_env", env_name="CartPole-v1").ok


def test_a_scheduler_decision_that_is_not_continue_pause_or_stop_is_reported(broken_plugins, capsys):
    report = check_plugin("wrong_decision", "scheduler")
    assert failed(report) == ["decisions"]
    assert "returned 'KEEP_GOING'" in finding(report, "decisions").message
    assert cli.main(["plugins", "--check", "wrong_decision"]) == 1
    capsys.readouterr()


def test_a_scheduler_state_that_is_not_json_is_reported(broken_plugins):
    report = check_plugin("set_state")
    assert failed(report) == ["state is JSON"]
    assert (
        "TypeError" in finding(report, "state is JSON").message
        and "set" in finding(report, "state is JSON").message
    )


def test_hooks_with_an_unknown_name_or_an_argument_no_hook_passes_are_reported(broken_plugins, capsys):
    typo = check_plugin("typo_hooks")
    assert "hook names" in failed(typo)
    assert (
        "unknown hook 'on_episode_ended'; did you mean 'on_episode_end'?"
        in finding(typo, "hook names").message
    )
    extra = check_plugin("extra_arg_hooks")
    assert failed(extra) == ["hook arguments"]
    message = finding(extra, "hook arguments").message
    assert (
        "on_train_result(trainer, result, dashboard): dashboard not passed (it gets trainer, result)"
        in message
    )
    assert cli.main(["plugins", "--check", "typo_hooks", "--kind", "hook"]) == 1
    capsys.readouterr()


def test_a_backend_whose_rng_state_does_not_round_trip_is_reported(broken_plugins, capsys):
    report = check_plugin("forgetful_backend")
    assert failed(report) == ["rng state round trip"], report.describe_failures()
    assert "checkpoints rely on it" in finding(report, "rng state round trip").fix
    assert cli.main(["plugins", "--check", "forgetful_backend"]) == 1
    capsys.readouterr()


def test_a_name_of_several_kinds_needs_kind(broken_plugins, capsys):
    with pytest.raises(PluginError) as raised:
        check_plugin("twin")
    message = str(raised.value)
    assert "several kinds of plugin (algorithm, scheduler)" in message
    assert "--kind algorithm or --kind scheduler" in message
    assert cli.main(["plugins", "--check", "twin"]) == 2
    assert "--kind" in capsys.readouterr().err
    assert check_plugin("twin", "scheduler").ok


def test_assert_plugin_ok_lists_every_failure_with_its_fix(broken_plugins):
    with pytest.raises(AssertionError) as raised:
        assert_plugin_ok("extra_arg_hooks")
    text = str(raised.value)
    assert text.startswith("hook 'extra_arg_hooks' (chkplug) breaks its contract:")
    assert "- hook arguments: " in text and "\n  fix: take only arguments the hook passes" in text


@pytest.fixture
def example_plugin(tmp_path):
    """examples/rlgear-example-plugin, importable with its entry points (its setup.cfg's), without pip."""
    import configparser

    example = Path(__file__).resolve().parents[1] / "examples" / "rlgear-example-plugin"
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(example / "setup.cfg")
    info = tmp_path / "rlgear_example_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlgear-example-plugin\nVersion: 0.1.0\n")
    groups = parser["options.entry_points"]
    (info / "entry_points.txt").write_text("".join(f"[{g}]\n{groups[g].strip()}\n" for g in groups))
    paths = [str(tmp_path), str(example / "src")]
    sys.path[:0] = paths
    forget_entry_points()
    yield
    for path in paths:
        sys.path.remove(path)
    for module in [m for m in sys.modules if m.startswith("rlgear_example")]:
        del sys.modules[module]
    forget_entry_points()


def test_the_worked_example_plugin_passes(example_plugin):
    report = assert_plugin_ok("simple_pg", backend="torch")
    assert report.package == "rlgear-example-plugin"
    assert finding(report, "checkpoint round trip (CartPole-v1, torch)").ok
    report = assert_plugin_ok("corridor")  # its adapter lists names = ("corridor",): the default env
    assert "'corridor' x 4" in finding(report, "make").message


# --------------------------------------------------------------------------- the command's output


def test_json_output_parses_and_holds_every_finding(broken_plugins, capsys):
    assert cli.main(["plugins", "--check", "wrong_decision", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (
        report["kind"] == "scheduler"
        and report["name"] == "wrong_decision"
        and report["package"] == "chkplug"
    )
    assert report["ok"] is False
    assert {"check", "ok", "message", "fix"} == set(report["findings"][0])
    assert [f["check"] for f in report["findings"] if not f["ok"]] == ["decisions"]


def test_json_output_of_a_passing_plugin(capsys):
    assert cli.main(["plugins", "--check", "fifo", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and all(f["ok"] for f in report["findings"])


def test_the_table_has_one_line_per_check_and_a_summary(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["plugins", "--check", "asha"]) == 0
    out = capsys.readouterr().out
    for rule in ("import", "construct", "decisions", "state is JSON", "state round trip"):
        assert any(line.startswith(f"│ {rule} ") and " ok " in line for line in out.splitlines()), out
    assert "all 6 checks passed" in out


def test_report_to_json_round_trips():
    report = check_plugin("fifo")
    assert json.loads(report.to_json()) == report.to_dict()
