"""Check one installed plugin against its contract: ``rlgear plugins --check NAME``.

Like gymnasium's ``check_env``, for every kind of plugin: the plugin is found
through its entry point (exactly as a run finds it), imported, and exercised
the way rlgear will use it. Every rule is one named :class:`Finding`; a rule
that breaks says what broke and how to fix it, and an exception raised by the
plugin's code is a finding too, never a traceback.

What each kind must do:

* **algorithm** (``rlgear.algorithms``): a :class:`~rlgear.trainer.Trainer`
  subclass with ``name`` and ``config_class`` (a dataclass deriving
  :class:`~rlgear.config.TrainingConfig`, every field documented with
  :func:`rlgear.config.schema.doc`); each declared backend's policy imports;
  ``capabilities()`` has the expected keys; two short iterations on CartPole-v1
  (discrete) or Pendulum-v1 (continuous) give complete results with finite
  ``learner/*`` statistics; ``learn_on_batch`` returns finite floats; and
  ``save()`` then ``restore()`` into a fresh trainer gives identical state.
* **env** adapter (``rlgear.envs``): builds the env ``--env-name`` names (or the
  adapter's :attr:`~rlgear.env.EnvAdapter.default_env`) and passes
  :func:`rlgear.testing.check_vector_env`; ``horizon`` truncates episodes.
* **scheduler** (``rlgear.schedulers``): builds with its default options, decides
  CONTINUE, PAUSE or STOP on synthetic trials whose metrics rise and fall, and
  its ``get_state()`` is JSON that restores a fresh instance to the same decisions.
* **hook** (``rlgear.hooks``): every ``@rlgear.hookimpl`` is a known hook and takes
  only arguments its hook specification passes.
* **backend** (``rlgear.backends``): a complete :class:`~rlgear.backend.Backend`
  whose ``setup``, RNG state round trip and ``version()`` work.

Authors call :func:`check_plugin` (or :func:`rlgear.testing.assert_plugin_ok`)
from their own tests once the package is installed (``pip install -e .``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import inspect
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgear.discovery import registry
from rlgear.errors import PluginError, closest

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
    def step(self, check: str, fix: str) -> Iterator[None]:
        """Run a block of plugin code; an exception it raises is recorded as ``check`` failing."""
        try:
            yield
        except _Failed:
            raise
        except _Broke as err:  # a rule the check itself found broken: say which, not just 'raised'
            self.add(err.check, False, str(err), fix)
            raise _Failed from err
        except Exception as err:
            self.add(check, False, f"raised {type(err).__name__}: {_one_line(err)}", fix)
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


# --------------------------------------------------------------------------- finding the plugin


def _infos(kind: str) -> list[registry.PluginInfo]:
    return registry.available_hooks() if kind == "hook" else registry.available(kind)


def find_plugin(name: str, kind: str | None = None) -> registry.PluginInfo:
    """The entry point ``name`` (``name@package`` to pick a package) of ``kind``, or of the one kind that has it.

    Raises :class:`~rlgear.errors.PluginError` for an unknown name (with the
    closest installed one) and for a name several kinds have when ``kind`` is not given.
    """
    if kind is not None and kind not in KINDS:
        raise PluginError(f"unknown plugin kind '{kind}'; kinds: {', '.join(KINDS)}")
    base, _, package = name.partition("@")
    kinds = [kind] if kind else list(KINDS)
    found = {k: [i for i in _infos(k) if i.name == base] for k in kinds}
    found = {k: infos for k, infos in found.items() if infos}
    if not found:
        candidates = {i.name: k for k in kinds for i in _infos(k)}
        match = closest(base, candidates)
        hint = f"; did you mean '{match}' ({candidates[match]})?" if match else ""
        what = f"{kind} '{base}'" if kind else f"plugin '{base}'"
        listed = "; ".join(f"{k}s: {', '.join(sorted({i.name for i in _infos(k)})) or 'none'}" for k in kinds)
        groups = ", ".join(_group_name(k) for k in kinds)
        raise PluginError(f"unknown {what}{hint} (installed {listed}; entry-point groups {groups})")
    if len(found) > 1:
        listed = ", ".join(found)
        raise PluginError(
            f"'{base}' is the name of several kinds of plugin ({listed}); say which with --kind "
            f"({' or '.join(f'--kind {k}' for k in found)})"
        )
    ((kind, infos),) = found.items()
    if package:
        norm = package.lower().replace("_", "-")
        chosen = [i for i in infos if i.package.lower().replace("_", "-") == norm]
        if not chosen:
            provided = ", ".join(i.package for i in infos)
            raise PluginError(
                f"{kind} '{name}': package '{package}' does not provide it (provided by: {provided})"
            )
        return chosen[0]
    own = [i for i in infos if i.package == "rlgear"]  # as registry.load: the built-in wins
    return own[0] if own else infos[0]


def _group_name(kind: str) -> str:
    return registry.HOOKS_GROUP if kind == "hook" else registry.GROUPS[kind]


def check_plugin(
    name: str,
    kind: str | None = None,
    *,
    env_name: str | None = None,
    backend: str | None = None,
    quiet: bool = True,
) -> CheckReport:
    """Check the installed plugin ``name`` against the contract of its kind.

    Args:
        name: the entry-point name (``name@package`` when several packages register it).
        kind: ``algorithm``, ``env``, ``backend``, ``scheduler`` or ``hook``; needed only
            when several kinds have a plugin called ``name``.
        env_name: the env an env adapter builds (default: the adapter's
            ``default_env``, else the first of its ``names``).
        backend: an algorithm's backend to check (its policy import and the short run);
            default: every backend it declares, the short run on torch when it has it.
        quiet: hide the warnings plugin code emits while it is exercised.

    Returns the :class:`CheckReport`; ``report.ok`` tells whether every check held.
    Raises :class:`~rlgear.errors.PluginError` only when ``name`` is not found
    or is ambiguous; everything the plugin does wrong is a finding.
    """
    info = find_plugin(name, kind)
    report = CheckReport(info.kind, info.name, info.package, version=info.version, target=info.target)
    checks = _Checks(report)
    load_name = f"{info.name}@{info.package}" if "@" in name or _shared(info) else info.name
    run = {
        "algorithm": lambda: _check_algorithm(checks, info, load_name, backend),
        "env": lambda: _check_env(checks, info, load_name, env_name),
        "backend": lambda: _check_backend(checks, info, load_name),
        "scheduler": lambda: _check_scheduler(checks, info, load_name),
        "hook": lambda: _check_hook(checks, info),
    }[info.kind]
    with warnings.catch_warnings(), contextlib.suppress(_Failed):
        if quiet:
            warnings.simplefilter("ignore")
        try:
            run()
        except _Failed:
            raise
        except Exception as err:  # plugin code that raised where no check expected it
            checks.add(
                "unexpected error",
                False,
                f"the check stopped: {type(err).__name__}: {_one_line(err)}",
                "the plugin raised outside the checks above (a class attribute or method of the wrong "
                "type?); call rlgear.testing.check_plugin in a Python session to see the traceback",
            )
    return report


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


# --------------------------------------------------------------------------- algorithm


def _check_algorithm(
    checks: _Checks, info: registry.PluginInfo, load_name: str, only_backend: str | None = None
) -> None:
    from rlgear.config import TrainingConfig

    cls = _load(checks, info, load_name)
    name = getattr(cls, "name", "")
    checks.add(
        "name",
        isinstance(name, str) and name == info.name,
        f"name = {name!r}" + ("" if name == info.name else f", the entry point is '{info.name}'"),
        f"set the class attribute name = '{info.name}' (the entry point's name: checkpoints and "
        "error messages use it)",
    )
    config_class = getattr(cls, "config_class", None)
    good_class = (
        isinstance(config_class, type)
        and dataclasses.is_dataclass(config_class)
        and issubclass(config_class, TrainingConfig)
    )
    checks.add(
        "config_class",
        good_class,
        f"config_class = {getattr(config_class, '__qualname__', config_class)!r}"
        + ("" if good_class else ": not a dataclass deriving rlgear.config.TrainingConfig"),
        "set config_class to a @dataclass subclass of rlgear.config.TrainingConfig holding your "
        "hyperparameters",
    )
    if good_class:
        _check_config_class(checks, config_class)
    _check_policies(checks, cls, only_backend)
    _check_capabilities(checks, cls)
    kinds = [k for k in ("discrete", "continuous") if k in getattr(cls, "action_spaces", ())]
    backend = _short_run_backend(checks, cls, only_backend)
    if not good_class or backend is None:
        return
    if not kinds:
        checks.add(
            "short run",
            False,
            "action_spaces declares neither 'discrete' nor 'continuous'",
            "set action_spaces = frozenset({'discrete'}) (and/or 'continuous')",
        )
        return
    with _no_entry_point_hooks():
        for kind in kinds:
            _short_run(checks, cls, load_name, SHORT_RUN_ENVS[kind], backend)


def _check_config_class(checks: _Checks, config_class: type) -> None:
    from rlgear.config.schema import build, field_help

    try:
        helps = field_help(config_class)
    except Exception as err:  # an annotation that does not resolve
        checks.add(
            "config fields documented",
            False,
            f"the fields' annotations do not resolve: {type(err).__name__}: {_one_line(err)}",
            "annotate every field with a type rlgear can check (int, float, str, bool, list[...], "
            "Literal[...], ... | None) and import the names the annotations use",
        )
        return
    missing = [name for name, (_, _, text) in helps.items() if not str(text).strip()]
    checks.add(
        "config fields documented",
        not missing,
        f"{len(helps)} fields, each with a help text"
        if not missing
        else f"no help text for: {', '.join(missing)}",
        "declare each field with rlgear.config.schema.doc('what it does', default), e.g. "
        f"{missing[0] if missing else 'x'}: float = doc('...', 0.5); the text is the users' documentation",
    )

    def fail(path: str, message: str) -> Exception:
        return ValueError(f"{path}: {message}")

    try:
        built = build(config_class, {}, "training", fail)
        if hasattr(built, "check"):
            built.check(fail)
    except Exception as err:
        checks.add(
            "config defaults",
            False,
            f"the defaults do not make a valid config: {type(err).__name__}: {_one_line(err)}",
            "give every field a default (doc('...', default)) that passes your check()",
        )
        return
    checks.add("config defaults", True, "a config with no training keys is valid")


def _check_policies(checks: _Checks, cls: type, only_backend: str | None) -> None:
    from rlgear.policy import Policy

    policies = getattr(cls, "policies", None)
    if not isinstance(policies, dict) or not policies:
        checks.add(
            "policies",
            False,
            f"policies = {policies!r}: no backend declared",
            "set policies = {'torch': 'your_pkg.torch_policy:YourPolicy'} (a string: the module is "
            "imported only when a run uses that backend)",
        )
        return
    bad = [b for b, target in policies.items() if not (isinstance(target, str) and ":" in target)]
    if bad:
        checks.add(
            "policies",
            False,
            f"policies[{bad[0]!r}] = {policies[bad[0]]!r}: expected 'module:Class'",
            "write each policy as a 'module:Class' string",
        )
        return
    for backend in sorted(policies):
        check = f"policy ({backend})"
        if only_backend is not None and backend != only_backend:
            checks.skip(check, f"only the {only_backend} backend was asked for")
            continue
        try:
            policy_cls = cls.policy_class(backend)
        except Exception as err:
            extra = registry.missing_extra(err)
            if extra:
                checks.skip(check, f"the {backend} backend is not installed (pip install 'rlgear[{extra}]')")
                continue
            checks.add(
                check,
                False,
                f"{policies[backend]} does not import: {_one_line(err)}",
                f"fix the module path or the import error in {policies[backend].partition(':')[0]}",
            )
            continue
        ok = isinstance(policy_cls, type) and issubclass(policy_cls, Policy)
        checks.add(
            check,
            ok,
            f"{policies[backend]}" + (" is a rlgear.policy.Policy" if ok else f" is {policy_cls!r}"),
            f"subclass the {backend} backend's base policy (e.g. rlgear.plugins.backends.torch.TorchPolicy)",
        )


def _check_capabilities(checks: _Checks, cls: type) -> None:
    try:
        caps = cls.capabilities()
    except Exception as err:
        checks.add(
            "capabilities",
            False,
            f"capabilities() raised {type(err).__name__}: {_one_line(err)}",
            "do not override capabilities(); set action_spaces, policies, multi_agent and recurrent",
        )
        return
    problems = []
    if not isinstance(caps, dict):
        problems.append(f"returned {type(caps).__name__}, not a dict")
    else:
        for key, tp in CAPABILITY_KEYS.items():
            if key not in caps:
                problems.append(f"no '{key}'")
            elif not isinstance(caps[key], tp):
                problems.append(f"'{key}' is {type(caps[key]).__name__}, expected {tp.__name__}")
    checks.add(
        "capabilities",
        not problems,
        ", ".join(f"{k}={v}" for k, v in caps.items()) if not problems else "; ".join(problems),
        f"capabilities() must return {{{', '.join(CAPABILITY_KEYS)}}}; the base class's does",
    )


def _short_run_backend(checks: _Checks, cls: type, only_backend: str | None) -> str | None:
    """The backend of the short run: torch when declared and installed, else the first installed one."""
    policies = getattr(cls, "policies", None)
    if not isinstance(policies, dict) or not policies:
        return None
    if only_backend is not None:
        if only_backend not in policies:
            checks.add(
                "backend",
                False,
                f"the algorithm does not declare the backend '{only_backend}' (it declares: "
                f"{', '.join(sorted(policies))})",
                f"add '{only_backend}' to policies, or check another backend",
            )
            return None
        policies = {only_backend: policies[only_backend]}
    installed = set(registry.names("backend"))
    missing = []
    for backend in sorted(policies, key=lambda b: (b != "torch", b)):
        if backend not in installed:
            missing.append(backend)
            continue
        try:
            registry.load_backend(backend)
            cls.policy_class(backend)
        except Exception as err:
            if registry.missing_extra(err):
                missing.append(backend)
            continue  # a broken policy import is already a finding
        return backend
    if len(missing) == len(policies):
        checks.skip("short run", f"no backend it declares is installed ({', '.join(missing)})")
    else:
        checks.skip("short run", "no installed backend's policy imports (see the policy findings)")
    return None


def _short_run_config(cls: type, load_name: str, env: str, backend: str, logdir: str) -> dict[str, Any]:
    fields = {f.name for f in dataclasses.fields(cls.config_class)}
    training = {k: v for k, v in SHORT_RUN_TRAINING.items() if k in fields}
    raw = {
        "algorithm": load_name,
        "backend": backend,
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_workers": 0, "num_envs_per_worker": 2},
        "training": training,
        "checkpoint": {"at_end": False},
        "logging": {"dir": logdir, "tensorboard": False, "progress": "none"},
    }
    for section, values in (getattr(cls, "check_overrides", None) or {}).items():  # what the algorithm needs
        if isinstance(values, dict) and isinstance(raw.get(section), dict):
            raw[section] = {**raw[section], **values}
        else:
            raw[section] = values
    return raw


def _short_run(checks: _Checks, cls: type, load_name: str, env: str, backend: str) -> None:
    from rlgear.config import RESULT_KEYS, resolve

    suffix = f" ({env}, {backend})"
    with tempfile.TemporaryDirectory(prefix="rlgear-check-") as tmp, contextlib.suppress(_Failed):
        raw = _short_run_config(cls, load_name, env, backend, tmp)
        with checks.step(
            "short run config" + suffix,
            "accept small values for the keys it overrides (training."
            + ", training.".join(raw["training"])
            + ") or make check() allow them; an algorithm whose check_config needs other values "
            "declares them in its check_overrides class attribute",
        ):
            config = resolve(raw, source="rlgear plugins --check", training_class=cls.config_class)
            cls.check_config(config)
        with checks.step(
            "short run" + suffix,
            "the trainer failed to build or to train: run the same config with "
            "'rlgear train' and --debug to see the traceback",
        ):
            trainer = cls(config)
            calls = _record_learning(trainer.policy)
            try:
                results = [trainer.train() for _ in range(SHORT_RUN_ITERATIONS)]
                checkpoint = trainer.save(os.path.join(tmp, "checkpoint"))
                expected = trainer.get_state()
            finally:
                trainer.stop()
        checks.add(
            "short run" + suffix,
            True,
            f"{SHORT_RUN_ITERATIONS} iterations, {results[-1].get('timesteps_total')} env steps",
        )
        _check_results(checks, results, suffix, RESULT_KEYS)
        _check_loss_path(checks, calls, suffix)
        with checks.step(
            "checkpoint round trip" + suffix,
            "save everything your trainer needs in get_algorithm_state / get_algorithm_arrays and "
            "load it in set_algorithm_state / set_algorithm_arrays",
        ):
            fresh = cls(config)
            try:
                fresh.restore(checkpoint)
                restored = fresh.get_state()
            finally:
                fresh.stop()
        difference = _state_difference(expected, restored)
        checks.add(
            "checkpoint round trip" + suffix,
            difference is None,
            "a fresh trainer restored from save() has identical weights and state"
            if difference is None
            else difference,
            "save everything your trainer needs in get_algorithm_state / get_algorithm_arrays and "
            "load it in set_algorithm_state / set_algorithm_arrays; the policy's get_state/set_state "
            "must round-trip weights and optimizer state",
        )


def _record_learning(policy: Any) -> dict[str, list[Any]]:
    """Wrap the policy's learning entry points so the check sees what they return."""
    calls: dict[str, list[Any]] = {"learn_on_batch": [], "compute_gradients": []}
    for method in calls:
        original = getattr(policy, method, None)
        if original is None:
            continue

        def wrapper(*args: Any, _original: Callable = original, _method: str = method, **kwargs: Any) -> Any:
            out = _original(*args, **kwargs)
            calls[_method].append(out)
            return out

        setattr(policy, method, wrapper)
    return calls


