"""The sections of a run config as dataclasses, and :class:`RunConfig` that holds them.

``env`` (:class:`EnvConfig`), ``model`` (:class:`ModelConfig`), ``workers``
(:class:`WorkersConfig`, with ``workers.ray``), ``learners``, ``offline``, ``checkpoint`` and ``logging``: every key
a field declared with :func:`rlgear.config.schema.doc`, so its type, default and help
text sit in one place (the config reference is written from them). The ``training``
section's bases are in :mod:`rlgear.config.training`, the ``multiagent`` section in
:mod:`rlgear.config.multiagent`; :func:`rlgear.config.resolve` builds a
:class:`RunConfig` from a file's mapping.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from rlgear.config.exploration import ExplorationConfig
from rlgear.config.league import LeagueConfig
from rlgear.config.multiagent import MultiAgentConfig
from rlgear.config.overrides import _failer
from rlgear.config.schema import doc
from rlgear.errors import ConfigError


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
    preset: str | None = doc(
        "A named protocol the adapter applies: 'atari' (gymnasium and envpool adapters): Machado et "
        "al. 2018's Atari protocol: v5 sticky actions (0.25), frame skip 4 with max-pooling, 84x84 "
        "grayscale, 4-frame stack (channels last, uint8), up to 30 no-op starts, no terminal on life "
        "loss, minimal action set; env.kwargs override its options by name (docs/atari-mujoco.md). "
        "Pair it with training.clip_rewards: true. null: the env as env.kwargs and env.wrappers make it.",
        None,
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
    critic_hidden_sizes: list[int] | None = doc(
        "mappo: units of each hidden layer of the centralised critic (a network of its own, on "
        "training.critic_input); null: model.hidden_sizes. Other algorithms ignore it.",
        None,
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
        "Act with a numpy copy of the catalog MLP and its conv trunk, or of the LSTM or attention "
        "memory (several times faster for small batches and small images; learning stays in the "
        "framework). Ignored for custom models and model.relational (no numpy twin: it acts in "
        "the framework).",
        True,
    )
    custom: str | None = doc(
        "'module:Class' of your own network for the backend in use; see the README's model section.",
        None,
    )
    custom_options: dict[str, Any] = doc("Keyword arguments passed to the custom model.", factory=dict)
    lstm: bool = doc(
        "Recurrent policy: the MLP's hidden layers (shared by policy and value), then one LSTM layer, "
        "then the policy and value heads. Supported by ppo, pg, a2c, a3c, impala and appo (not dqn).",
        False,
    )
    lstm_cell_size: int = doc("Units of the LSTM cell (model.lstm).", 256)
    max_seq_len: int = doc(
        "Longest sequence the learner backpropagates through (model.lstm, model.attention): fragments "
        "are cut into chunks of at most this many steps that never cross an episode boundary.",
        20,
    )
    lstm_use_prev_action: bool = doc(
        "Feed the previous action (one-hot for Discrete) to the LSTM with the observation features.", False
    )
    lstm_use_prev_reward: bool = doc(
        "Feed the previous reward to the LSTM with the observation features.", False
    )
    attention: bool = doc(
        "Recurrent policy with attention memory (GTrXL, Parisotto et al. 2019): the MLP's hidden "
        "layers, a projection to attention_dim, attention_layers gated transformer blocks that attend "
        "over the last attention_memory steps of the episode, then the policy and value heads. "
        "Its recurrent state is that memory, carried like the LSTM's (docs/recurrent.md). Supported "
        "by ppo, pg, a2c, a3c, impala and appo; not together with model.lstm.",
        False,
    )
    attention_dim: int = doc("Width of the attention memory's blocks (model.attention).", 64)
    attention_heads: int = doc(
        "Attention heads per block (model.attention); each head has attention_dim / attention_heads "
        "units, so attention_dim must be a multiple of it.",
        2,
    )
    attention_layers: int = doc("Gated transformer blocks (model.attention).", 2)
    attention_memory: int = doc(
        "Steps remembered (model.attention): each step attends to itself and to at most this many "
        "earlier steps of its episode, when acting and when learning alike.",
        32,
    )
    attention_mlp_dim: int | None = doc(
        "Hidden units of each block's MLP (model.attention); null: 4 x attention_dim.", None
    )
    relational: bool = doc(
        "Relational module (Zambaldi et al. 2018) as the MLP's encoder: multi-head self-attention over "
        "entities (the conv trunk's cells plus their coordinates for an image; the rows of a 2-D Box "
        "[entities, features], all-zero rows being absent), relational_blocks pre-layer-norm "
        "transformer blocks, then a feature-wise max over the entities into the hidden_sizes MLP "
        "(docs/models.md). Supported by ppo, pg, a2c, a3c, impala and appo; not together with "
        "model.lstm, model.attention or model.custom.",
        False,
    )
    relational_dim: int = doc("Width of the entity embeddings (model.relational).", 64)
    relational_heads: int = doc(
        "Attention heads per block (model.relational); relational_dim must be a multiple of it.", 2
    )
    relational_blocks: int = doc("Attention blocks applied in turn (model.relational).", 2)
    relational_shared_weights: bool = doc(
        "One block's weights applied relational_blocks times (as in the paper's shared-weights "
        "variant); false: separate weights per block (model.relational).",
        False,
    )
    relational_mlp_dim: int | None = doc(
        "Hidden units of each block's MLP (model.relational); null: 2 x relational_dim.", None
    )

    @property
    def recurrent(self) -> bool:
        """Whether the catalog model carries a recurrent state (``lstm`` or ``attention``)."""
        return bool(self.lstm or self.attention)


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


#: ``learners.device`` values: ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``.
DEVICE_PATTERN = r"auto|cpu|cuda|cuda:\d+|mps"


@dataclass
class LearnersConfig:
    """Learning: on which device, and in how many learner processes (see docs/learners.md)."""

    num_learners: int = doc(
        "0: the learner lives in the driver process (no Ray needed). N >= 1: N learner actors on Ray; "
        "with N >= 2 each takes a shard of every minibatch and the gradients are all-reduced "
        "(torch.distributed: gloo on CPU, NCCL on GPU), the same update as one learner on the whole "
        "minibatch.",
        0,
    )
    device: str = doc(
        "Where the learner's model and optimizer live: auto | cpu | cuda | cuda:N | mps. 'auto' picks "
        "the GPU for conv and LSTM models when one is present, the CPU for MLPs (small MLPs train "
        "faster on the CPU). Acting stays on the CPU (numpy twin) and gets the weights after each update.",
        "auto",
    )
    num_cpus_per_learner: int = doc(
        "CPUs (Ray resource and framework threads) of each learner actor (num_learners >= 1).", 1
    )
    num_gpus_per_learner: float = doc(
        "GPUs (Ray resource, may be fractional) of each learner actor (num_learners >= 1). A learner "
        "actor sees only the GPUs Ray gives it: learners.device cuda needs this > 0, and with 0 'auto' "
        "learns on the CPU.",
        0.0,
    )
    placement: Literal["pack", "spread"] = doc(
        "How learner actors are placed on a cluster's nodes: 'pack' fills a node first, 'spread' "
        "puts each on another node where it can (a Ray placement group strategy).",
        "pack",
    )
    max_restarts: int = doc(
        "Learner replacements allowed before the run writes its last good checkpoint and stops "
        "(a learner actor that dies is replaced from the last weights).",
        3,
    )


@dataclass
class OfflineConfig:
    """Datasets: record a run's transitions to a Minari dataset, or read datasets (docs/offline.md).

    A value starting with ``/``, ``./``, ``../`` or ``~`` (or naming an existing folder) is a path;
    anything else is a Minari dataset id (``namespace/name-vN``), found under
    ``MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``) as :func:`minari.load_dataset` finds it.
    """

    input: str | list[str] | None = doc(
        "Dataset(s) the offline algorithms learn from: a Minari dataset id, a path to a dataset "
        "folder, or a list of them (same spaces). null: no dataset.",
        None,
    )
    output: str | None = doc(
        "Record every env transition of this run (train, serve, remote workers) to a Minari "
        "dataset: an id (written under MINARI_DATASETS_PATH) or a folder path. Written to a "
        "temporary folder and moved into place when the run ends (Ctrl-C included). null: no recording.",
        None,
    )
    output_overwrite: bool = doc(
        "Replace a dataset that already exists at offline.output (else the run refuses to start).", False
    )
    output_author: str | None = doc("The dataset's 'author' metadata (Minari's).", None)
    output_description: str | None = doc("The dataset's 'description' metadata (Minari's).", None)
    output_flush_episodes: int = doc(
        "Finished episodes kept in memory before they are appended to the dataset's file.", 64
    )
    input_shuffle_buffer_episodes: int = doc(
        "Episodes held in memory by transitions() to draw random transitions from (bounds memory "
        "for datasets larger than memory; the whole dataset when it has fewer).",
        1000,
    )


@dataclass
class CheckpointConfig:
    every: int = doc("Write a checkpoint every N iterations (0: only at the end).", 0)
    keep: int | None = doc("Keep only the newest K checkpoints (null: keep all).", 5)
    at_end: bool = doc("Write a checkpoint when the run ends (stop reached or Ctrl-C).", True)
    init_from: str | None = doc(
        "Start this run's policies from another run's weights: a checkpoint folder, or a run folder "
        "(its newest checkpoint). How an offline run continues online (cql -> sac, discrete_cql -> "
        "dqn); any checkpoint whose weights and spaces fit works. Weights and observation-filter "
        "statistics only: optimizer, counters and replay start fresh. null: fresh weights.",
        None,
    )


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


#: The keys a config file may have at its top level (``tune`` is read by ``rlgear tune`` only).
TOP_LEVEL_KEYS = (
    "algorithm", "backend", "env", "model", "training", "workers", "learners", "offline",
    "exploration", "stop", "checkpoint", "logging", "seed", "multiagent", "league",
    "tune",
)  # fmt: skip


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
    learners: LearnersConfig = dataclasses.field(default_factory=LearnersConfig)
    offline: OfflineConfig = dataclasses.field(default_factory=OfflineConfig)
    #: The ``exploration`` section: the plugin's options class (:mod:`rlgear.config.exploration`).
    exploration: ExplorationConfig = dataclasses.field(default_factory=ExplorationConfig)
    stop: dict[str, float] = dataclasses.field(default_factory=dict)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    seed: int | None = None
    #: The ``multiagent`` section (None when the config has none: one policy, ``default``).
    multiagent: MultiAgentConfig | None = None
    #: The ``league`` section (None without one): league self-play (:mod:`rlgear.config.league`).
    league: LeagueConfig | None = None
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
        if out["league"] is None:
            out.pop("league")
        return out

    @property
    def has_env(self) -> bool:
        """False for a run without an ``env`` section (offline algorithms: ``env.name`` is empty)."""
        return bool(self.env.name)

    def fail(self, path: str, message: str) -> ConfigError:
        """A ConfigError about key ``path``, prefixed as config errors are: ``FILE: path: ...`` or
        ``--set path=value: path: ...``. For plugin code (an adapter's ``make``, a Trainer's
        ``setup``) that checks its own keys: ``raise config.fail("env.kwargs.size", "expected > 0")``."""
        return _failer(self.source, self.origins)(path, message)

    def rollout_fragment_length(self, envs_per_step: int | None = None) -> int:
        """Env steps per env per sample() call, resolving 'auto' from the batch size; ``envs_per_step``:
        the envs a worker steps at once when fewer than its ``num_envs_per_worker`` (an async pool)."""
        w = self.workers
        if w.rollout_fragment_length != "auto":
            return int(w.rollout_fragment_length)
        batch_size = getattr(self.training, "train_batch_size", None)
        if batch_size is None:  # an algorithm that samples no fragments by batch size (es, ars)
            return AUTO_FRAGMENT_LENGTH
        envs = (envs_per_step or w.num_envs_per_worker) * max(1, w.num_workers)
        return max(1, -(-int(batch_size) // envs))
