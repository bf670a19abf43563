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
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from rlgear.config.deprecated import rename_keys
from rlgear.config.schema import build, doc, is_search_space
from rlgear.errors import ConfigError, PluginError, did_you_mean


@dataclass
class WrapperConfig:
    """One wrapper of ``env.wrappers`` or ``env.wrappers_vector``: a class and its keyword arguments."""

    name: str = doc(
        "The wrapper class: a dotted path ('gymnasium.wrappers.FrameStackObservation') or 'module:Class'."
    )
    kwargs: dict[str, Any] = doc(
        "Keyword arguments of the wrapper's constructor (after the env it wraps).", factory=dict
    )


@dataclass
class EnvConfig:
    """Which environment to run and how to vectorize it."""

    name: str = doc("Environment id for the adapter: a gymnasium id ('CartPole-v1') or 'module:Class'.")
    adapter: str = doc("Env adapter plugin (entry-point group rlgear.envs).", "gymnasium")
    kwargs: dict[str, Any] = doc("Keyword arguments passed to the environment's constructor.", factory=dict)
    vectorization: Literal["auto", "sync", "async", "native"] = doc(
        "'native' steps all envs at once in the env's own numpy vector class (gymnasium envs that "
        "register a vector entry point, e.g. CartPole-v1; several times faster); 'sync' steps the "
        "envs one by one in this process; 'async' steps each env in a subprocess (worth it only for "
        "slow envs); 'auto' (the default) is native when the env has a vector entry point and "
        "env.wrappers is empty, else sync. Native envs draw other random streams than sync ones, "
        "so a seeded run gives other (equally valid) figures in the two modes. "
        "Recording videos always builds sync envs.",
        "auto",
    )
    wrappers: list[WrapperConfig] = doc(
        "gymnasium.Wrapper classes applied to each env, in order (the first wraps the bare env), "
        "e.g. [{name: gymnasium.wrappers.FrameStackObservation, kwargs: {stack_size: 4}}]; each item "
        "has name and kwargs. The policy sees the observation space of the last one. Gymnasium "
        "adapter only.",
        factory=list,
    )
    wrappers_vector: list[WrapperConfig] = doc(
        "gymnasium vector wrappers applied to the vector env, in order, after env.wrappers, e.g. "
        "[{name: gymnasium.wrappers.vector.NormalizeObservation}]. Their running statistics "
        "(RunningMeanStd) are saved in checkpoints, restored on --resume and frozen during "
        "evaluation; with remote workers each worker keeps its own and checkpoints hold the first "
        "worker's. Gymnasium adapter only.",
        factory=list,
    )


@dataclass
class ModelConfig:
    """The network. Built-in catalog options, or a custom model class."""

    hidden_sizes: list[int] = doc(
        "Units of each hidden layer of the MLP; at least one layer (a linear policy needs model.custom).",
        factory=lambda: [64, 64],
    )
    activation: Literal["tanh", "relu", "elu", "silu"] = doc("Hidden-layer activation.", "tanh")
    vf_share_layers: bool = doc(
        "Share the hidden layers between policy and value function (else two separate MLPs).", False
    )
    init_log_std: float = doc("Initial log standard deviation of continuous actions.", 0.0)
    orthogonal_init: bool = doc(
        "Orthogonal initialisation (gain sqrt(2) hidden, 0.01 policy head, 1 value head), "
        "as in the PPO implementation-details study (Huang et al. 2022).",
        True,
    )
    conv_filters: list[list[int]] | None = doc(
        "Conv layers for image observations (a rank-3 Box [height, width, channels]; uint8 scaled by "
        "1/255): a list of [out_channels, kernel, stride], no padding, ReLU, then flattened into the "
        "hidden_sizes MLP. One trunk serves the policy and value heads. null: the Nature-DQN stack "
        "[[32, 8, 4], [64, 4, 2], [64, 3, 1]] for images of 36x36 and up, else MinAtar's [[16, 3, 1]].",
        None,
    )
    observation_filter: Literal["none", "mean_std"] = doc(
        "mean_std: normalise (flat, non-image) observations with running mean and variance, merged "
        "across remote workers and kept in checkpoints, then clip them to +-observation_filter_clip "
        "(docs/models.md). The alternative: env.wrappers_vector with gymnasium's NormalizeObservation.",
        "none",
    )
    observation_filter_clip: float = doc(
        "With observation_filter: mean_std, filtered observations are clipped to [-clip, clip].", 10.0
    )
    numpy_inference: bool = doc(
        "Act with a numpy copy of the catalog MLP and its conv trunk (several times faster for small "
        "batches and small images; learning stays in the framework). Ignored for custom models.",
        True,
    )
    custom: str | None = doc(
        "'module:Class' of your own network for the backend in use; see the README's model section.",
        None,
    )
    custom_options: dict[str, Any] = doc("Keyword arguments passed to the custom model.", factory=dict)
    lstm: bool = doc(
        "Recurrent policy: the MLP's hidden layers (shared by policy and value), then one LSTM layer, "
        "then the policy and value heads. Supported by ppo, pg, a2c, a3c and impala (not dqn).",
        False,
    )
    lstm_cell_size: int = doc("Units of the LSTM cell (model.lstm).", 256)
    max_seq_len: int = doc(
        "Longest sequence the learner backpropagates through (model.lstm): fragments are cut into "
        "chunks of at most this many steps that never cross an episode boundary.",
        20,
    )
    lstm_use_prev_action: bool = doc(
        "Feed the previous action (one-hot for Discrete) to the LSTM with the observation features.", False
    )
    lstm_use_prev_reward: bool = doc(
        "Feed the previous reward to the LSTM with the observation features.", False
    )