def _check_results(checks: _Checks, results: list[dict[str, Any]], suffix: str, keys: tuple) -> None:
    problems = []
    for i, result in enumerate(results, start=1):
        missing = [k for k in keys if k not in result]
        if missing:
            problems.append(f"iteration {i} has no {', '.join(missing)}")
        if result.get("training_iteration") != i:
            problems.append(f"iteration {i} reports training_iteration {result.get('training_iteration')!r}")
    if not problems and not results[-1]["timesteps_total"] > 0:
        problems.append("timesteps_total is still 0: the training step sampled nothing")
    checks.add(
        "result keys" + suffix,
        not problems,
        "every iteration has " + ", ".join(keys[:3]) + ", ..." if not problems else "; ".join(problems),
        "return learner statistics from training_step() and leave train() to the base class (it adds "
        "the counters); count env steps with the rollout ops (synchronous_parallel_sample)",
    )
    learner = {k: v for k, v in results[-1].items() if k.startswith("learner/")}
    bad = {k: v for k, v in learner.items() if not _finite_number(v)}
    skipped = learner.get("learner/num_nonfinite_updates", 0)
    if not bad and _finite_number(skipped) and skipped > 0:
        bad["learner/num_nonfinite_updates"] = skipped  # NaN losses were caught and skipped: still a bug
    if not learner:
        message = "no learner/* statistics: training_step() returned nothing"
    elif bad:
        message = "not finite numbers: " + ", ".join(f"{k}={v!r}" for k, v in list(bad.items())[:5])
        if "learner/num_nonfinite_updates" in bad:
            message = f"{skipped:g} updates had a non-finite loss or gradient and were skipped"
    else:
        message = f"{len(learner)} learner/* statistics, all finite ({', '.join(sorted(learner)[:4])} ...)"
    checks.add(
        "learner stats finite" + suffix,
        bool(learner) and not bad,
        message,
        "training_step() must return the learner's statistics as {name: float} (e.g. what "
        "policy.learn_on_batch returns); a NaN means the loss diverged on the first updates",
    )


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool) and math.isfinite(value)


