"""What every kind's checks share: the report, the finding recorder, loading the plugin."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rlgear.discovery import registry
from rlgear.errors import PluginError

#: Every kind of plugin, in the order ``rlgear plugins`` lists them.
KINDS = (*registry.GROUPS, "hook")

#: The env of the short run, by action-space kind.
SHORT_RUN_ENVS = {"discrete": "CartPole-v1", "continuous": "Pendulum-v1"}

#: Small values for the short run, applied to the fields the algorithm's config class has.
SHORT_RUN_TRAINING = {
    "train_batch_size": 64,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 1,
    "min_env_steps_per_iteration": 64,
    "min_time_s_per_iteration": 0.0,
    "evaluation_interval": 0,
    # replay-based algorithms: learn from the first iterations, from a small buffer
    "learning_starts": 64,
    "buffer_size": 1000,
    "env_steps_per_training_step": 64,
    "target_network_update_freq": 64,
    "epsilon_timesteps": 128,
}

#: The iterations of the short run.
SHORT_RUN_ITERATIONS = 2

#: What ``Trainer.capabilities()`` returns: key -> expected type.
CAPABILITY_KEYS = {
    "discrete": bool,
    "continuous": bool,
    "backends": list,
    "multi_agent": bool,
    "recurrent": bool,
}


@dataclass
class Finding:
    """One rule of the contract, checked: its name, whether it holds, what was seen, how to fix it."""

    check: str
    ok: bool
    message: str
    fix: str = ""


@dataclass
class CheckReport:
    """Everything :func:`check_plugin` found about one plugin."""

    kind: str
    name: str
    package: str
    findings: list[Finding] = field(default_factory=list)
    version: str = ""
    target: str = ""

    @property
    def ok(self) -> bool:
        """True when every finding holds."""
        return all(f.ok for f in self.findings)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "package": self.package,
            "version": self.version,
            "target": self.target,
            "ok": self.ok,
            "findings": [dataclasses.asdict(f) for f in self.findings],
        }

    def to_json(self) -> str:
        """The report as a JSON document (what ``rlgear plugins --check NAME --json`` prints)."""
        return json.dumps(self.to_dict(), indent=2)

    def describe_failures(self) -> str:
        """The failed checks, one per line with its fix (the message of ``assert_plugin_ok``)."""
        lines = [f"{self.kind} '{self.name}' ({self.package}) breaks its contract:"]
        for f in self.failures:
            lines.append(f"- {f.check}: {f.message}" + (f"\n  fix: {f.fix}" if f.fix else ""))
        return "\n".join(lines)


class _Checks:
    """Collects findings; ``step`` turns an exception from plugin code into a failed finding."""

    def __init__(self, report: CheckReport):
        self.report = report

    def add(self, check: str, ok: bool, message: str, fix: str = "") -> bool:
        self.report.findings.append(Finding(check, bool(ok), message, "" if ok else fix))
        return bool(ok)

    def skip(self, check: str, why: str) -> None:
        self.add(check, True, f"not checked: {why}")

    @contextlib.contextmanager
    def step(self, check: str, fix: str | Callable[[Exception], str]) -> Iterator[None]:
        """Run a block of plugin code; an exception it raises is recorded as ``check`` failing.

        ``fix`` may be a function of that exception, for advice that depends on what was raised.
        """
        try:
            yield
        except _Failed:
            raise
        except _Broke as err:  # a rule the check itself found broken: say which, not just 'raised'
            self.add(err.check, False, str(err), fix if isinstance(fix, str) else fix(err))
            raise _Failed from err
        except Exception as err:
            text = fix if isinstance(fix, str) else fix(err)
            self.add(check, False, f"raised {type(err).__name__}: {_one_line(err)}", text)
            raise _Failed from err


class _Failed(Exception):
    """A step failed and was recorded; the checks that depend on it are not run."""


class _Broke(Exception):
    """Raised inside a step when plugin code broke the rule ``check`` (the message says how)."""

    def __init__(self, check: str, message: str):
        super().__init__(message)
        self.check = check


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 600 else text[:597] + "..."


def _infos(kind: str) -> list[registry.PluginInfo]:
    return registry.available_hooks() if kind == "hook" else registry.available(kind)


def _shared(info: registry.PluginInfo) -> bool:
    return sum(other.name == info.name for other in _infos(info.kind)) > 1


def _load(checks: _Checks, info: registry.PluginInfo, load_name: str) -> Any:
    """Import the entry point (one finding), then check the class it names (another)."""
    try:
        obj = registry.load(info.kind, load_name)
    except PluginError as err:
        extra = registry.missing_extra(err)
        fix = (
            f"pip install 'rlgear[{extra}]'"
            if extra
            else f"make '{info.target}' importable: run python -c \"import {info.target.partition(':')[0]}\" "
            "to see the traceback, and check the entry point in the package's metadata"
        )
        checks.add("import", False, str(err), fix)
        raise _Failed from err
    checks.add("import", True, f"{info.target} (package {info.package} {info.version})")
    module, base_name = registry.BASE_CLASSES[info.kind]
    base = getattr(importlib.import_module(module), base_name)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        checks.add(
            "type",
            False,
            f"the entry point resolves to {obj!r}, not a subclass of rlgear.{base_name}",
            f"point the entry point at your {base_name} subclass ('module:Class')",
        )
        raise _Failed
    checks.add("type", True, f"{obj.__module__}.{obj.__qualname__} subclasses rlgear.{base_name}")
    return obj


@contextlib.contextmanager
def _no_entry_point_hooks() -> Iterator[None]:
    """Other packages' hooks must not change what an algorithm's check sees."""
    from rlgear.discovery.hooks import AUTOLOAD_ENV_VAR

    old = os.environ.get(AUTOLOAD_ENV_VAR)
    os.environ[AUTOLOAD_ENV_VAR] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(AUTOLOAD_ENV_VAR, None)
        else:
            os.environ[AUTOLOAD_ENV_VAR] = old


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."
