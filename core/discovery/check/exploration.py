"""The checks of an exploration plugin (``rlgear plugins --check``; contract: :mod:`rlgear.exploration`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from typing import Any

import numpy as np

from rlgear.discovery import registry
from rlgear.discovery.check._base import _Broke, _Checks, _load

#: The backends whose modules are checked, with the module each needs.
FRAMEWORKS = {"torch": "torch", "tf": "tensorflow"}
ROWS = 16


def _fail(path: str, message: str) -> Exception:
    return ValueError(f"{path}: {message}")


def _rows(obs_dim: int, value_mode: bool) -> Any:
    from rlgear import exploration as xp
    from rlgear.sample_batch import SampleBatch

    rng = np.random.default_rng(0)
    columns = {
        SampleBatch.OBS: rng.normal(size=(ROWS, obs_dim)).astype(np.float32),
        SampleBatch.ACTIONS: rng.integers(0, 2, ROWS),
        xp.NEXT_OBS: rng.normal(size=(ROWS, obs_dim)).astype(np.float32),
        xp.INTRINSIC_REWARDS: rng.random(ROWS).astype(np.float32),
        xp.INTRINSIC_RETURNS: rng.random(ROWS).astype(np.float32),
    }
    if value_mode:
        columns[xp.INTRINSIC_VALUE_TARGETS] = rng.normal(size=ROWS).astype(np.float32)
    return SampleBatch(columns)


def _check_exploration(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    from rlgear import exploration as xp

    cls = _load(checks, info, load_name)
    options_class = cls.config_class
    ok = (
        dataclasses.is_dataclass(options_class)
        and isinstance(options_class, type)
        and issubclass(options_class, xp.ExplorationConfig)
    )
    checks.add(
        "config class",
        ok,
        f"{options_class!r} is a dataclass deriving ExplorationConfig" if ok else f"got {options_class!r}",
        "set config_class to a dataclass subclassing rlgear.exploration.ExplorationConfig",
    )
    if not ok:
        return
    undocumented = [f.name for f in dataclasses.fields(options_class) if not f.metadata.get("help")]
    checks.add(
        "documented options",
        not undocumented,
        "every option has a help text" if not undocumented else f"no help text: {', '.join(undocumented)}",
        "declare each option with rlgear.config.schema.doc(help, default)",
    )
    with checks.step(
        "default options", "the options class builds with its defaults and passes its check(fail)"
    ):
        options = options_class(name=info.name)
        options.check(_fail)
    checks.add("default options", True, f"{options_class.__name__}(name={info.name!r}) passes check()")
    algorithms = dict(cls.algorithms) if isinstance(cls.algorithms, dict) else {}
    modes_ok = bool(algorithms) and all(m in (xp.REWARD_MODE, xp.VALUE_MODE) for m in algorithms.values())
    checks.add(
        "algorithms",
        modes_ok,
        f"{algorithms}" if modes_ok else f"algorithms = {cls.algorithms!r}",
        f"set algorithms = {{algorithm name: '{xp.REWARD_MODE}' or '{xp.VALUE_MODE}'}} (value mode needs a "
        "GAE algorithm: ppo, a2c)",
    )
    installed = set(registry.names("algorithm"))
    unknown = sorted(set(algorithms) - installed)
    checks.add(
        "algorithms installed",
        not unknown,
        "every declared algorithm is installed" if not unknown else f"not installed: {', '.join(unknown)}",
        "declare algorithms by their registry names (rlgear plugins lists them)",
    )
    value_mode = xp.VALUE_MODE in algorithms.values()
    weight_names: dict[str, set[str]] = {}
    for backend in sorted(cls.modules):
        framework = FRAMEWORKS.get(backend)
        if framework and importlib.util.find_spec(framework) is None:
            checks.skip(f"{backend} module", f"{framework} is not installed")
            continue
        weight_names[backend] = _check_module(checks, cls, backend, options, value_mode)
    if len(weight_names) > 1:
        names = list(weight_names.values())
        same = all(n == names[0] for n in names)
        checks.add(
            "neutral weight names",
            same,
            "every backend's module has the same weight names" if same else f"they differ: {weight_names}",
            "name weights alike on every backend, so a checkpoint moves between them",
        )


def _check_module(checks: _Checks, cls: type, backend: str, options: Any, value_mode: bool) -> set[str]:
    from rlgear import exploration as xp
    from rlgear.spaces import Box, Discrete

    check = f"{backend} module"
    with checks.step(check, f"modules['{backend}'] is 'module:Class' of an ExplorationModule subclass"):
        module_class = cls.module_class(backend)
        if not (isinstance(module_class, type) and issubclass(module_class, xp.ExplorationModule)):
            raise _Broke(check, f"{module_class!r} does not subclass rlgear.exploration.ExplorationModule")
    obs_dim = 4
    space, actions = Box(np.full(obs_dim, -1.0), np.full(obs_dim, 1.0)), Discrete(2)
    with checks.step(check, "the module is built from (observation space, action space, options, seed)"):
        module = module_class(space, actions, options, 0)
        fresh = module_class(space, actions, options, 1)
    rows = _rows(obs_dim, value_mode)
    with checks.step(check, "intrinsic_rewards(obs, actions, next_obs) returns float32 [N], finite"):
        rewards = np.asarray(module.intrinsic_rewards(rows["obs"], rows["actions"], rows[xp.NEXT_OBS]))
        if rewards.shape != (ROWS,) or rewards.dtype != np.float32 or not np.isfinite(rewards).all():
            raise _Broke(
                check, f"intrinsic_rewards gave {rewards.dtype} {rewards.shape}, expected float32 ({ROWS},)"
            )
        scale = float(module.reward_scale())
        if not (math.isfinite(scale) and scale > 0):
            raise _Broke(check, f"reward_scale() is {scale}, expected a positive number")
        if value_mode:
            values = np.asarray(module.intrinsic_values(rows["obs"]))
            if values.shape != (ROWS,) or not np.isfinite(values).all():
                raise _Broke(check, f"intrinsic_values gave shape {values.shape}, expected ({ROWS},), finite")
    with checks.step(check, "learn(rows) returns {name: finite float}"):
        stats = module.learn(rows)
        bad = {k: v for k, v in stats.items() if not (isinstance(v, float) and math.isfinite(v))}
        if bad:
            raise _Broke(check, f"learn() stats that are not finite floats: {bad}")
    with checks.step(
        check, "set_weights(get_weights()) and set_state(get_state()) restore the module exactly"
    ):
        fresh.set_weights(module.get_weights())
        fresh.set_state(module.get_state())
        module.learn(rows)
        fresh.learn(rows)
        mine, theirs = module.get_weights(), fresh.get_weights()
        if set(mine) != set(theirs) or not all(np.allclose(mine[k], theirs[k], rtol=1e-5) for k in mine):
            raise _Broke(check, "after a weights and state round trip the same rows train another way")
    checks.add(check, True, f"{type(module).__name__}: rewards, learn, weights and state round trip")
    return set(module.get_weights())