def _check_loss_path(checks: _Checks, calls: dict[str, list[Any]], suffix: str) -> None:
    fix = (
        "the policy's loss must return (loss, {name: scalar}) and learn_on_batch a {name: float} dict "
        "(the backend's base policy does this around your loss())"
    )
    if calls["learn_on_batch"]:
        problems = []
        for out in calls["learn_on_batch"]:
            if not isinstance(out, dict):
                problems.append(f"returned {type(out).__name__}, not a dict")
                break
            bad = {k: v for k, v in out.items() if not (isinstance(k, str) and _finite_number(v))}
            if bad:
                problems.append(", ".join(f"{k}={v!r}" for k, v in list(bad.items())[:5]))
                break
        checks.add(
            "loss path" + suffix,
            not problems,
            f"learn_on_batch returned finite floats in {len(calls['learn_on_batch'])} calls"
            if not problems
            else "learn_on_batch: " + "; ".join(problems),
            fix,
        )
        return
    if calls["compute_gradients"]:
        problems = []
        for out in calls["compute_gradients"]:
            grads, stats = out
            if not all(np.all(np.isfinite(np.asarray(g))) for g in grads.values()):
                problems.append("a gradient is not finite")
            if not all(isinstance(k, str) and _finite_number(v) for k, v in stats.items()):
                problems.append(f"stats not finite floats: {stats!r}")
        checks.add(
            "loss path" + suffix,
            not problems,
            f"compute_gradients returned finite gradients and stats in {len(calls['compute_gradients'])} calls"
            if not problems
            else "compute_gradients: " + "; ".join(problems[:2]),
            fix,
        )
        return
    checks.add(
        "loss path" + suffix,
        False,
        "the training step never called policy.learn_on_batch (or compute_gradients) in "
        f"{SHORT_RUN_ITERATIONS} iterations",
        "learn in training_step() through the policy: self.policy.learn_on_batch(batch) or "
        "rlgear.execution.rollout_ops.train_one_step(self.policy, self.workers, batch); a replay-based "
        "algorithm must start learning within a few hundred env steps when learning_starts is small",
    )


