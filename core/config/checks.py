"""Checks of a resolved run config that its keys' types alone can't express.

:func:`check_ranges` (value ranges across the sections, then the training section's own
checks), :func:`check_loggers` (``logging.loggers`` against the installed logger
plugins), and the checks that ask a plugin: :func:`check_env_adapter` (the env
adapter's), :func:`check_recurrent_support` (``model.lstm`` / ``model.attention`` against the
algorithm) and :func:`check_relational_support`; :func:`check_attention` and
:func:`check_relational` hold those models' own keys.
:func:`rlgear.config.resolve` runs them when a config is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlgear.config.training import _GradientKeys, check_gradient_keys
from rlgear.errors import did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    from rlgear.config.sections import LoggingConfig, ModelConfig, RunConfig


def check_ranges(config: RunConfig, fail) -> None:
    """Value checks that types alone can't express."""
    w = config.workers
    positive = {
        "workers.num_envs_per_worker": w.num_envs_per_worker,
        "workers.num_cpus_for_driver": w.num_cpus_for_driver,
        "workers.num_cpus_per_worker": w.num_cpus_per_worker,
        "training.metrics_window": config.training.metrics_window,
    }
    training = config.training
    if hasattr(training, "train_batch_size"):
        positive["training.train_batch_size"] = training.train_batch_size
    gradient_keys = isinstance(training, _GradientKeys)  # a gradient-free algorithm has none of them
    if gradient_keys:
        positive["training.lr"] = training.lr
        positive["training.optimizer_epsilon"] = training.optimizer_epsilon
    positive["training.evaluation_episodes"] = training.evaluation_episodes
    for i, size in enumerate(config.model.hidden_sizes):
        positive[f"model.hidden_sizes[{i}]"] = size
    for i, size in enumerate(config.model.critic_hidden_sizes or ()):
        positive[f"model.critic_hidden_sizes[{i}]"] = size
    if config.model.lstm:
        positive["model.lstm_cell_size"] = config.model.lstm_cell_size
        positive["model.max_seq_len"] = config.model.max_seq_len
        if config.model.custom:
            raise fail(
                "model.lstm",
                "a custom model (model.custom) cannot be combined with the catalog LSTM: "
                "put the recurrence in your own model, or drop model.custom",
            )
    if config.model.attention:
        check_attention(config.model, fail)
    if config.model.relational:
        check_relational(config.model, fail)
    if gradient_keys and training.grad_clip is not None:
        positive["training.grad_clip"] = training.grad_clip
    if w.rollout_fragment_length != "auto":
        positive["workers.rollout_fragment_length"] = w.rollout_fragment_length
    if w.horizon is not None:
        positive["workers.horizon"] = w.horizon
    for path, value in positive.items():
        if value <= 0:
            raise fail(path, f"expected a positive number, got {value}")
    non_negative = {
        "workers.num_workers": w.num_workers,
        "training.evaluation_interval": training.evaluation_interval,
        "training.evaluation_video_every": training.evaluation_video_every,
        "training.min_time_s_per_iteration": training.min_time_s_per_iteration,
        "training.min_env_steps_per_iteration": training.min_env_steps_per_iteration,
    }
    for path, value in non_negative.items():
        if value < 0:
            raise fail(path, f"expected 0 or more, got {value}")
    if training.evaluation_video_every and not training.evaluation_interval:
        raise fail(
            "training.evaluation_video_every",
            "counts evaluations, and none run: set training.evaluation_interval too",
        )
    for path, value in {
        "workers.max_requests_in_flight_per_worker": w.max_requests_in_flight_per_worker,
        "workers.sample_timeout_s": w.sample_timeout_s,
        "workers.metrics_timeout_s": w.metrics_timeout_s,
        "workers.ray.worker_start_timeout_s": w.ray.worker_start_timeout_s,
    }.items():
        if value <= 0:
            raise fail(path, f"expected a positive number, got {value}")
    for path, value in {
        "workers.max_restarts": w.max_restarts,
        "workers.num_gpus_per_worker": w.num_gpus_per_worker,
    }.items():
        if value < 0:
            raise fail(path, f"expected 0 or more, got {value}")
    check_learners(config, fail)
    check_offline(config, fail)
    if w.ray.object_store_memory is not None and w.ray.object_store_memory <= 0:
        raise fail(
            "workers.ray.object_store_memory",
            f"expected a positive number of bytes, got {w.ray.object_store_memory}",
        )
    if config.checkpoint.every < 0:
        raise fail("checkpoint.every", f"expected 0 or more, got {config.checkpoint.every}")
    if config.checkpoint.keep is not None and config.checkpoint.keep < 1:
        raise fail("checkpoint.keep", f"expected 1 or more (or null), got {config.checkpoint.keep}")
    if gradient_keys:
        check_gradient_keys(config, fail)
    check_loggers(config.logging, fail)
    if hasattr(config.training, "check"):
        config.training.check(fail)


