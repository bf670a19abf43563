"""The ``exploration`` section: an exploration plugin (entry-point group ``rlgear.exploration``) and its options.

``exploration: {name: rnd, intrinsic_coeff: 1.0, ...}``. The keys beside ``name`` are the
plugin's own options dataclass (a subclass of :class:`ExplorationConfig`, the plugin's
``config_class``), so they are checked like ``training`` is against the algorithm's: unknown keys,
types, then the dataclass's ``check(fail)``. Without a ``name`` (the default) no plugin runs and
nothing changes. The plugin's contract is :mod:`rlgear.exploration`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlgear.config.schema import build, doc
from rlgear.errors import ConfigError, PluginError

if TYPE_CHECKING:  # pragma: no cover
    from rlgear.config.sections import RunConfig

Fail = Callable[[str, str], ConfigError]


@dataclass
class ExplorationConfig:
    """The keys every exploration plugin has; a plugin's ``config_class`` subclasses this.

    Defaults are Burda et al. 2018 (RND, sec. 2.3-2.4 and table 5) as CleanRL's
    ``ppo_rnd_envpool.py`` sets them: intrinsic and extrinsic advantage coefficients 1 and 2,
    an intrinsic discount of 0.99.
    """

    name: str | None = doc(
        "The exploration plugin (entry-point group rlgear.exploration), e.g. rnd; null: none.", None
    )
    intrinsic_coeff: float = doc(
        "Weight of the intrinsic part: of the intrinsic advantages (ppo, a2c: intrinsic value mode), "
        "or of the normalized intrinsic reward added to the env's reward (dqn: reward mode).",
        1.0,
    )
    extrinsic_coeff: float = doc(
        "Weight of the algorithm's own (extrinsic) advantages in intrinsic value mode "
        "(advantages = extrinsic_coeff * A_ext + intrinsic_coeff * A_int); unused in reward mode.",
        2.0,
    )
    intrinsic_gamma: float = doc(
        "Discount of the intrinsic returns, which are non-episodic: they flow through episode ends "
        "(Burda et al. 2018, sec. 2.3). Also the discount of the running intrinsic return whose "
        "standard deviation normalizes the intrinsic rewards.",
        0.99,
    )
    intrinsic_gae_lambda: float = doc("GAE lambda of the intrinsic advantages (intrinsic value mode).", 0.95)

    def check(self, fail: Fail) -> None:
        """Ranges; a plugin's options class extends this (``super().check(fail)`` first)."""
        for key in ("intrinsic_coeff", "extrinsic_coeff"):
            if getattr(self, key) < 0:
                raise fail(f"exploration.{key}", f"expected 0 or more, got {getattr(self, key)}")
        for key in ("intrinsic_gamma", "intrinsic_gae_lambda"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise fail(f"exploration.{key}", f"expected a number in [0, 1], got {value}")


def build_exploration(raw: Any, fail: Fail) -> ExplorationConfig:
    """The ``exploration`` section from its mapping: the named plugin's options class, checked."""
    if raw is None:
        return ExplorationConfig()
    if not isinstance(raw, Mapping):
        raise fail("exploration", f"expected a mapping such as {{name: rnd}}, got {raw!r}")
    name = raw.get("name")
    if name is None:
        return build(ExplorationConfig, raw, "exploration", fail)
    if not isinstance(name, str):
        raise fail("exploration.name", f"expected an exploration plugin name (a string), got {name!r}")
    from rlgear.discovery import registry

    try:
        plugin = registry.load_exploration(name)
    except PluginError as err:
        raise PluginError(str(fail("exploration.name", str(err)))) from err
    options = build(plugin.config_class, raw, "exploration", fail)
    options.check(fail)
    return options


def check_exploration_support(config: RunConfig, algorithm_class: type) -> None:
    """Refuse an exploration plugin with an algorithm it does not declare, or with learner actors."""
    name = config.exploration.name
    if name is None:
        return
    from rlgear.discovery import registry

    plugin = registry.load_exploration(name)
    algorithm = algorithm_class.name
    if algorithm not in plugin.algorithms:
        supported = ", ".join(sorted(plugin.algorithms)) or "none"
        raise config.fail(
            "exploration.name",
            f"exploration '{name}' does not support algorithm '{algorithm}' (it supports: {supported})",
        )
    if config.learners.num_learners > 0:
        raise config.fail(
            "exploration.name",
            f"exploration '{name}' trains its networks in the driver's learner: it needs "
            f"learners.num_learners: 0, got {config.learners.num_learners}",
        )
    if config.multiagent is not None:
        raise config.fail(
            "exploration.name",
            f"exploration '{name}' runs with one policy (no multiagent section) for now",
        )
