"""The checks of an algorithm plugin (``rlgear plugins --check``)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.discovery import registry
from rlgear.discovery.check import overrides
from rlgear.discovery.check._base import (
    CAPABILITY_KEYS,
    SHORT_RUN_ENVS,
    SHORT_RUN_ITERATIONS,
    SHORT_RUN_TRAINING,
    _Checks,
    _Failed,
    _jsonable,
    _load,
    _no_entry_point_hooks,
    _one_line,
)
from rlgear.errors import ConfigError

#: Where the short run's config comes from, in its error messages.
SHORT_RUN_SOURCE = "rlgear plugins --check"


def _check_algorithm(
    checks: _Checks, info: registry.PluginInfo, load_name: str, only_backend: str | None = None
) -> None:
    from rlgear.config import BaseTrainingConfig

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
        and issubclass(config_class, BaseTrainingConfig)
    )
    checks.add(
        "config_class",
        good_class,
        f"config_class = {getattr(config_class, '__qualname__', config_class)!r}"
        + ("" if good_class else ": not a dataclass deriving rlgear.config.TrainingConfig"),
        "set config_class to a @dataclass subclass of rlgear.config.TrainingConfig (or of "
        "rlgear.config.BaseTrainingConfig, for an algorithm without gradient steps) holding your "
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
    if "*" in policies:  # framework-free: runs under any backend name, loading no backend plugin
        return only_backend or "torch"
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
        trained = []  # set once the trainer is built: a ConfigError after that came from train()
        with checks.step(
            "short run config" + suffix,
            _refused_settings_fix(
                cls,
                raw,
                trained,
                "accept small values for the keys it overrides (training."
                + ", training.".join(raw["training"])
                + ") or make check() allow them; an algorithm whose check_config needs other values "
                "declares them in its check_overrides class attribute",
            ),
        ):
            config = resolve(raw, source=SHORT_RUN_SOURCE, training_class=cls.config_class)
            cls.check_config(config)
        with checks.step(
            "short run" + suffix,
            _refused_settings_fix(
                cls,
                raw,
                trained,
                "the trainer failed to build or to train: run the same config with "
                "'rlgear train' and --debug to see the traceback",
            ),
        ):
            trainer = cls(config)
            trained.append(True)
            calls = _record_learning(trainer.policy)
            weights_before = {k: np.array(v, copy=True) for k, v in trainer.policy.get_weights().items()}
            try:
                results = [trainer.train() for _ in range(SHORT_RUN_ITERATIONS)]
                weights_moved = _weights_moved(weights_before, trainer.policy.get_weights())
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
        _check_loss_path(checks, calls, suffix, weights_moved)
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


def _refused_settings_fix(
    cls: type, raw: dict[str, Any], trained: list[bool], otherwise: str
) -> Callable[[Exception], str]:
    """The fix of a failed short-run step: for a ConfigError (the algorithm refused the short run's
    settings), the check_overrides class attribute that gets past it; else ``otherwise``."""

    def fix(err: Exception) -> str:
        if not isinstance(err, ConfigError):
            return otherwise
        sections = overrides.config_sections(cls.config_class)
        return overrides.advice(
            err,
            getattr(cls, "check_overrides", None) or {},
            sections,
            lambda path: overrides.current_value(raw, path, sections),
            lambda extra: _try_short_run(cls, raw, extra, train=bool(trained)),
        )

    return fix


def _try_short_run(cls: type, raw: dict[str, Any], extra: dict[str, Any], train: bool) -> Exception | None:
    """What building the short run's trainer (and one iteration, with ``train``) raises once the
    flat ``{key path: value}`` of ``extra`` is merged into ``raw``; None when nothing is raised."""
    from rlgear.config import resolve

    try:
        config = resolve(
            overrides.merge(raw, overrides.nested(extra)),
            source=SHORT_RUN_SOURCE,
            training_class=cls.config_class,
        )
        cls.check_config(config)
        trainer = cls(config)
        try:
            if train:
                trainer.train()
        finally:
            trainer.stop()
    except Exception as err:
        return err
    return None


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


def _weights_moved(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> bool:
    return before.keys() != after.keys() or any(not np.array_equal(before[k], after[k]) for k in before)


def _check_loss_path(checks: _Checks, calls: dict[str, list[Any]], suffix: str, weights_moved: bool) -> None:
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
    if weights_moved:  # a gradient-free algorithm (CEM, ES) sets the weights it chose itself
        checks.add(
            "loss path" + suffix,
            True,
            "no learn_on_batch or compute_gradients call, but the policy's weights changed "
            f"in {SHORT_RUN_ITERATIONS} iterations (a gradient-free update)",
        )
        return
    checks.add(
        "loss path" + suffix,
        False,
        "the training step never called policy.learn_on_batch (or compute_gradients), and the policy's "
        f"weights did not change, in "
        f"{SHORT_RUN_ITERATIONS} iterations",
        "learn in training_step() through the learner: self.learner.update(batch) or "
        "rlgear.distributed.rollout_ops.train_one_step(self.learner, self.workers, batch); a replay-based "
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
    for section in ("counters", "policy_metas", "algorithm_state"):
        a, b = _jsonable(state_a.get(section)), _jsonable(state_b.get(section))
        if section == "counters":  # a restore counts itself (restore_epoch): the rest must match
            a, b = ({k: v for k, v in c.items() if k != "restore_epoch"} for c in (a or {}, b or {}))
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) else []
            return f"state['{section}'] differs after restore" + (
                f" in {', '.join(keys[:5])}" if keys else ""
            )
    return None