def _state_difference(expected: tuple, restored: tuple) -> str | None:
    """What differs between two ``Trainer.get_state()`` results (None: nothing)."""
    (arrays_a, state_a), (arrays_b, state_b) = expected, restored
    if set(arrays_a) != set(arrays_b):
        missing = sorted(set(arrays_a) ^ set(arrays_b))
        return f"the restored trainer's arrays differ in names: {', '.join(missing[:5])}"
    for key in sorted(arrays_a):
        a, b = np.asarray(arrays_a[key]), np.asarray(arrays_b[key])
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            return f"'{key}' differs after restore (save() then restore() must give the same values)"
    for section in ("counters", "policy_meta", "algorithm_state"):
        a, b = _jsonable(state_a.get(section)), _jsonable(state_b.get(section))
        if section == "counters":  # a restore counts itself (restore_epoch): the rest must match
            a, b = ({k: v for k, v in c.items() if k != "restore_epoch"} for c in (a or {}, b or {}))
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) else []
            return f"state['{section}'] differs after restore" + (
                f" in {', '.join(keys[:5])}" if keys else ""
            )
    return None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- env adapter


def _check_env(checks: _Checks, info: registry.PluginInfo, load_name: str, env_name: str | None) -> None:
    from rlgear.env import VectorEnv
    from rlgear.spaces import Box, Discrete
    from rlgear.testing import ContractError, check_vector_env

    cls = _load(checks, info, load_name)
    with checks.step("instantiate", "an EnvAdapter is built with no arguments: give __init__ none"):
        adapter = cls()
    checks.add("instantiate", True, f"{cls.__qualname__}()")
    reason = getattr(cls, "check_skip_reason", "")
    if reason:
        checks.skip("TimeStep contract", reason)
        return
    kwargs: dict[str, Any] = {}
    if env_name is None:  # the adapter's own choice, with the kwargs it declares for it
        kwargs = dict(getattr(cls, "default_env_kwargs", {}) or {})
        env_name = getattr(cls, "default_env", None)
        names = getattr(cls, "names", None)
        if env_name is None and isinstance(names, list | tuple) and names:
            env_name = names[0]
    if not env_name:
        checks.add(
            "env name",
            False,
            "no env to build: the adapter declares no default_env and no --env-name was given",
            "set the class attribute default_env = 'an-env-name' on the adapter, or pass --env-name",
        )
        return
    fix = (
        "make() must return a rlgear.VectorEnv; raise rlgear.errors.ConfigError naming the key for bad input"
    )
    with checks.step("make", fix):
        env = adapter.make(env_name, 4, kwargs=kwargs, vectorization="sync", horizon=None, worker_index=0)
    if not isinstance(env, VectorEnv):
        checks.add("make", False, f"make() returned {type(env).__name__}, not a rlgear.VectorEnv", fix)
        return
    spaces = f"observations {_space(env.observation_space)}, actions {_space(env.action_space)}"
    checks.add("make", True, f"'{env_name}' x 4: {spaces}")
    spaces_ok = (
        isinstance(env.observation_space, Box | Discrete)
        and isinstance(env.action_space, Box | Discrete)
        and getattr(env, "num_envs", None) == 4
    )
    checks.add(
        "spaces",
        spaces_ok,
        "rlgear.spaces Box/Discrete spaces, num_envs 4"
        if spaces_ok
        else f"observation_space {type(env.observation_space).__name__}, action_space "
        f"{type(env.action_space).__name__}, num_envs {getattr(env, 'num_envs', None)!r}",
        "set num_envs and use rlgear.spaces.Box / Discrete for observation_space and action_space",
    )
    if not spaces_ok:
        env.close()
        return
    with checks.step(
        "TimeStep contract",
        "follow rlgear.env.VectorEnv: reset() gives FIRST (reward 0, discount 1); LAST ends every "
        "episode (discount 0 terminated, 1 truncated); the step after a LAST is the next FIRST, "
        "reward 0, prev_action 0",
    ):
        try:
            counts = check_vector_env(env, steps=300, seed=0)
        except ContractError as err:
            raise _Broke("TimeStep contract", f"check_vector_env: {err}") from err
    checks.add(
        "TimeStep contract",
        True,
        f"check_vector_env: {counts['steps']} steps, {counts['episodes_terminated']} terminated and "
        f"{counts['episodes_truncated']} truncated episodes",
    )
    _check_horizon(checks, adapter, env_name, kwargs)


