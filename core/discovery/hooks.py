"""The plugin manager that calls the hooks of :mod:`rlgear.hookspecs`."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import sys
from collections.abc import Iterable
from typing import Any

import pluggy

from rlgear import hookspecs
from rlgear.discovery.registry import HOOKS_GROUP, describe_load_error
from rlgear.errors import PluginError, RunError, did_you_mean
from rlgear.hookspecs import hookimpl as hookimpl  # re-exported: the old home of the marker

AUTOLOAD_ENV_VAR = "RLGEAR_DISABLE_PLUGIN_AUTOLOAD"
HOOK_NAMES = sorted(name for name in dir(hookspecs) if name.startswith("on_"))


def _load_entry_point_hooks(manager: pluggy.PluginManager) -> None:
    """Register every ``rlgear.hooks`` entry point; one that fails to import is skipped, with a warning."""
    for ep in importlib.metadata.entry_points(group=HOOKS_GROUP):
        if manager.get_plugin(ep.name) is not None or manager.is_blocked(ep.name):
            continue
        try:
            plugin = ep.load()
        except Exception as err:
            message = describe_load_error("hook plugin", ep.name, ep.value, err)
            print(f"rlgear: warning: {message}; the other plugins still run", file=sys.stderr)
            continue
        _register(manager, plugin, ep.name)


def unknown_hooks(manager: pluggy.PluginManager, plugin: Any) -> list[tuple[str, str]]:
    """``(attribute, did-you-mean hint)`` for each ``@hookimpl`` of ``plugin`` that names no hook.

    A misspelt hook would silently never run; registration refuses it and
    ``rlgear plugins --check`` reports it.
    """
    return [
        (attr, did_you_mean(attr, HOOK_NAMES))
        for attr in dir(plugin)
        if attr.startswith("on_") and attr not in HOOK_NAMES and manager.parse_hookimpl_opts(plugin, attr)
    ]


def _register(manager: pluggy.PluginManager, plugin: Any, name: str | None = None) -> None:
    if inspect.isclass(plugin):
        # An entry point (or hooks=[...]) naming a class: its hooks are methods, so pluggy would call
        # them unbound and fail at the first call. Use an instance, as a module-level object would be.
        try:
            plugin = plugin()
        except Exception as err:
            label = name or plugin.__name__
            raise PluginError(
                f"hook plugin '{label}' is a class and could not be built without arguments "
                f"({type(err).__name__}: {err}); register a module or an instance instead"
            ) from err
    for attr, hint in unknown_hooks(manager, plugin):  # refuse a misspelt hook, naming the closest one
        label = name or type(plugin).__name__
        raise PluginError(f"hook plugin '{label}' implements unknown hook '{attr}'{hint}")
    manager.register(plugin, name=name)


def autoload_disabled() -> bool:
    """``RLGEAR_DISABLE_PLUGIN_AUTOLOAD`` set to a true value (1, true, yes, on); ``0``, ``false``, ``no``,
    ``off`` or empty keep autoload on."""
    return os.environ.get(AUTOLOAD_ENV_VAR, "").strip().lower() not in ("", "0", "false", "no", "off")


def make_plugin_manager(plugins: Iterable[Any] = (), autoload: bool | None = None) -> pluggy.PluginManager:
    """A plugin manager with the hook specs, entry-point hooks and ``plugins`` registered.

    ``autoload`` defaults to on unless ``RLGEAR_DISABLE_PLUGIN_AUTOLOAD`` is set.
    """
    manager = pluggy.PluginManager("rlgear")
    manager.add_hookspecs(hookspecs)
    if autoload is None:
        autoload = not autoload_disabled()
    if autoload:
        _load_entry_point_hooks(manager)
    for plugin in plugins:
        if not manager.is_registered(plugin):
            _register(manager, plugin)
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as err:
        raise PluginError(f"hook plugin: {err}") from err
    return manager


def call(manager: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call every plugin's ``hook_name``; a plugin that raises stops the run with a :class:`HookError`.

    Why: a hook is someone else's code running inside every run, built-in
    algorithms included. When one raises, the user needs to know which plugin
    and package it was, and how to run without it, not a traceback from pluggy.
    """
    try:
        getattr(manager.hook, hook_name)(**kwargs)
    except HookError:
        raise
    except Exception as err:
        raise HookError(_describe_failure(manager, hook_name, err)) from err


class HookError(RunError):
    """A hook plugin raised while a run called it."""


def _describe_failure(manager: pluggy.PluginManager, hook_name: str, err: BaseException) -> str:
    impls = getattr(manager.hook, hook_name).get_hookimpls()
    codes = {impl.function.__code__: impl for impl in impls if hasattr(impl.function, "__code__")}
    culprit = None
    tb = err.__traceback__
    while tb is not None:  # the deepest frame that is a hook implementation raised
        culprit = codes.get(tb.tb_frame.f_code, culprit)
        tb = tb.tb_next
    if culprit is None:
        who = "a hook plugin"
    else:
        package = _package_of(culprit.plugin_name) or type(culprit.plugin).__module__.split(".")[0]
        who = f"hook plugin '{culprit.plugin_name}' (package {package})"
    return (
        f"{who} raised in {hook_name}: {type(err).__name__}: {err}. To run without entry-point hook "
        f"plugins, set {AUTOLOAD_ENV_VAR}=1 (or uninstall that package)"
    )


def _package_of(plugin_name: str) -> str | None:
    for ep in importlib.metadata.entry_points(group=HOOKS_GROUP):
        if ep.name == plugin_name and getattr(ep, "dist", None) is not None:
            return ep.dist.metadata["Name"]
    return None
