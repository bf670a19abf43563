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
* **searcher** (``rlgear.searchers``): builds with its default options on a small
  space, suggests values inside it, takes completions, and its ``get_state()`` is
  JSON from which a fresh instance continues (``tune.num_samples`` trials in all).
* **logger** (``rlgear.loggers``): builds with its default options and logs a short
  run in a temporary run folder (results with ``None``, NaN and strings, a
  checkpoint), then a resume, without touching the run's own files; nothing is sent
  (``WANDB_MODE=offline``, MLflow's local store).
* **hook** (``rlgear.hooks``): every ``@rlgear.hookimpl`` is a known hook and takes
  only arguments its hook specification passes.
* **exploration** (``rlgear.exploration``): an :class:`~rlgear.exploration.Exploration` subclass
  whose options class derives ``ExplorationConfig`` (every field documented, the defaults pass its
  ``check``), whose ``algorithms`` are installed ones with a valid mode, and whose module on each
  installed backend gives float32 intrinsic rewards, learns with finite stats and round-trips its
  weights and state exactly (same weight names on every backend).
* **backend** (``rlgear.backends``): a complete :class:`~rlgear.backend.Backend`
  whose ``setup``, RNG state round trip and ``version()`` work.

Authors call :func:`check_plugin` (or :func:`rlgear.testing.assert_plugin_ok`)
from their own tests once the package is installed (``pip install -e .``).
"""

from __future__ import annotations

import contextlib
import warnings

from rlgear.discovery import registry
from rlgear.discovery.check._base import (
    KINDS,
    CheckReport,
    Finding,
    _Checks,
    _Failed,
    _infos,
    _one_line,
    _shared,
)
from rlgear.discovery.check.algorithm import _check_algorithm
from rlgear.discovery.check.backend import _check_backend
from rlgear.discovery.check.env import _check_env
from rlgear.discovery.check.exploration import _check_exploration
from rlgear.discovery.check.hook import _check_hook
from rlgear.discovery.check.logger import _check_logger
from rlgear.discovery.check.scheduler import _check_scheduler
from rlgear.discovery.check.searcher import _check_searcher

__all__ = ["KINDS", "CheckReport", "Finding", "check_plugin", "find_plugin"]
from rlgear.errors import PluginError, closest


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
        kind: ``algorithm``, ``env``, ``backend``, ``scheduler``, ``searcher`` or ``hook``; needed only
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
        "searcher": lambda: _check_searcher(checks, info, load_name),
        "logger": lambda: _check_logger(checks, info, load_name),
        "hook": lambda: _check_hook(checks, info),
        "exploration": lambda: _check_exploration(checks, info, load_name),
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
