"""The checks of a hook plugin (``rlgear plugins --check``)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from rlgear.discovery import registry
from rlgear.discovery.check._base import (
    _Checks,
    _one_line,
)


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
