"""Policy sets: which policies a run has, their resolved configs, and which agent acts with which.

The ``multiagent`` config section (:class:`MultiAgentConfig`, defined here beside its checks)
names policies with per-policy overrides of ``training`` and ``model``, maps agent ids to policy
ids (globs, first match, or a ``module:function``), and says which policies learn. A run without
the section has one policy, :data:`DEFAULT_POLICY_ID`: a single-agent run is the one-policy case
of a multi-agent one, and every agent of a multi-agent env without the section shares that policy.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlgear.config.schema import doc
from rlgear.errors import ConfigError, PluginError, did_you_mean

#: The id of the policy of a run without a ``multiagent`` section (checkpoint names use it).
DEFAULT_POLICY_ID = "default"


@dataclass
class PolicyOverrides:
    """One policy of ``multiagent.policies``: what it changes of the run's ``training`` and ``model``."""

    training: dict[str, Any] = doc(
        "Keys of the run's training section this policy sets otherwise (e.g. {lr: 1e-4}); checked by "
        "the algorithm's config class.",
        factory=dict,
    )
    model: dict[str, Any] = doc(
        "Keys of the run's model section this policy sets otherwise (e.g. {hidden_sizes: [32]}).",
        factory=dict,
    )


@dataclass
class MultiAgentConfig:
    """Policies of a multi-agent run and which agent acts with which (docs/multi-agent.md)."""

    policies: dict[str, PolicyOverrides] = doc(
        "Policy id -> its overrides ({training: {...}, model: {...}}; {} for none). Empty: the ids "
        "policy_mapping names, without overrides, or one policy 'default' when there is no mapping either.",
        factory=dict,
    )
    policy_mapping: dict[str, str] | str = doc(
        "Agent id glob -> policy id, the first matching pattern wins (e.g. {'adversary_*': adversary, "
        "'*': shared}); or 'module:function' taking the agent id and returning a policy id. Empty: "
        "every agent acts with the only policy.",
        factory=dict,
    )
    policies_to_train: list[str] | None = doc(
        "The policies that learn (the others act with their weights as they are); null: all.", None
    )


def policy_ids(config: Any) -> list[str]:
    """The run's policy ids, in config order (``["default"]`` without a ``multiagent`` section; a
    league's learning players with a ``league`` section)."""
    league = getattr(config, "league", None)
    if league is not None:
        return league.player_ids()
    section = config.multiagent
    if section is None:
        return [DEFAULT_POLICY_ID]
    if section.policies:
        return list(section.policies)
    if isinstance(section.policy_mapping, dict) and section.policy_mapping:
        return list(dict.fromkeys(section.policy_mapping.values()))
    return [DEFAULT_POLICY_ID]


def policies_to_train(config: Any) -> list[str]:
    """The policies that learn (all unless ``multiagent.policies_to_train`` says otherwise)."""
    ids = policy_ids(config)
    section = config.multiagent
    if section is None or section.policies_to_train is None:
        return ids
    return [pid for pid in ids if pid in section.policies_to_train]


def policy_config(config: Any, policy_id: str, fail: Callable[[str, str], ConfigError] | None = None) -> Any:
    """The run config as policy ``policy_id`` sees it: its ``training`` and ``model`` overrides applied.

    Each override is checked by the section's own dataclass (the algorithm's config class for
    ``training``), so an unknown key is reported as ``multiagent.policies.<id>.training.<key>``
    with the closest valid key.
    """
    section = config.multiagent
    spec = None if section is None else section.policies.get(policy_id)
    if spec is None or (not spec.training and not spec.model):
        return config
    from rlgear.config.checks import check_ranges
    from rlgear.config.schema import build
    from rlgear.config.sections import ModelConfig

    fail = fail or config.fail
    where = f"multiagent.policies.{policy_id}"
    base = config.to_dict()
    training = build(type(config.training), {**base["training"], **spec.training}, f"{where}.training", fail)
    model = build(ModelConfig, {**base["model"], **spec.model}, f"{where}.model", fail)
    resolved = dataclasses.replace(config, training=training, model=model)
    check_ranges(resolved, lambda path, message: fail(f"{where}.{path}", message))
    return resolved


def check_multiagent_config(
    config: Any, training_class: type, fail: Callable[[str, str], ConfigError]
) -> None:
    """Refuse a ``multiagent`` section that names unknown policies or keys, when the config is read."""
    section = config.multiagent
    ids = policy_ids(config)
    mapping = section.policy_mapping
    if isinstance(mapping, dict):
        for pattern, pid in mapping.items():
            if pid not in ids:
                raise fail(
                    f"multiagent.policy_mapping.{pattern}",
                    f"unknown policy '{pid}'{did_you_mean(pid, ids)} (multiagent.policies: {', '.join(ids)})",
                )
        if not mapping and len(ids) > 1:
            raise fail(
                "multiagent.policy_mapping",
                f"several policies ({', '.join(ids)}) need a mapping from agent ids to policy ids "
                "(e.g. {'adversary_*': adversary, '*': shared})",
            )
    elif ":" not in mapping:
        raise fail(
            "multiagent.policy_mapping",
            f"expected a mapping of agent-id globs to policy ids, or 'module:function', got {mapping!r}",
        )
    for i, pid in enumerate(section.policies_to_train or []):
        if pid not in ids:
            raise fail(
                f"multiagent.policies_to_train[{i}]",
                f"unknown policy '{pid}'{did_you_mean(pid, ids)} (policies: {', '.join(ids)})",
            )
    for pid in ids:
        policy_config(config, pid, fail)


class PolicyMapping:
    """Agent id -> policy id, as ``multiagent.policy_mapping`` says (cached per agent)."""

    def __init__(self, config: Any):
        self.config = config
        self.ids = policy_ids(config)
        mapping: Any = None if config.multiagent is None else config.multiagent.policy_mapping
        if getattr(config, "league", None) is not None:  # a league's agents are its players (league/env.py)
            mapping = {pid: pid for pid in self.ids}
        self._function: Callable[[str], str] | None = None
        self._patterns: dict[str, str] = {}
        if isinstance(mapping, str):
            from rlgear.discovery import registry

            try:
                self._function = registry.resolve_object(mapping, "multiagent.policy_mapping")
            except PluginError as err:
                raise config.fail("multiagent.policy_mapping", str(err)) from err
        elif mapping:
            self._patterns = dict(mapping)
        self._cache: dict[str, str] = {}

    def __call__(self, agent_id: str) -> str:
        if agent_id in self._cache:
            return self._cache[agent_id]
        if self._function is not None:
            pid = str(self._function(agent_id))
            if pid not in self.ids:
                raise self.config.fail(
                    "multiagent.policy_mapping",
                    f"the mapping function returned '{pid}' for agent '{agent_id}', which is not a "
                    f"policy ({', '.join(self.ids)})",
                )
        elif self._patterns:
            pid = next(
                (p for pattern, p in self._patterns.items() if fnmatch.fnmatchcase(agent_id, pattern)), ""
            )
            if not pid:
                raise self.config.fail(
                    "multiagent.policy_mapping",
                    f"no pattern maps agent '{agent_id}' (patterns: {', '.join(self._patterns)}); "
                    "add one, e.g. '*' last for every other agent",
                )
        else:
            pid = self.ids[0]
        self._cache[agent_id] = pid
        return pid