def check_loggers(logging: LoggingConfig, fail) -> None:
    """``logging.loggers``: installed logger plugins, jsonl among them, each once; options of listed ones only.

    Loading a logger imports its module (cheap: a logger imports its tool when it
    opens), so options are checked against its constructor before any work.
    """
    from rlgear.config.logger_options import check_options
    from rlgear.discovery import registry
    from rlgear.errors import PluginError

    names = [name.partition("@")[0] for name in logging.loggers]
    if "jsonl" not in names:
        raise fail(
            "logging.loggers",
            f"jsonl is required (progress.jsonl is what --resume, rlgear plot and rlgear tune read); "
            f"got {logging.loggers}: add jsonl",
        )
    for i, name in enumerate(names):
        if name in names[:i]:
            raise fail(f"logging.loggers[{i}]", f"'{name}' is listed twice")
    for key in logging.logger_options:
        if key not in logging.loggers:
            raise fail(
                f"logging.logger_options.{key}",
                f"options of a logger the run does not use{did_you_mean(key, logging.loggers)} "
                f"(logging.loggers: {', '.join(logging.loggers)})",
            )
    for i, name in enumerate(logging.loggers):
        try:
            logger_class = registry.load_logger(name)
        except PluginError as err:
            raise fail(f"logging.loggers[{i}]", str(err)) from err
        check_options(logger_class, logging.logger_options.get(name, {}), name, fail)


def check_recurrent_support(config: RunConfig, algorithm_class: type) -> None:
    """``model.lstm`` and ``model.attention`` only for algorithms that learn on sequences
    (``Trainer.recurrent``)."""
    for key in ("lstm", "attention"):
        if getattr(config.model, key) and not getattr(algorithm_class, "recurrent", False):
            name = getattr(algorithm_class, "name", algorithm_class.__name__)
            raise config.fail(
                f"model.{key}",
                f"algorithm '{name}' does not support recurrent policies (it stays feed-forward); "
                f"set model.{key}: false, or use ppo, pg, a2c, a3c, impala or appo",
            )


def check_attention(model: ModelConfig, fail) -> None:
    """``model.attention``'s keys: sizes, heads that divide the width, and what it does not combine with."""
    if model.lstm:
        raise fail(
            "model.attention",
            "model.attention and model.lstm are two recurrent models: set one of them to false",
        )
    if model.custom:
        raise fail(
            "model.attention",
            "a custom model (model.custom) cannot be combined with the catalog attention memory: "
            "put the memory in your own model, or drop model.custom",
        )
    for key in ("lstm_use_prev_action", "lstm_use_prev_reward"):
        if getattr(model, key):
            raise fail(
                f"model.{key}",
                "feeds the LSTM only; the attention memory (model.attention) reads the observation "
                "features alone: set it to false",
            )
    sizes = {
        "model.attention_dim": model.attention_dim,
        "model.attention_heads": model.attention_heads,
        "model.attention_layers": model.attention_layers,
        "model.attention_memory": model.attention_memory,
        "model.max_seq_len": model.max_seq_len,
    }
    if model.attention_mlp_dim is not None:
        sizes["model.attention_mlp_dim"] = model.attention_mlp_dim
    for path, value in sizes.items():
        if value <= 0:
            raise fail(path, f"expected a positive number, got {value}")
    if model.attention_dim % model.attention_heads:
        raise fail(
            "model.attention_heads",
            f"must divide model.attention_dim ({model.attention_dim}) into equal heads, "
            f"got {model.attention_heads}",
        )