@dataclass
class RayConfig:
    """The Ray session behind remote workers (see docs/distributed.md)."""

    address: str | None = doc(
        "null: start a local Ray with the run's CPU budget; 'auto' or 'host:port': attach to a "
        "running cluster.",
        None,
    )
    object_store_memory: int | None = doc(
        "Object-store size in bytes of a local Ray (null: Ray's default).", None
    )
    log_to_driver: bool = doc("Show the workers' stdout/stderr in the driver's terminal.", False)
    worker_start_timeout_s: float = doc(
        "How long to wait for the remote workers to start before failing with a resource error.", 120.0
    )


@dataclass
class WorkersConfig:
    """Sampling: how many rollout workers and envs, and how experience is cut into fragments."""

    num_workers: int = doc(
        "Remote rollout workers on Ray. 0 samples in the driver process (no Ray needed).", 0
    )
    num_envs_per_worker: int = doc("Vectorized envs per rollout worker.", 8)
    rollout_fragment_length: int | Literal["auto"] = doc(
        "Env steps per env in one sample() call. 'auto' = train_batch_size / (envs x workers) (200 for an "
        "algorithm without train_batch_size).",
        "auto",
    )
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = doc(
        "'truncate_episodes': fixed-length fragments that may cut episodes (bootstrapped); "
        "'complete_episodes': batches hold only whole episodes.",
        "truncate_episodes",
    )
    horizon: int | None = doc(
        "Truncate every episode after this many steps, regardless of the env's own time limit.",
        None,
    )
    num_cpus_for_driver: int = doc(
        "CPU threads the framework (torch; TF's intra- and inter-op pools) may use in the driver. "
        "1 is fastest for small networks and robust on a busy machine.",
        1,
    )
    num_cpus_per_worker: int = doc(
        "CPUs (Ray resource and framework threads) of each remote rollout worker.", 1
    )
    num_gpus_per_worker: float = doc("GPUs (Ray resource, may be fractional) of each remote worker.", 0.0)
    ray: RayConfig = doc(
        "How rlgear starts or attaches to Ray (only with num_workers > 0).", factory=lambda: RayConfig()
    )
    recreate_failed: bool = doc(
        "Replace a remote worker that died (process killed, node lost) with a fresh one holding the "
        "current weights; false stops the run at the first failure.",
        True,
    )
    max_restarts: int = doc(
        "Worker replacements allowed before the run stops with an error (counted from the start "
        "or the last resume; num_worker_restarts in results counts over the whole run).",
        10,
    )
    max_requests_in_flight_per_worker: int = doc(
        "Sample requests kept queued on each remote worker by asynchronous sampling.", 2
    )
    sample_timeout_s: float = doc(
        "A remote sample request not answered within this many seconds marks the worker as hung: "
        "it is replaced like a dead one.",
        600.0,
    )
    metrics_timeout_s: float = doc(
        "How long metrics collection waits for a remote worker before going on without it "
        "(its episodes arrive with a later collection; the miss is counted in num_metrics_timeouts).",
        10.0,
    )