def _space(space: Any) -> str:
    shape = getattr(space, "shape", "?")
    return f"{type(space).__name__}(n={space.n})" if hasattr(space, "n") else f"{type(space).__name__}{shape}"


def _check_horizon(checks: _Checks, adapter: Any, env_name: str, kwargs: dict[str, Any]) -> None:
    from rlgear.testing import random_actions
    from rlgear.timestep import StepType

    horizon = 3
    fix = (
        "make(..., horizon=H) must end every episode after at most H steps with LAST and discount 1 "
        "(a truncation), whatever the env's own time limit"
    )
    with checks.step("horizon", fix):
        env = adapter.make(env_name, 2, kwargs=kwargs, vectorization="sync", horizon=horizon, worker_index=0)
        try:
            rng = np.random.default_rng(0)
            ts = env.reset(seed=0)
            length = np.zeros(env.num_envs, dtype=np.int64)
            for _ in range(4 * horizon):
                ts = env.step(random_actions(env, rng))
                length = np.where(ts.step_type == StepType.FIRST, 0, length + 1)
                too_long = np.flatnonzero(length > horizon)
                if too_long.size:
                    raise _Broke(
                        "horizon",
                        f"env {too_long[0]} ran {horizon + 1} steps without a LAST with horizon={horizon}",
                    )
        finally:
            env.close()
    checks.add("horizon", True, f"horizon={horizon} truncates every episode")


