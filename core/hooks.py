"""The plugin manager that calls the hooks of :mod:`rlgear.hookspecs`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pluggy

from rlgear import hookspecs
from rlgear.registry import HOOKS_GROUP

hookimpl = pluggy.HookimplMarker("rlgear")

AUTOLOAD_ENV_VAR = "RLGEAR_DISABLE_PLUGIN_AUTOLOAD"


def make_plugin_manager(plugins: Iterable[Any] = (), autoload: bool | None = None) -> pluggy.PluginManager:
    """A plugin manager with the hook specs, entry-point hooks and ``plugins`` registered.

    ``autoload`` defaults to on unless ``RLGEAR_DISABLE_PLUGIN_AUTOLOAD`` is set.
    """
    manager = pluggy.PluginManager("rlgear")
    manager.add_hookspecs(hookspecs)
    if autoload is None:
        autoload = not os.environ.get(AUTOLOAD_ENV_VAR)
    if autoload:
        manager.load_setuptools_entrypoints(HOOKS_GROUP)
    for plugin in plugins:
        if manager.is_registered(plugin):
            continue
        manager.register(plugin)
    return manager