@dataclass
class CheckpointConfig:
    every: int = doc("Write a checkpoint every N iterations (0: only at the end).", 0)
    keep: int | None = doc("Keep only the newest K checkpoints (null: keep all).", 5)
    at_end: bool = doc("Write a checkpoint when the run ends (stop reached or Ctrl-C).", True)


@dataclass
class LoggingConfig:
    dir: str = doc("Parent folder of run folders.", "./runs")
    name: str | None = doc("Run folder name (default: <algorithm>_<env>_<timestamp>).", None)
    tensorboard: bool = doc(
        "Write TensorBoard event files (tensorboardX). false removes tensorboard from logging.loggers "
        "(true adds nothing: list it there).",
        True,
    )
    loggers: list[str] = doc(
        "Where results go: logger plugins (entry-point group rlgear.loggers), e.g. [jsonl, tensorboard, "
        "mlflow]. Built-ins: jsonl (progress.jsonl: required, --resume and rlgear plot read it), "
        "tensorboard, csv (progress.csv), mlflow (pip install 'rlgear[mlflow]'; a local store in the run "
        "folder by default), wandb (pip install 'rlgear[wandb]').",
        factory=lambda: ["jsonl", "tensorboard"],
    )
    logger_options: dict[str, dict[str, Any]] = doc(
        "Keyword arguments of each logger, by name: {mlflow: {experiment: ppo-sweeps, tracking_uri: "
        "http://localhost:5000}, wandb: {project: my-project, mode: offline}}.",
        factory=dict,
    )
    progress: Literal["auto", "rich", "plain", "none"] = doc(
        "Progress display: 'rich' live table, 'plain' one line per report, 'auto' picks rich on a terminal.",
        "auto",
    )
    progress_interval_s: float = doc("Minimum seconds between two plain progress lines.", 2.0)


@dataclass
class BaseTrainingConfig:
    """The keys the Trainer loop itself reads: every algorithm has these.

    An algorithm that takes no gradient step (es, ars, a cross-entropy method)
    derives its config class from this one, so its ``training`` section holds
    only the keys it uses (``training.lr`` on such an algorithm is an unknown
    key). Gradient-based algorithms derive from :class:`TrainingConfig`.
    """

    min_time_s_per_iteration: float = doc(
        "An iteration repeats training steps until at least this many seconds have passed.", 0.0
    )
    min_env_steps_per_iteration: int = doc(
        "An iteration repeats training steps until at least this many env steps were sampled.", 0
    )
    metrics_window: int = doc(
        "Episode statistics are taken over the last N finished episodes (as SB3 and RLlib).", 100
    )
    evaluation_interval: int = doc(
        "Every N iterations, run greedy evaluation episodes on separate envs and report "
        "evaluation/episode_return_mean etc. (0: never).",
        0,
    )
    evaluation_episodes: int = doc("Episodes per evaluation.", 10)
    evaluation_video_every: int = doc(
        "Every N evaluations, record one evaluation episode as an mp4 under the run folder's videos/ "
        "and as a TensorBoard video (0: never). Needs pip install 'rlgear[video]' and an env that "
        "renders rgb_array frames (gymnasium adapter).",
        0,
    )


@dataclass
class _BackendKeys:
    """Keys a framework backend reads while it learns."""

    eager: bool = doc(
        "TF backend: run the learn step (and acting) eagerly instead of under tf.function; "
        "slower, but errors point at the failing line (also RLGEAR_TF_EAGER=1). Ignored by torch.",
        False,
    )


