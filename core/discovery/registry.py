"""Plugin discovery through entry points (stevedore), lazy by design.

Listing names reads entry-point metadata only; a plugin module is imported
when a run uses it (or when ``rlgear plugins`` asks every plugin for its
details). Errors are written for the user:

* an unknown name lists what is installed and the closest match;
* a plugin whose optional dependency is missing says what to install;
* a plugin that fails to import is reported with its error, and the other
  plugins keep working.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import warnings
from dataclasses import dataclass
from typing import Any

from rlgear.errors import PluginError, did_you_mean

GROUPS = {
    "algorithm": "rlgear.algorithms",
    "env": "rlgear.envs",
    "backend": "rlgear.backends",
    "scheduler": "rlgear.schedulers",
    "searcher": "rlgear.searchers",
    "logger": "rlgear.loggers",
    "exploration": "rlgear.exploration",
}
HOOKS_GROUP = "rlgear.hooks"

# Optional heavy dependencies and the extra that installs each.
EXTRAS = {
    "torch": "torch",
    "tensorflow": "tf",
    "ray": "ray",
    "optuna": "optuna",
    "mlflow": "mlflow",
    "wandb": "wandb",
    "pettingzoo": "pettingzoo",
}

_loaded: dict[tuple[str, str], Any] = {}
#: (dist-info folder, its mtime) -> (distribution name, version): see _package_of.
_packages: dict[tuple[str, int], tuple[str, str]] = {}


@dataclass(frozen=True)
class PluginInfo:
    """What the metadata says about one entry point (nothing imported)."""

    kind: str
    name: str
    target: str  # "module:attr"
    package: str
    version: str


def _group(kind: str) -> str:
    try:
        return GROUPS[kind]
    except KeyError:
        raise ValueError(f"unknown plugin kind {kind!r}; kinds: {', '.join(GROUPS)}") from None


def _package_of(dist: importlib.metadata.Distribution | None) -> tuple[str, str]:
    """``(name, version)`` of the distribution that registers an entry point, ``("?", "?")`` without one.

    Reading a distribution's metadata parses its METADATA file (an email-format parse, about 1 ms),
    and rlgear alone registers some fifty entry points, each of which used to parse it twice: that was
    over half the time of ``rlgear plugins`` and part of every run's start. So each file is parsed
    once per process and kept, keyed by its path and modification time (a reinstall is seen).
    """
    if dist is None:
        return "?", "?"
    path = getattr(dist, "_path", None)  # PathDistribution's folder; other kinds are not cached
    key = None
    if path is not None:
        try:
            key = (str(path), os.stat(path).st_mtime_ns)
        except OSError:
            key = None
    if key is not None and key in _packages:
        return _packages[key]
    metadata = dist.metadata
    package = (metadata["Name"] or "?", metadata["Version"] or "?")
    if key is not None:
        _packages[key] = package
    return package


def available(kind: str) -> list[PluginInfo]:
    """Installed plugins of one kind, from entry-point metadata (no imports)."""
    group = _group(kind)
    out = []
    for ep in importlib.metadata.entry_points(group=group):
        package, version = _package_of(getattr(ep, "dist", None))
        out.append(PluginInfo(kind=kind, name=ep.name, target=ep.value, package=package, version=version))
    return sorted(out, key=lambda p: p.name)


def names(kind: str) -> list[str]:
    return sorted({p.name for p in available(kind)})


def missing_extra(err: BaseException | None) -> str | None:
    """The rlgear extra (``tf``, ``ray`` ...) whose absence made this import fail, if that is the cause."""
    while err is not None:
        if isinstance(err, ModuleNotFoundError) and err.name and err.name.split(".")[0] in EXTRAS:
            return EXTRAS[err.name.split(".")[0]]
        err = err.__cause__
    return None


def missing_dependency_hint(err: BaseException) -> str | None:
    """'pip install ...' advice when an import failed on a missing module, or what else to check."""
    if isinstance(err, ModuleNotFoundError) and err.name:
        top = err.name.split(".")[0]
        if top in EXTRAS:
            return f"it needs {top}, which is not installed: pip install 'rlgear[{EXTRAS[top]}]'"
        if top != err.name and importlib.util.find_spec(top) is not None:
            # The package is there, a module inside it is not: installing it again won't help.
            return (
                f"the module '{err.name}' does not exist, although the package '{top}' is installed "
                "(a wrong entry point, or a file missing from that package's build)"
            )
        return (
            f"it needs the module '{top}', which is not installed (pip install the package that provides it)"
        )
    return None


def describe_load_error(kind: str, name: str, target: str, err: BaseException) -> str:
    hint = missing_dependency_hint(err)
    if hint:
        return f"{kind} '{name}' cannot be loaded: {hint}"
    return f"{kind} '{name}' ({target}) failed to import: {type(err).__name__}: {err}"


def load(kind: str, name: str) -> Any:
    """Import and return the object behind plugin ``name`` of ``kind`` (cached).

    ``name@package`` picks the plugin of that distribution when several
    packages register the same name (see :func:`_choose`).
    """
    key = (kind, name)
    if key in _loaded:
        return _loaded[key]
    name, _, package = name.partition("@")
    group = _group(kind)
    installed = names(kind)
    if name not in installed:
        listed = ", ".join(installed) if installed else "none"
        raise PluginError(
            f"unknown {kind} '{name}'{did_you_mean(name, installed)} "
            f"(installed {kind}s: {listed}; entry-point group {group})"
        )
    same_name = [info for info in available(kind) if info.name == name]
    if package or len(same_name) > 1:
        info = _choose(kind, name, package, same_name)
        try:
            obj = importlib.metadata.EntryPoint(info.name, info.target, group).load()
        except Exception as err:
            raise PluginError(describe_load_error(kind, name, info.target, err)) from err
        _loaded[key] = obj
        return obj
    from stevedore import DriverManager

    def on_failure(_manager, entry_point, err):
        raise PluginError(describe_load_error(kind, name, entry_point.value, err)) from err

    try:
        manager = DriverManager(
            namespace=group,
            name=name,
            invoke_on_load=False,
            on_load_failure_callback=on_failure,
        )
    except PluginError:
        raise
    except Exception as err:  # stevedore's own errors (e.g. several packages claim the name)
        raise PluginError(f"{kind} '{name}' cannot be loaded: {err}") from err
    obj = manager.driver
    _loaded[key] = obj
    return obj


def _choose(kind: str, name: str, package: str, candidates: list[PluginInfo]) -> PluginInfo:
    """The one plugin of several packages that register ``name``.

    With ``package`` given (``ppo@rlgear-thirdparty``), that package's. Without,
    rlgear's own built-in wins, with a warning naming the others and how to pick
    them: installing a package must not break a built-in. Several third-party
    packages and no choice is an error naming them all.
    """
    described = ", ".join(f"{c.package} ({c.target})" for c in candidates)
    if package:
        chosen = [
            c for c in candidates if c.package.lower().replace("_", "-") == package.lower().replace("_", "-")
        ]
        if not chosen:
            raise PluginError(
                f"{kind} '{name}@{package}': package '{package}' does not provide the {kind} '{name}' "
                f"(provided by: {described or 'no installed package'})"
            )
        return chosen[0]
    own = [c for c in candidates if c.package == "rlgear"]
    others = [c.package for c in candidates if c.package != "rlgear"]
    if own:
        warnings.warn(
            f"{kind} '{name}' is also provided by {', '.join(others)}; using rlgear's built-in "
            f"(pick another with '{name}@{others[0]}', e.g. algorithm: {name}@{others[0]})",
            RuntimeWarning,
            stacklevel=3,
        )
        return own[0]
    raise PluginError(
        f"{kind} '{name}' is provided by several packages: {described}; pick one as "
        f"'{name}@<package>' (e.g. '{name}@{candidates[0].package}')"
    )


# kind -> (module, class) every plugin of that kind must subclass
BASE_CLASSES = {
    "algorithm": ("rlgear.trainer", "Trainer"),
    "env": ("rlgear.env", "EnvAdapter"),
    "backend": ("rlgear.backend", "Backend"),
    "scheduler": ("rlgear.scheduler", "TrialScheduler"),
    "searcher": ("rlgear.searcher", "Searcher"),
    "logger": ("rlgear.run.logger", "Logger"),
    "exploration": ("rlgear.exploration", "Exploration"),
}


def load_typed(kind: str, name: str) -> type:
    """``load`` plus a check that the plugin is a subclass of its kind's base class."""
    module, base_name = BASE_CLASSES[kind]
    base = getattr(importlib.import_module(module), base_name)
    cls = load(kind, name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(
            f"{kind} '{name}' must resolve to a subclass of rlgear.{base_name}, got {cls!r}; "
            "fix the entry point in the plugin's package metadata"
        )
    return cls


def load_algorithm(name: str):
    """The Trainer subclass registered as algorithm ``name``."""
    return load_typed("algorithm", name)


def load_backend(name: str):
    return load_typed("backend", name)


def load_env_adapter(name: str):
    return load_typed("env", name)


def load_scheduler(name: str):
    return load_typed("scheduler", name)


def load_searcher(name: str):
    return load_typed("searcher", name)


def load_logger(name: str):
    """The Logger subclass registered as logger ``name`` (``logging.loggers``)."""
    return load_typed("logger", name)


def load_exploration(name: str):
    """The Exploration subclass registered as exploration plugin ``name`` (``exploration.name``)."""
    return load_typed("exploration", name)


@dataclass
class PluginReport:
    """One plugin as ``rlgear plugins`` shows it: metadata, plus what importing it said."""

    info: PluginInfo
    obj: Any = None
    error: str | None = None
    #: the rlgear extra to install when the plugin is an optional part not installed (``tf``)
    missing_extra: str | None = None


def available_hooks() -> list[PluginInfo]:
    """Installed ``rlgear.hooks`` plugins, from metadata."""
    out = []
    for ep in importlib.metadata.entry_points(group=HOOKS_GROUP):
        package, version = _package_of(getattr(ep, "dist", None))
        out.append(PluginInfo("hook", ep.name, ep.value, package, version))
    return sorted(out, key=lambda p: p.name)


def inspect_all() -> dict[str, list[PluginReport]]:
    """Import every installed plugin and check its type, collecting failures instead of raising."""
    out: dict[str, list[PluginReport]] = {}
    for kind in GROUPS:
        reports = []
        infos = available(kind)
        for info in infos:
            shared = sum(other.name == info.name for other in infos) > 1  # show each package's own
            try:
                name = f"{info.name}@{info.package}" if shared else info.name
                reports.append(PluginReport(info, obj=load_typed(kind, name)))
            except PluginError as err:
                reports.append(PluginReport(info, error=str(err), missing_extra=missing_extra(err)))
        out[kind] = reports
    hooks = []
    for info in available_hooks():
        try:
            module_name, _, attr = info.target.partition(":")
            hooks.append(
                PluginReport(
                    info,
                    obj=resolve_object(info.target, f"hook plugin '{info.name}'")
                    if attr
                    else importlib.import_module(module_name),
                )
            )
        except Exception as err:
            hooks.append(
                PluginReport(info, error=describe_load_error("hook plugin", info.name, info.target, err))
            )
    out["hook"] = hooks
    return out


def resolve_object(spec: str, what: str) -> Any:
    """Import ``'module:attr'`` (a user's custom model, env class or function)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what}: expected 'module:Name', got '{spec}'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise PluginError(f"{what}: cannot import module '{module_name}': {err}") from err
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"{what}: module '{module_name}' has no attribute '{attr}'") from None
    return obj