def check_relational(model: ModelConfig, fail) -> None:
    """``model.relational``'s keys: sizes, heads that divide the width, and what it does not combine with
    (the relational module is the MLP's encoder: the recurrent models and custom models have their own)."""
    for key in ("lstm", "attention", "custom"):
        if getattr(model, key):
            raise fail(
                "model.relational",
                f"the relational module is the catalog MLP's encoder and does not combine with "
                f"model.{key}: set one of them off",
            )
    if model.observation_filter != "none":
        raise fail(
            "model.observation_filter",
            "model.relational reads all-zero entity rows as absent entities, and normalising the "
            "observation would make them present: set it to none",
        )
    sizes = {
        "model.relational_dim": model.relational_dim,
        "model.relational_heads": model.relational_heads,
        "model.relational_blocks": model.relational_blocks,
    }
    if model.relational_mlp_dim is not None:
        sizes["model.relational_mlp_dim"] = model.relational_mlp_dim
    for path, value in sizes.items():
        if value <= 0:
            raise fail(path, f"expected a positive number, got {value}")
    if model.relational_dim % model.relational_heads:
        raise fail(
            "model.relational_heads",
            f"must divide model.relational_dim ({model.relational_dim}) into equal heads, "
            f"got {model.relational_heads}",
        )


def check_relational_support(config: RunConfig, algorithm_class: type) -> None:
    """``model.relational`` only for algorithms whose policies use the catalog actor-critic
    (``Trainer.relational``); the others build networks of their own."""
    if config.model.relational and not getattr(algorithm_class, "relational", False):
        name = getattr(algorithm_class, "name", algorithm_class.__name__)
        raise config.fail(
            "model.relational",
            f"algorithm '{name}' builds its own network, without the catalog's relational encoder; "
            "set model.relational: false, or use ppo, pg, a2c, a3c, impala or appo",
        )


def check_env_adapter(config: RunConfig) -> None:
    """The env adapter's own check of the env settings (``EnvAdapter.check_config``: wrappers, video).

    An adapter that is not installed is left to the trainer, which names the installed ones.
    """
    from rlgear.discovery import registry

    if config.has_env and config.env.adapter in registry.names("env"):
        registry.load_env_adapter(config.env.adapter).check_config(config)


def check_learners(config: RunConfig, fail) -> None:
    """The ``learners`` section's values (whether a device exists is the backend's check, at setup)."""
    import re

    from rlgear.config.sections import DEVICE_PATTERN

    learners = config.learners
    if not isinstance(learners.device, str) or not re.fullmatch(DEVICE_PATTERN, learners.device):
        raise fail("learners.device", f"expected auto, cpu, cuda, cuda:N or mps, got {learners.device!r}")
    for path, value in {
        "learners.num_learners": learners.num_learners,
        "learners.num_gpus_per_learner": learners.num_gpus_per_learner,
        "learners.max_restarts": learners.max_restarts,
    }.items():
        if value < 0:
            raise fail(path, f"expected 0 or more, got {value}")
    if learners.num_cpus_per_learner <= 0:
        raise fail(
            "learners.num_cpus_per_learner",
            f"expected a positive number, got {learners.num_cpus_per_learner}",
        )


def check_offline(config: RunConfig, fail) -> None:
    """The ``offline`` section: ids and paths well-formed, sizes positive, no multi-policy recording
    (whether a dataset exists is checked where it is opened: the run's setup, the offline reader)."""
    from rlgear.config.multiagent import policy_ids
    from rlgear.offline.location import problem

    offline = config.offline
    inputs = [offline.input] if isinstance(offline.input, str) else list(offline.input or [])
    if offline.input is not None and not inputs:
        raise fail("offline.input", "expected a dataset id, a path or a list of them, got an empty list")
    for i, value in enumerate(inputs):
        why = problem(value)
        if why is not None:
            raise fail("offline.input" if isinstance(offline.input, str) else f"offline.input[{i}]", why)
    if offline.output is not None:
        why = problem(offline.output)
        if why is not None:
            raise fail("offline.output", why)
        if len(policy_ids(config)) > 1:
            raise fail(
                "offline.output",
                "recording a run of several policies is not supported (a Minari dataset holds one "
                "agent's episodes); record a single-agent run",
            )
    for path, value in {
        "offline.output_flush_episodes": offline.output_flush_episodes,
        "offline.input_shuffle_buffer_episodes": offline.input_shuffle_buffer_episodes,
    }.items():
        if value < 1:
            raise fail(path, f"expected 1 or more, got {value}")