@dataclass
class _GradientKeys:
    """The keys of learning by gradient steps: the optimizer's (read by the backends' policies), the
    discount, and the batch a step learns from (read by the default training step)."""

    gamma: float = doc("Discount factor.", 0.99)
    lr: float = doc("Learning rate.", 5e-4)
    lr_schedule: list[list[float]] | None = doc(
        "Piecewise-linear learning rate over timesteps_total: [[0, 1e-3], [100000, 0]]. Overrides lr.",
        None,
    )
    optimizer: str = doc(
        "Optimizer: a built-in (adam, sgd, rmsprop: fast, no torch._dynamo import), or the dotted path "
        "of any optimizer class of the run's backend: torch.optim.AdamW (any torch.optim.Optimizer "
        "subclass) on torch, tf.keras.optimizers.AdamW (any Keras optimizer) on tf. A dotted path is "
        "imported only when a run uses it; its state is checkpointed and lr / lr_schedule drive its "
        "learning rate.",
        "adam",
    )
    optimizer_kwargs: dict[str, Any] = doc(
        "Keyword arguments of the optimizer's constructor besides the learning rate, e.g. "
        "{weight_decay: 0.01} for torch.optim.AdamW; the built-ins take betas and eps (adam), alpha "
        "and eps (rmsprop). An eps / epsilon given here wins over optimizer_epsilon.",
        factory=dict,
    )
    optimizer_epsilon: float = doc(
        "Epsilon of adam, and of a dotted-path optimizer whose constructor takes one (eps on torch, "
        "epsilon on Keras). The built-in rmsprop keeps 1e-8 (set optimizer_kwargs.eps). Was "
        "adam_epsilon (still read, with a warning, until 0.3).",
        1e-5,
    )
    grad_clip: float | None = doc("Clip the global gradient norm to this value (null: off).", None)
    max_nonfinite_updates: int = doc(
        "An update whose loss or gradient is NaN or infinite is skipped (weights and optimizer state "
        "untouched) and counted in learner/num_nonfinite_updates; this many in a row stop the run with an "
        "error.",
        10,
    )
    train_batch_size: int = doc("Env steps collected per training step.", 4000)


# The base classes in this order keep the fields in the order they always had (gradient keys, loop
# keys, eager): dataclasses collect fields from the last base to the first.
@dataclass
class TrainingConfig(_BackendKeys, BaseTrainingConfig, _GradientKeys):
    """Hyperparameters of every gradient-based algorithm: the loop's keys plus learning rate,
    optimizer, gradient clipping and discount. Algorithms subclass this with their own."""


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


#: ``workers.rollout_fragment_length: auto`` of an algorithm whose config has no ``train_batch_size``.
AUTO_FRAGMENT_LENGTH = 200