# --------------------------------------------------------------------------- scheduler

#: Synthetic trials: result ``episode_return_mean`` at iteration t (nan at t=1: no episode finished yet).
_CURVES = {
    "rising_fast": lambda t: 10.0 * t,
    "rising_slow": lambda t: 2.0 * t,
    "flat": lambda t: 5.0,
    "falling": lambda t: 50.0 - 4.0 * t,
}
_PHASE_A, _PHASE_B = range(1, 9), range(9, 17)
_METRIC = "episode_return_mean"


class _Snapshot:
    """What ``save_trial_to_memory`` hands a scheduler (the attributes PBT reads)."""

    _ids = iter(range(10**9))

    def __init__(self, trial_id: str, training_iteration: int, time_attr_value: float):
        self.trial_id = trial_id
        self.training_iteration = training_iteration
        self.time_attr_value = time_attr_value
        self.key = next(self._ids)


class _FakeRunner:
    """A trial runner (:class:`rlgear.scheduler.TrialRunnerView`) with no trainers behind it."""

    def __init__(self, trials: list[Any]):
        self.trials = trials
        self.events: list[dict[str, Any]] = []

    def get_trials(self) -> list[Any]:
        return list(self.trials)

    def save_trial_to_memory(self, trial: Any, time_attr_value: float) -> _Snapshot:
        return _Snapshot(trial.trial_id, int(trial.last_result.get("training_iteration", 0)), time_attr_value)

    def exploit_trial(self, trial: Any, checkpoint: Any, new_config: dict[str, Any]) -> bool:
        trial.config = copy.deepcopy(new_config)
        return True

    def log_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def _result(curve: str, t: int) -> dict[str, Any]:
    value = float("nan") if t == 1 else float(_CURVES[curve](t))
    return {
        "training_iteration": t,
        "timesteps_total": 1000 * t,
        "time_total_s": float(t),
        "episodes_total": 10 * t,
        _METRIC: value,
        "episode_return_min": value,
        "episode_return_max": value,
    }


def _make_scheduler(cls: type) -> Any:
    """The scheduler as ``rlgear tune`` builds it: default options, plus the ones it declares for the check."""
    from rlgear.config.schema import build

    options = copy.deepcopy(dict(getattr(cls, "check_options", {}) or {}))
    options_class = getattr(cls, "options_class", None)
    if options_class is not None:

        def fail(path: str, message: str) -> Exception:
            return ValueError(f"{path}: {message}")

        built = build(options_class, options, "tune.scheduler_options", fail)
        if hasattr(built, "check"):
            built.check(fail)
        options = {f.name: getattr(built, f.name) for f in dataclasses.fields(built)}
    return cls(metric=_METRIC, mode="max", **options)


def _simulate(scheduler: Any, runner: _FakeRunner, iterations: range, finish: bool) -> list[tuple]:
    """Drive the trials as the trial runner does; returns every decision made, in order."""
    from rlgear.scheduler import Trial, TrialStatus

    decisions: list[tuple] = []
    valid = (scheduler.CONTINUE, scheduler.PAUSE, scheduler.STOP)

    def start_trials() -> None:
        for _ in range(len(runner.trials)):
            chosen = scheduler.choose_trial_to_run(runner)
            if chosen is None:
                return
            if not (isinstance(chosen, Trial) and any(chosen is t for t in runner.trials)):
                raise _Broke(
                    "choose_trial_to_run", f"returned {chosen!r}, not one of runner.get_trials() or None"
                )
            decisions.append(("choose", chosen.trial_id))
            if chosen.status not in (TrialStatus.PENDING, TrialStatus.PAUSED):
                return
            chosen.status = TrialStatus.RUNNING

    start_trials()
    for t in iterations:
        for trial in runner.trials:
            if trial.status != TrialStatus.RUNNING:
                continue
            result = _result(trial.config["curve"], t)
            trial.last_result = result
            if finish and t == iterations[-1]:
                scheduler.on_trial_complete(runner, trial, result)
                trial.status = TrialStatus.TERMINATED
                decisions.append((trial.trial_id, t, "complete"))
                continue
            decision = scheduler.on_trial_result(runner, trial, result)
            if decision not in valid:
                raise _Broke(
                    "decisions",
                    f"on_trial_result returned {decision!r} for {trial.trial_id} at iteration {t}; "
                    "expected CONTINUE, PAUSE or STOP",
                )
            decisions.append((trial.trial_id, t, decision))
            if decision == scheduler.PAUSE:
                trial.status = TrialStatus.PAUSED
            elif decision == scheduler.STOP:
                trial.status = TrialStatus.TERMINATED
                scheduler.on_trial_remove(runner, trial)
        start_trials()
    return decisions


