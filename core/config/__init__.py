"""The run configuration: one YAML file, every key validated.

Top-level keys: ``algorithm``, ``backend``, ``env``, ``model``,
``training`` (algorithm hyperparameters, defaults from the algorithm),
``workers``, ``stop``, ``checkpoint``, ``logging``, ``seed``, and ``tune``
(read by ``rlgear tune``).

Loading is two-phase: the file is parsed and checked against the fixed
sections, then the algorithm named in it is looked up (metadata only, then its
module) so that ``training`` is checked against that algorithm's own config
class. Command-line overrides (``--set training.lr=0.001``) are applied to the
raw mapping before validation; their values are parsed as YAML.

This package re-exports the names a plugin or a script uses; each is defined,
with the checks of its keys, in one module by concern:

- ``sections``: ``RunConfig`` and the fixed sections (``env``, ``model``,
  ``workers``, ``checkpoint``, ``logging``) as dataclasses;
- ``training``: ``BaseTrainingConfig`` and ``TrainingConfig``, the bases of an
  algorithm's ``training`` section, with the checks of their keys;
- ``multiagent``: the ``multiagent`` section, its checks and policy sets;
- ``loading``: ``load``, ``resolve`` and ``from_any``;
- ``overrides``: ``--set`` parsing and the errors that blame an override;
- ``yaml_io``: reading and writing config YAML;
- ``checks``: range, logger, env-adapter and recurrence checks;
- ``result_keys``: the result keys ``stop`` and ``tune.metric`` name;
- ``redaction``: secrets, redacted in every file rlgear writes;
- ``schema`` (fields with help texts, building a section from a mapping),
  ``reference`` (the config reference), ``deprecated`` (renamed keys), ``conv``
  (conv stacks), ``devices`` (``learners.device``: the check against a backend's devices
  and the ``auto`` rule) and ``logger_options``.
"""

from __future__ import annotations

from rlgear.config.checks import (
    check_env_adapter,
    check_loggers,
    check_ranges,
    check_recurrent_support,
    check_relational_support,
)
from rlgear.config.loading import from_any, load, resolve
from rlgear.config.multiagent import MultiAgentConfig, PolicyOverrides
from rlgear.config.overrides import apply_overrides, parse_override
from rlgear.config.redaction import REDACTED, is_secret_key, redact_secrets, restore_secrets
from rlgear.config.result_keys import RESULT_KEYS, ResultKeyCheck, build_stop, check_result_key
from rlgear.config.sections import (
    AUTO_FRAGMENT_LENGTH,
    TOP_LEVEL_KEYS,
    CheckpointConfig,
    EnvConfig,
    LearnersConfig,
    LoggingConfig,
    ModelConfig,
    OfflineConfig,
    RayConfig,
    RunConfig,
    WorkersConfig,
    WrapperConfig,
)
from rlgear.config.training import (
    BUILTIN_OPTIMIZERS,
    BaseTrainingConfig,
    TrainingConfig,
    check_gradient_keys,
    check_optimizer,
)
from rlgear.config.yaml_io import dump_yaml, read_yaml, yaml_load

# isort: split
# Names this module held before it was split by concern, kept importable from here.
from rlgear.config.deprecated import rename_keys as rename_keys
from rlgear.config.overrides import _failer as _failer
from rlgear.config.redaction import _SECRET_NAMES as _SECRET_NAMES
from rlgear.config.redaction import _SECRET_SUFFIXES as _SECRET_SUFFIXES
from rlgear.config.schema import build as build
from rlgear.config.schema import doc as doc
from rlgear.config.schema import is_search_space as is_search_space
from rlgear.config.training import _FRAMEWORK_PREFIXES as _FRAMEWORK_PREFIXES
from rlgear.config.training import _OPTIMIZER_EXAMPLES as _OPTIMIZER_EXAMPLES
from rlgear.config.training import _BackendKeys as _BackendKeys
from rlgear.config.training import _GradientKeys as _GradientKeys
from rlgear.config.yaml_io import _Loader as _Loader
from rlgear.errors import ConfigError as ConfigError
from rlgear.errors import PluginError as PluginError
from rlgear.errors import did_you_mean as did_you_mean

__all__ = [
    "AUTO_FRAGMENT_LENGTH",
    "BUILTIN_OPTIMIZERS",
    "REDACTED",
    "RESULT_KEYS",
    "TOP_LEVEL_KEYS",
    "BaseTrainingConfig",
    "CheckpointConfig",
    "EnvConfig",
    "LearnersConfig",
    "LoggingConfig",
    "ModelConfig",
    "MultiAgentConfig",
    "OfflineConfig",
    "PolicyOverrides",
    "RayConfig",
    "ResultKeyCheck",
    "RunConfig",
    "TrainingConfig",
    "WorkersConfig",
    "WrapperConfig",
    "apply_overrides",
    "build_stop",
    "check_env_adapter",
    "check_gradient_keys",
    "check_loggers",
    "check_optimizer",
    "check_ranges",
    "check_recurrent_support",
    "check_relational_support",
    "check_result_key",
    "dump_yaml",
    "from_any",
    "is_secret_key",
    "load",
    "parse_override",
    "read_yaml",
    "redact_secrets",
    "resolve",
    "restore_secrets",
    "yaml_load",
]