@dataclass
class RunConfig:
    """A whole run. ``training`` holds the algorithm's own config dataclass."""

    algorithm: str
    env: EnvConfig
    training: Any
    backend: str = "torch"
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    workers: WorkersConfig = dataclasses.field(default_factory=WorkersConfig)
    stop: dict[str, float] = dataclasses.field(default_factory=dict)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    seed: int | None = None
    #: The ``multiagent`` section (None when the config has none: one policy, ``default``).
    multiagent: MultiAgentConfig | None = None
    source: str = "config"  # where it came from, for error messages (not a config key)
    #: key path -> the ``--set`` text that set it, for error messages (not a config key)
    origins: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain data (what is saved as the run's config.yaml)."""
        out = dataclasses.asdict(self)
        out.pop("source")
        out.pop("origins")
        if out["multiagent"] is None:  # single-agent configs read and save as they always did
            out.pop("multiagent")
        return out

    def fail(self, path: str, message: str) -> ConfigError:
        """A ConfigError about key ``path``, prefixed as config errors are: ``FILE: path: ...`` or
        ``--set path=value: path: ...``. For plugin code (an adapter's ``make``, a Trainer's
        ``setup``) that checks its own keys: ``raise config.fail("env.kwargs.size", "expected > 0")``."""
        return _failer(self.source, self.origins)(path, message)

    def rollout_fragment_length(self) -> int:
        """Env steps per env per sample() call, resolving 'auto' from the batch size."""
        w = self.workers
        if w.rollout_fragment_length != "auto":
            return int(w.rollout_fragment_length)
        batch_size = getattr(self.training, "train_batch_size", None)
        if batch_size is None:  # an algorithm that samples no fragments by batch size (es, ars)
            return AUTO_FRAGMENT_LENGTH
        envs = w.num_envs_per_worker * max(1, w.num_workers)
        return max(1, -(-int(batch_size) // envs))


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``3e-4`` and ``1e6`` as numbers (YAML 1.2), not strings.

    PyYAML follows YAML 1.1, where a float needs a dot (``3.0e-4``); users
    write ``lr: 3e-4`` and mean a number.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    """Parse YAML safely (no Python objects), with YAML 1.2 numbers."""
    return yaml.load(text, Loader=_Loader)


#: Keys every result has; ``stop`` may also name ``learner/*``,
#: ``evaluation/*`` and ``custom_metrics/*`` keys.
RESULT_KEYS = (
    "training_iteration", "timesteps_total", "timesteps_this_iter", "time_this_iter_s",
    "time_total_s", "episodes_this_iter", "episodes_total", "episode_return_mean",
    "episode_return_min", "episode_return_max", "episode_len_mean", "env_steps_per_s",
)  # fmt: skip

TOP_LEVEL_KEYS = (
    "algorithm", "backend", "env", "model", "training", "workers",
    "stop", "checkpoint", "logging", "seed", "multiagent", "tune",
)  # fmt: skip


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a YAML config file into a mapping, with file:line:column on syntax errors."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config file: {err.strerror}") from None
    try:
        data = yaml_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: malformed YAML: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``'training.lr=0.001'`` -> ``('training.lr', 0.001)``; the value is parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text}: expected KEY.PATH=VALUE, e.g. --set training.lr=0.001")
    try:
        value = yaml_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw  # not YAML: take the text as a string
    return key, value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Apply ``--set`` overrides to a raw config mapping.

    Returns the new mapping and ``{dotted path: original --set text}`` so that
    validation errors can blame the override instead of the file.
    """
    data = copy.deepcopy(data)
    origins: dict[str, str] = {}
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"--set {text}: '{where}' is not a mapping, cannot set '{key}'")
            node = child
        node[parts[-1]] = value
        origins[key] = text
    return data, origins


def _failer(source: str, origins: Mapping[str, str]):
    def fail(path: str, message: str) -> ConfigError:
        for key, text in origins.items():
            inside = path.startswith((key + ".", key + "["))
            if path == key or inside or key.startswith(path + "."):
                return ConfigError(f"--set {text}: {path}: {message}")
        return ConfigError(f"{source}: {path}: {message}")

    return fail


def resolve(
    data: Mapping[str, Any],
    source: str = "config",
    overrides: Sequence[str] = (),
    training_class: type | None = None,
) -> RunConfig:
    """Validate a raw config mapping (plus overrides) into a :class:`RunConfig`.

    ``training_class`` defaults to the config class of the algorithm the config
    names, found through the plugin registry.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of config keys, got {type(data).__name__}")
    raw, origins = apply_overrides(dict(data), overrides)
    fail = _failer(source, origins)
    rename_keys(raw, fail, origins)
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            raise fail(str(key), f"unknown key{did_you_mean(str(key), TOP_LEVEL_KEYS)}")
    if "tune" in raw:
        raise fail(
            "tune",
            "the 'tune' section describes an experiment: run it with 'rlgear tune CONFIG' "
            "('rlgear train' runs one config; remove the section to train once)",
        )
    for required in ("algorithm", "env"):
        if required not in raw:
            raise fail(required, "missing required key")
    algorithm = raw["algorithm"]
    if isinstance(algorithm, Mapping) and set(algorithm) <= {"name", "package"} and "name" in algorithm:
        # {name: ppo, package: rlgear-thirdparty}: which package's ppo, when several register one
        raw["algorithm"] = (
            f"{algorithm['name']}@{algorithm['package']}" if algorithm.get("package") else algorithm["name"]
        )
    if not isinstance(raw["algorithm"], str):
        raise fail(
            "algorithm",
            f"expected an algorithm name (a string, or {{name: ..., package: ...}}), got {raw['algorithm']!r}",
        )
    algorithm_class = None
    if training_class is None:
        from rlgear.discovery import registry

        try:
            algorithm_class = registry.load_algorithm(raw["algorithm"])
        except PluginError as err:  # name the file (or --set) and the key the user has to fix
            raise PluginError(str(fail("algorithm", str(err)))) from err
        training_class = algorithm_class.config_class
    sections: dict[str, Any] = {
        "algorithm": raw["algorithm"],
        "env": build(EnvConfig, raw.get("env"), "env", fail),
        "training": build(training_class, raw.get("training"), "training", fail),
    }
    if "backend" in raw:
        if not isinstance(raw["backend"], str):
            raise fail("backend", f"expected a backend name (a string), got {raw['backend']!r}")
        sections["backend"] = raw["backend"]
    for key, cls in (
        ("model", ModelConfig),
        ("workers", WorkersConfig),
        ("checkpoint", CheckpointConfig),
        ("logging", LoggingConfig),
    ):
        if key in raw:
            sections[key] = build(cls, raw[key], key, fail)
    if "stop" in raw:
        sections["stop"] = build_stop(raw["stop"], fail)
    if raw.get("multiagent") is not None:
        sections["multiagent"] = build(MultiAgentConfig, raw["multiagent"], "multiagent", fail)
    if "seed" in raw:
        seed = raw["seed"]
        if is_search_space(seed):
            raise fail(
                "seed", "search spaces are expanded by 'rlgear tune'; 'rlgear train' needs a single seed"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise fail("seed", f"expected a non-negative integer or null, got {seed!r}")
        sections["seed"] = seed
    config = RunConfig(source=source, origins=dict(origins), **sections)
    check_ranges(config, fail)
    if config.multiagent is not None:
        from rlgear.config.multiagent import check_multiagent_config

        check_multiagent_config(config, training_class, fail)
    check_env_adapter(config)
    if algorithm_class is not None:
        check_recurrent_support(config, algorithm_class)
        algorithm_class.check_config(config)  # what the algorithm needs of the other sections
    return config


def check_recurrent_support(config: RunConfig, algorithm_class: type) -> None:
    """``model.lstm`` only for algorithms that learn on sequences (``Trainer.recurrent``)."""
    if config.model.lstm and not getattr(algorithm_class, "recurrent", False):
        name = getattr(algorithm_class, "name", algorithm_class.__name__)
        raise config.fail(
            "model.lstm",
            f"algorithm '{name}' does not support recurrent policies (it stays feed-forward); "
            "set model.lstm: false, or use ppo, pg, a2c, a3c or impala",
        )


def check_env_adapter(config: RunConfig) -> None:
    """The env adapter's own check of the env settings (``EnvAdapter.check_config``: wrappers, video).

    An adapter that is not installed is left to the trainer, which names the installed ones.
    """
    from rlgear.discovery import registry

    if config.env.adapter in registry.names("env"):
        registry.load_env_adapter(config.env.adapter).check_config(config)


def check_result_key(key: str, where: str, fail) -> None:
    """Refuse a name that no result can have (``stop`` keys, ``tune.metric``), with the closest key.

    A key path (``learner/...``, ``evaluation/...``, ``custom_metrics/...``)
    is accepted as it is: which of those exist depends on the algorithm and
    the hooks, and custom metrics appear only once episodes have ended.
    """
    if key not in RESULT_KEYS and "/" not in key:
        raise fail(
            where,
            f"not a result key{did_you_mean(key, RESULT_KEYS)} "
            f"(result keys: {', '.join(RESULT_KEYS)}, learner/*, evaluation/*, custom_metrics/*)",
        )


class ResultKeyCheck:
    """Checks key paths (``custom_metrics/...``, ``learner/...``) against the first results that have them.

    Why: which of those keys exist depends on the algorithm and the hooks, so
    they can't be checked when the config is read; a typo in a stop key would
    otherwise run to the other limit. A path is checked at the first result
    holding any key with its prefix (custom metrics appear once episodes end),
    and must then be one of that result's keys.

    A ``custom_metrics/`` path is also judged when no result has any custom
    metric: custom metrics come only from hooks (``episode.custom_metrics`` in
    ``on_episode_end``, or keys that ``on_train_result`` adds), so a run without
    one usually lacks the hook that records it (not passed, not installed, or
    entry-point hooks turned off). It is refused at the first result at which
    the run (each trial of an experiment, counted apart by the result's
    ``trial_id``) has reported ``CUSTOM_METRICS_GRACE_RESULTS`` (3) results since
    it started or resumed and at least one episode ended during them: by then
    ``on_train_result`` ran on every result and ``on_episode_end`` for at least
    one episode. A run whose episodes never end is not judged. A hook that
    records a metric for only some episodes should record it for every episode
    (0.0 when it does not apply): a stop key or ``tune.metric`` on it is judged
    as soon as any other custom metric is reported, and with none by this rule.
    """

    #: Results (of one run or trial) after which a ``custom_metrics/`` path is judged even when no
    #: result has any ``custom_metrics/`` key, provided an episode ended during them.
    CUSTOM_METRICS_GRACE_RESULTS = 3

    def __init__(self, keys: dict[str, str]):
        #: key path -> where it was given (``stop.custom_metrics/x``, ``tune.metric``)
        self.pending = {key: where for key, where in keys.items() if "/" in key and key not in RESULT_KEYS}
        #: per run or trial (``trial_id``, None for a single run): [results seen, episodes ended in them]
        self._seen: dict[Any, list[int]] = {}

    def check(self, result: Mapping[str, Any]) -> None:
        """Raise ConfigError for a pending key its prefix's keys show to be a typo, or that no hook reports."""
        seen = self._seen.setdefault(result.get("trial_id"), [0, 0])
        seen[0] += 1
        seen[1] += int(result.get("episodes_this_iter") or 0)
        hooks_had_their_chance = seen[0] >= self.CUSTOM_METRICS_GRACE_RESULTS and seen[1] > 0
        for key, where in list(self.pending.items()):
            prefix = key.rsplit("/", 1)[0] + "/"
            have = sorted(k for k in result if str(k).startswith(prefix))
            if not have:
                if prefix == "custom_metrics/" and hooks_had_their_chance:
                    del self.pending[key]
                    raise ConfigError(
                        f"{where}: the results have no key '{key}' (the custom_metrics/* keys of this run: "
                        f"none, after {seen[0]} results and {seen[1]} finished episodes). Custom metrics come "
                        "from hooks (episode.custom_metrics in on_episode_end, or keys on_train_result adds): "
                        "is the hook that records it passed (hooks=[...]) or installed (an rlgear.hooks entry "
                        "point; RLGEAR_DISABLE_PLUGIN_AUTOLOAD=1 turns those off)?"
                    )
                continue  # not reported yet (no episode ended, no evaluation yet)
            del self.pending[key]
            if key not in result:
                shown = ", ".join(have[:12]) + (" ..." if len(have) > 12 else "")
                raise ConfigError(
                    f"{where}: the results have no key '{key}'{did_you_mean(key, have)} "
                    f"(the {prefix}* keys of this run: {shown})"
                )


def build_stop(value: Any, fail) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail("stop", f"expected a mapping of result keys to thresholds, got {value!r}")
    out = {}
    for key, threshold in value.items():
        if is_search_space(threshold):
            raise fail(
                f"stop.{key}", "search spaces are expanded by 'rlgear tune'; 'rlgear train' needs a number"
            )
        check_result_key(str(key), f"stop.{key}", fail)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise fail(f"stop.{key}", f"expected a number (the threshold), got {threshold!r}")
        out[str(key)] = threshold
    return out


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
    if config.model.lstm:
        positive["model.lstm_cell_size"] = config.model.lstm_cell_size
        positive["model.max_seq_len"] = config.model.max_seq_len
        if config.model.custom:
            raise fail(
                "model.lstm",
                "a custom model (model.custom) cannot be combined with the catalog LSTM: "
                "put the recurrence in your own model, or drop model.custom",
            )
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


def check_gradient_keys(config: RunConfig, fail) -> None:
    """Range checks of the keys :class:`TrainingConfig` adds to :class:`BaseTrainingConfig`."""
    if not 0 <= config.training.gamma <= 1:
        raise fail("training.gamma", f"expected a number in [0, 1], got {config.training.gamma}")
    if config.training.lr_schedule is not None:
        for i, point in enumerate(config.training.lr_schedule):
            if len(point) != 2:
                raise fail(f"training.lr_schedule[{i}]", f"expected [timestep, lr], got {point}")
            if point[1] < 0:
                raise fail(
                    f"training.lr_schedule[{i}]", f"the learning rate must not be negative, got {point[1]}"
                )
    check_optimizer(config, fail)


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


#: ``training.optimizer`` names every backend implements itself (no dotted path).
BUILTIN_OPTIMIZERS = ("adam", "sgd", "rmsprop")
#: backend -> what a dotted ``training.optimizer`` of that backend looks like (for the error only).
_OPTIMIZER_EXAMPLES = {"torch": "torch.optim.AdamW", "tf": "tf.keras.optimizers.AdamW"}
_FRAMEWORK_PREFIXES = {"torch": ("torch.",), "tf": ("tf.", "tensorflow.", "keras.")}


def check_optimizer(config: RunConfig, fail) -> None:
    """``training.optimizer`` is a built-in name or a dotted path (of the run's framework, if a known one).

    Whether the path imports and its kwargs fit is checked by the backend when it
    builds the optimizer (importing torch.optim or Keras here would cost seconds).
    """
    name = config.training.optimizer
    if "." not in name and ":" not in name:
        if name not in BUILTIN_OPTIMIZERS:
            example = _OPTIMIZER_EXAMPLES.get(config.backend, "torch.optim.AdamW")
            raise fail(
                "training.optimizer",
                f"unknown optimizer {name!r}{did_you_mean(name, BUILTIN_OPTIMIZERS)} (built-ins: "
                f"{', '.join(BUILTIN_OPTIMIZERS)}; or a dotted path such as {example})",
            )
        return
    for framework, prefixes in _FRAMEWORK_PREFIXES.items():
        if (
            framework != config.backend
            and name.startswith(prefixes)
            and config.backend in _FRAMEWORK_PREFIXES
        ):
            raise fail(
                "training.optimizer",
                f"{name!r} is a {framework} optimizer, and this run's backend is {config.backend} "
                f"(use e.g. {_OPTIMIZER_EXAMPLES[config.backend]}, or --set backend={framework})",
            )


def load(
    path: str | os.PathLike,
    overrides: Sequence[str] = (),
    training_class: type | None = None,
) -> RunConfig:
    """Read, override and validate a YAML config file."""
    return resolve(read_yaml(path), str(path), overrides, training_class)


def from_any(config: RunConfig | Mapping[str, Any] | str | os.PathLike) -> RunConfig:
    """Accept a RunConfig, a raw mapping, or a path to a YAML file (the Python API's input)."""
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, Mapping):
        return resolve(config)
    return load(config)


def dump_yaml(data: Mapping[str, Any]) -> str:
    """YAML of a config, with its secrets redacted (every config file rlgear writes goes through here)."""
    return yaml.safe_dump(redact_secrets(dict(data)), sort_keys=False, default_flow_style=None)


#: What a secret's value becomes in every file rlgear writes (run, checkpoint and experiment configs).
REDACTED = "<redacted>"
_SECRET_NAMES = {
    "token", "password", "passwd", "secret", "api_key", "apikey", "access_key", "secret_key",
    "private_key", "credentials", "auth_token",
}  # fmt: skip
_SECRET_SUFFIXES = ("_token", "_secret", "_password", "_api_key", "_apikey", "_credentials")


def is_secret_key(name: Any) -> bool:
    """Whether a config key holds a secret, by its name (``token``, ``*_password``, ``api_key`` ...).

    Names of environment variables that hold a secret (``token_env``) are not secrets.
    """
    key = str(name).lower()
    return key in _SECRET_NAMES or key.endswith(_SECRET_SUFFIXES)


def redact_secrets(data: Any) -> Any:
    """A copy of ``data`` with the value of every secret key, at any depth, replaced by :data:`REDACTED`.

    Why: run folders and checkpoints get copied, shared and uploaded; a token in
    a config file there would leak with them. A run that needs the secret again
    (``--resume``) takes it from the config it is given, or from ``token_env``.
    """
    if isinstance(data, Mapping):
        return {
            k: (REDACTED if is_secret_key(k) and v is not None else redact_secrets(v))
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact_secrets(v) for v in data]
    return data


def restore_secrets(saved: Any, given: Any) -> Any:
    """``saved`` with each :data:`REDACTED` value taken back from ``given`` at the same path, if it has one."""
    if isinstance(saved, Mapping):
        given_map = given if isinstance(given, Mapping) else {}
        out = {}
        for key, value in saved.items():
            if value == REDACTED and key in given_map and given_map[key] != REDACTED:
                out[key] = given_map[key]
            else:
                out[key] = restore_secrets(value, given_map.get(key))
        return out
    if isinstance(saved, list):
        return [
            restore_secrets(v, given[i] if isinstance(given, list) and i < len(given) else None)
            for i, v in enumerate(saved)
        ]
    return saved