def _new_trials() -> list[Any]:
    from rlgear.scheduler import Trial

    return [
        Trial({"curve": curve, "training": {"lr": 0.001 * (i + 1)}, "seed": i}, trial_id=f"check_{curve}")
        for i, curve in enumerate(_CURVES)
    ]


def _check_scheduler(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    cls = _load(checks, info, load_name)
    build_fix = (
        "rlgear tune builds the scheduler as cls(metric=..., mode=..., **scheduler_options): accept "
        "metric and mode and give every option a default (an options_class dataclass is checked and "
        "passed); a scheduler that needs options declares them in check_options"
    )
    with checks.step("construct", build_fix):
        scheduler = _make_scheduler(cls)
    declared = getattr(cls, "check_options", {}) or {}
    checks.add(
        "construct",
        True,
        f"{cls.__qualname__}(metric='{_METRIC}', mode='max') with default options"
        + (f" and its check_options ({', '.join(declared)})" if declared else ""),
    )
    runner = _FakeRunner(_new_trials())
    for trial in runner.trials:
        with checks.step("on_trial_add", "on_trial_add(runner, trial) must accept any new trial"):
            scheduler.on_trial_add(runner, trial)
    decide_fix = (
        "return self.CONTINUE, self.PAUSE or self.STOP from on_trial_result; choose_trial_to_run "
        "returns one of runner.get_trials() (PENDING or PAUSED) or None"
    )
    with checks.step("decisions", decide_fix):
        first = _simulate(scheduler, runner, _PHASE_A, finish=False)
    made = [d[2] for d in first if d[0] != "choose"]
    checks.add(
        "decisions",
        True,
        f"{len(made)} results on rising, flat and falling trials: "
        + ", ".join(f"{made.count(d)} {d}" for d in dict.fromkeys(made)),
    )
    state_fix = (
        "get_state() must return JSON-able data (dicts, lists, str, numbers) that set_state() turns "
        "back into the same scheduler"
    )
    with checks.step("state is JSON", state_fix):
        saved = json.dumps(scheduler.get_state())
    checks.add("state is JSON", True, f"get_state() is {len(saved)} bytes of JSON")
    trials_b = copy.deepcopy(runner.trials)
    with checks.step("state round trip", state_fix):
        restored = _make_scheduler(cls)
        runner_b = _FakeRunner(trials_b)
        for trial in trials_b:
            restored.on_trial_add(runner_b, trial)
        restored.set_state(json.loads(saved))
    with checks.step("decisions", decide_fix):
        expected = _simulate(scheduler, runner, _PHASE_B, finish=True)
    with checks.step("state round trip", state_fix):
        got = _simulate(restored, runner_b, _PHASE_B, finish=True)
    differ = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    if differ is None and len(expected) != len(got):
        differ = min(len(expected), len(got))
    checks.add(
        "state round trip",
        differ is None,
        f"a fresh instance given set_state(get_state()) made the same {len(expected)} decisions"
        if differ is None
        else f"after set_state, decision {differ} differs: expected {_at(expected, differ)}, "
        f"got {_at(got, differ)}",
        state_fix,
    )


def _at(decisions: list[tuple], i: int) -> str:
    return repr(decisions[i]) if i < len(decisions) else "nothing"


# --------------------------------------------------------------------------- hook


def _check_hook(checks: _Checks, info: registry.PluginInfo) -> None:
    import pluggy

    from rlgear import hookspecs
    from rlgear.discovery import hooks

    module_name, _, attr = info.target.partition(":")
    try:
        plugin = (
            registry.resolve_object(info.target, f"hook plugin '{info.name}'")
            if attr
            else importlib.import_module(module_name)
        )
    except Exception as err:
        message = registry.describe_load_error("hook plugin", info.name, info.target, err)
        checks.add(
            "import",
            False,
            message,
            f"make '{info.target}' importable: run python -c \"import {module_name}\" to see the traceback",
        )
        return
    checks.add("import", True, f"{info.target} (package {info.package} {info.version})")
    manager = pluggy.PluginManager("rlgear")
    manager.add_hookspecs(hookspecs)
    marked = [a for a in dir(plugin) if a.startswith("on_") and manager.parse_hookimpl_opts(plugin, a)]
    unmarked = [
        a for a in dir(plugin)
        if a in hooks.HOOK_NAMES and a not in marked and callable(getattr(plugin, a, None))
    ]  # fmt: skip
    checks.add(
        "hook implementations",
        bool(marked) and not unmarked,
        f"implements {', '.join(marked)}"
        if marked and not unmarked
        else f"{', '.join(unmarked)} not marked with @rlgear.hookimpl: never called"
        if unmarked
        else "no function marked with @rlgear.hookimpl",
        "decorate each hook function with @rlgear.hookimpl (hooks: " + ", ".join(hooks.HOOK_NAMES) + ")",
    )
    unknown = hooks.unknown_hooks(manager, plugin)
    checks.add(
        "hook names",
        not unknown,
        "every hook is in rlgear.hookspecs"
        if not unknown
        else "; ".join(f"unknown hook '{a}'{hint}" for a, hint in unknown),
        "rename it to one of " + ", ".join(hooks.HOOK_NAMES),
    )
    problems = []
    bound_to_class = []
    for name in marked:
        if name not in hooks.HOOK_NAMES:
            continue
        spec_args = _spec_args(getattr(hookspecs, name))
        impl = getattr(plugin, name)
        params = _required_args(impl)
        if isinstance(plugin, type) and params[:1] == ["self"] and not inspect.ismethod(impl):
            bound_to_class.append(name)
            params = params[1:]
        extra = [p for p in params if p not in spec_args]
        if extra:
            problems.append(
                f"{name}({', '.join(params)}): {', '.join(extra)} not passed (it gets {', '.join(spec_args)})"
            )
    checks.add(
        "hook arguments",
        not problems,
        "each takes a subset of its hookspec's arguments" if not problems else "; ".join(problems),
        "take only arguments the hook passes, by these names (any subset, any order)",
    )
    if bound_to_class:
        checks.add(
            "hook object",
            False,
            f"the entry point is the class {plugin.__qualname__}; its {', '.join(bound_to_class)} need "
            "an instance (self)",
            "point the entry point at a module of @rlgear.hookimpl functions or at an instance of the class",
        )
        return
    if problems or unknown:
        return
    try:
        hooks.make_plugin_manager([plugin], autoload=False)
    except Exception as err:
        checks.add("registers", False, _one_line(err), "fix what pluggy reports above")
        return
    checks.add("registers", True, "a plugin manager accepts it (pluggy validated every hookimpl)")


def _spec_args(func: Callable) -> list[str]:
    return [p.name for p in inspect.signature(func).parameters.values()]


def _required_args(func: Callable) -> list[str]:
    """Arguments pluggy passes by name: positional ones without a default (as pluggy counts them)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]


# --------------------------------------------------------------------------- backend


def _check_backend(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    cls = _load(checks, info, load_name)
    abstract = sorted(getattr(cls, "__abstractmethods__", ()))
    checks.add(
        "abstract methods",
        not abstract,
        "implements setup, get_rng_state, set_rng_state"
        if not abstract
        else f"not implemented: {', '.join(abstract)}",
        "implement every abstract method of rlgear.backend.Backend",
    )
    if abstract:
        return
    with checks.step("instantiate", "a Backend is built with no arguments: give __init__ none"):
        backend = cls()
    checks.add("instantiate", True, f"{cls.__qualname__}()")
    with checks.step("setup", "setup(num_threads, seed) sets the framework's threads and seeds its RNG"):
        backend.setup(1, 0)
    checks.add("setup", True, "setup(1, 0)")
    rng_fix = (
        "get_rng_state() returns {name: numpy array} and set_rng_state(that) puts the framework's RNG "
        "back exactly (checkpoints rely on it)"
    )
    with checks.step("rng state round trip", rng_fix):
        state = backend.get_rng_state()
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()
        ):
            raise TypeError(f"get_rng_state() returned {type(state).__name__} {_short_repr(state)}")
        saved = {k: v.copy() for k, v in state.items()}
        backend.reseed(12345)  # move the RNG on, then put it back
        backend.set_rng_state(saved)
        again = backend.get_rng_state()
        backend.setup(1, 0)
    same = set(again) == set(saved) and all(np.array_equal(again[k], saved[k]) for k in saved)
    checks.add(
        "rng state round trip",
        same,
        f"{', '.join(saved) or 'no RNG state'}: set_rng_state(get_rng_state()) restores it"
        if same
        else "after reseed() and set_rng_state(saved), get_rng_state() differs from saved",
        rng_fix,
    )
    with checks.step("version", "version() returns the framework's version as a string ('' if unknown)"):
        version = backend.version()
    checks.add(
        "version",
        isinstance(version, str),
        f"version() = {version!r}",
        "version() returns the framework's version as a string ('' if unknown)",
    )
    _check_policy_base(checks, info, cls)


def _check_policy_base(checks: _Checks, info: registry.PluginInfo, cls: type) -> None:
    """The base class algorithms' policies subclass, when the backend's module exports one."""
    from rlgear.policy import Policy

    module = importlib.import_module(info.target.partition(":")[0])
    bases = sorted(
        f"{module.__name__}.{attr}"
        for attr, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, Policy) and obj is not Policy
    )
    if bases:
        checks.add("base policy class", True, f"{module.__name__} exports {', '.join(bases)}")
    else:
        checks.add(
            "base policy class",
            True,
            f"{module.__name__} exports no rlgear.policy.Policy subclass (the Backend contract does not "
            "require one; algorithms' policies then subclass rlgear.policy.Policy directly)",
        )


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."
