"""The bases of an algorithm's ``training`` section, and the checks of the keys they declare.

:class:`BaseTrainingConfig` holds the keys the Trainer loop reads (every algorithm has
them); :class:`TrainingConfig` adds the keys of learning by gradient steps (learning
rate, optimizer, gradient clipping, discount, batch size), which an algorithm without
gradient steps (es, ars) leaves out. An algorithm's config class subclasses one of the
two. The range checks of the gradient keys and of ``training.optimizer`` sit here,
beside the fields they check; :func:`rlgear.config.checks.check_ranges` calls them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rlgear.config.schema import doc
from rlgear.errors import did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    from rlgear.config.sections import RunConfig


@dataclass
class BaseTrainingConfig:
    """The keys the Trainer loop itself reads: every algorithm has these.

    An algorithm that takes no gradient step (es, ars, a cross-entropy method)
    derives its config class from this one, so its ``training`` section holds
    only the keys it uses (``training.lr`` on such an algorithm is an unknown
    key). Gradient-based algorithms derive from :class:`TrainingConfig`.
    """

    #: False for an algorithm that learns from a dataset (bc, marwil): its config may leave out the
    #: ``env`` section, which then only serves evaluation episodes.
    requires_env: ClassVar[bool] = True

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
    clip_rewards: bool | float | None = doc(
        "Clip the env's rewards before the algorithm's postprocessing sees them (returns, advantages, "
        "replay rows): true takes their sign (-1, 0, +1; Mnih et al. 2015, the Atari protocol, SB3's and "
        "CleanRL's ClipRewardEnv), a number c clips them to [-c, c], false or null leaves them. Reported "
        "episode returns stay the env's own. Applied on the rollout workers, for every algorithm that "
        "learns from sampled rows.",
        None,
    )


# The base classes in this order keep the fields in the order they always had (gradient keys, loop
# keys, eager): dataclasses collect fields from the last base to the first.
@dataclass
class TrainingConfig(_BackendKeys, BaseTrainingConfig, _GradientKeys):
    """Hyperparameters of every gradient-based algorithm: the loop's keys plus learning rate,
    optimizer, gradient clipping and discount. Algorithms subclass this with their own."""


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
    clip = config.training.clip_rewards
    if clip is not None and not isinstance(clip, bool) and not clip > 0:
        raise fail(
            "training.clip_rewards",
            f"expected true (the sign of each reward), a positive number (clip to [-c, c]) or null, got {clip}",
        )
    check_optimizer(config, fail)


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
