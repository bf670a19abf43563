"""The exploration contract: intrinsic rewards from a plugin of the ``rlgear.exploration`` group.

An exploration plugin (RND: Burda et al. 2018; ICM: Pathak et al. 2017 ...) is an
:class:`Exploration` subclass registered under the entry-point group ``rlgear.exploration`` and
chosen by the run config's ``exploration: {name: ..., <options>}`` section. It declares:

- ``config_class``: its options, a dataclass subclassing
  :class:`~rlgear.config.exploration.ExplorationConfig` (fields made with ``doc()``, a
  ``check(fail)`` whose errors name ``exploration.<key>``);
- ``modules``: ``{backend: "module:Class"}``, its networks per backend, each an
  :class:`ExplorationModule` (numpy in, numpy out);
- ``algorithms``: ``{algorithm name: mode}``, the algorithms it works with and how
  (:data:`REWARD_MODE`: the normalized intrinsic reward is added to the env's reward before the
  algorithm's postprocessing, for any algorithm; :data:`VALUE_MODE`: the module has its own
  intrinsic value head and the intrinsic advantages, non-episodic GAE, are mixed into the
  algorithm's GAE advantages, for ppo and a2c). A run with another algorithm is refused.

Where it lives (why no new plumbing): the module is built inside each policy by the backend's
base policy (:class:`ExplorationHost`), its weights merged into the policy's under
``exploration/<name>`` and its optimizer state and generator into the policy's state. So remote
workers get it with the weight sync, and checkpoints (and ``rlgear export``-free restores) hold
it. Its running statistics (observation normalization, intrinsic-return std) are updated on the
learner and travel as weights. The sampling side is :mod:`rlgear.sampling.intrinsic`; the
learner trains the module on freshly sampled rows once per training step
(:meth:`rlgear.learner.Learner.learn_exploration`).
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from rlgear.config.exploration import ExplorationConfig
from rlgear.errors import UnsupportedError
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Space

__all__ = [
    "REWARD_MODE",
    "VALUE_MODE",
    "Exploration",
    "ExplorationConfig",
    "ExplorationHost",
    "ExplorationModule",
    "RunningMeanStd",
    "exploration_plugin",
]

#: The intrinsic reward is added to the env's reward before the algorithm's postprocessing.
REWARD_MODE = "reward"
#: The module's intrinsic value head gives intrinsic advantages mixed into the algorithm's (GAE).
VALUE_MODE = "value"

#: Batch columns the sampling side adds for the learner (dropped before the algorithm learns); every
#: one starts with :data:`COLUMN_PREFIX`, which is how the learner finds them.
COLUMN_PREFIX = "exploration_"
NEXT_OBS = "exploration_next_obs"  # obs[t+1] of row t (one step, unlike n-step ``next_obs``)
INTRINSIC_REWARDS = "exploration_rewards"  # the raw (unnormalized) intrinsic reward of row t
INTRINSIC_RETURNS = "exploration_returns"  # the running non-episodic discounted intrinsic return
INTRINSIC_ADVANTAGES = "exploration_advantages"  # value mode
INTRINSIC_VALUE_TARGETS = "exploration_value_targets"  # value mode
COLUMNS = (NEXT_OBS, INTRINSIC_REWARDS, INTRINSIC_RETURNS, INTRINSIC_ADVANTAGES, INTRINSIC_VALUE_TARGETS)

#: Policy weights of the module are ``exploration/<module weight name>``.
WEIGHTS_PREFIX = "exploration/"
#: Policy-state arrays of the module (optimizer tensors ...) are ``exploration_state/<name>``.
STATE_PREFIX = "exploration_state/"


class Exploration:
    """Base class of exploration plugins (entry-point group ``rlgear.exploration``).

    Class attributes a subclass sets: ``name``, ``description`` (one line for ``rlgear plugins``),
    ``config_class``, ``modules`` and ``algorithms`` (see the module docstring).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    config_class: ClassVar[type] = ExplorationConfig
    modules: ClassVar[dict[str, str]] = {}
    algorithms: ClassVar[dict[str, str]] = {}

    @classmethod
    def mode(cls, algorithm: str) -> str:
        """How this plugin works with ``algorithm``: :data:`REWARD_MODE` or :data:`VALUE_MODE`."""
        return cls.algorithms[algorithm]

    @classmethod
    def module_class(cls, backend: str) -> type:
        """The :class:`ExplorationModule` of ``backend`` (imported now)."""
        from rlgear.discovery import registry

        if backend not in cls.modules:
            supported = ", ".join(sorted(cls.modules)) or "none"
            raise UnsupportedError(
                f"exploration '{cls.name}' has no module for backend '{backend}' (it has: {supported})"
            )
        return registry.resolve_object(cls.modules[backend], f"exploration '{cls.name}' module")


def exploration_plugin(name: str) -> type[Exploration]:
    """The Exploration subclass registered as ``name``."""
    from rlgear.discovery import registry

    return registry.load_exploration(name)


class ExplorationModule(ABC):
    """An exploration plugin's networks on one backend: numpy in, numpy out.

    Built from ``(observation_space, action_space, options, seed)``; ``observation_space`` is the
    policy's (preprocessed) one, and observations arrive as the policy sees them. Weight names are
    neutral and identical on every backend (dense kernels ``[in, out]``), so a checkpoint of one
    backend loads into the other.
    """

    def __init__(self, observation_space: Space, action_space: Space, options: Any, seed: int | None):
        self.observation_space = observation_space
        self.action_space = action_space
        self.options = options

    @abstractmethod
    def intrinsic_rewards(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        """float32 ``[N]``: the raw intrinsic reward of each transition (before normalization)."""

    def reward_scale(self) -> float:
        """What the raw intrinsic rewards are divided by before use (RND: the running std of the
        non-episodic discounted intrinsic return). Default 1."""
        return 1.0

    def intrinsic_values(self, obs: np.ndarray) -> np.ndarray:
        """float32 ``[N]``: the intrinsic value head's values (value mode only)."""
        raise NotImplementedError(f"{type(self).__name__} has no intrinsic value head")

    @abstractmethod
    def learn(self, rows: SampleBatch) -> dict[str, float]:
        """Train on freshly sampled rows (``obs``, ``actions``, :data:`NEXT_OBS`,
        :data:`INTRINSIC_RETURNS`, and in value mode :data:`INTRINSIC_VALUE_TARGETS`); returns stats."""

    @abstractmethod
    def get_weights(self) -> dict[str, np.ndarray]:
        """Weights and running statistics, ``{neutral name: array}``."""

    @abstractmethod
    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load what :meth:`get_weights` gave (checking every name and shape first)."""

    @abstractmethod
    def get_state(self) -> PolicyState:
        """Optimizer state and generators (the weights travel separately)."""

    @abstractmethod
    def set_state(self, state: PolicyState) -> None:
        """Restore what :meth:`get_state` gave."""

    def to_device(self, device: str) -> None:
        """Learn on ``device``; the default stays on the CPU."""

    def reseed(self, seed: int) -> None:
        """New random streams (PBT exploits); the default reseeds every numpy Generator attribute."""
        for name, value in list(vars(self).items()):
            if isinstance(value, np.random.Generator):
                setattr(self, name, np.random.default_rng([int(seed), zlib.crc32(name.encode())]))


class RunningMeanStd:
    """Running mean and variance of a stream of ``[*shape]`` values (float64), as in Burda et al.'s
    code and CleanRL (``update_from_moments``: Chan et al.'s parallel rule); ``count`` starts at
    1e-4, mean 0, variance 1."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)
        if values.shape[0] == 0:
            return
        batch_mean, batch_var, n = values.mean(axis=0), values.var(axis=0), values.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.var = m2 / total
        self.count = total

    def get(self, prefix: str) -> dict[str, np.ndarray]:
        # float64, as kept: a checkpoint restores the statistics exactly
        return {
            f"{prefix}/mean": self.mean.copy(),
            f"{prefix}/var": self.var.copy(),
            f"{prefix}/count": np.asarray([self.count], np.float64),
        }

    def check(self, weights: dict[str, np.ndarray], prefix: str) -> None:
        for key, shape in (("mean", self.mean.shape), ("var", self.var.shape), ("count", (1,))):
            name = f"{prefix}/{key}"
            if name not in weights:
                raise ValueError(f"exploration weights are missing '{name}'")
            if np.shape(weights[name]) != shape:
                raise ValueError(
                    f"exploration weight '{name}' has shape {np.shape(weights[name])}, expected {shape}"
                )

    def set(self, weights: dict[str, np.ndarray], prefix: str) -> None:
        self.mean = np.asarray(weights[f"{prefix}/mean"], np.float64).copy()
        self.var = np.asarray(weights[f"{prefix}/var"], np.float64).copy()
        self.count = float(np.asarray(weights[f"{prefix}/count"]).reshape(-1)[0])


class ExplorationHost:
    """Mixed into a backend's base policy (first among its bases): builds the exploration module
    when ``config.exploration.name`` is set and merges its weights and state into the policy's.

    ``exploration_backend`` is the backend name whose module the policy builds. Without an
    exploration plugin every method passes straight through.
    """

    exploration_backend: ClassVar[str] = ""
    exploration_module: ExplorationModule | None = None

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)  # type: ignore[call-arg]
        options = getattr(config, "exploration", None)
        if options is not None and options.name is not None:
            module_class = exploration_plugin(options.name).module_class(self.exploration_backend)
            try:
                self.exploration_module = module_class(observation_space, action_space, options, config.seed)
            except UnsupportedError as err:
                raise _naming_the_file(config, err) from err

    def get_weights(self) -> dict[str, np.ndarray]:
        weights = super().get_weights()  # type: ignore[misc]
        if self.exploration_module is not None:
            for name, value in self.exploration_module.get_weights().items():
                weights[WEIGHTS_PREFIX + name] = value
        return weights

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        module = self.exploration_module
        own = {k: v for k, v in weights.items() if not k.startswith(WEIGHTS_PREFIX)}
        if module is not None:
            theirs = {
                k.removeprefix(WEIGHTS_PREFIX): v for k, v in weights.items() if k.startswith(WEIGHTS_PREFIX)
            }
            module.set_weights(theirs)  # checks first: raises before anything changes
        super().set_weights(own)  # type: ignore[misc]

    def get_state(self) -> PolicyState:
        state = super().get_state()  # type: ignore[misc]
        if self.exploration_module is not None:
            module_state = self.exploration_module.get_state()
            for name, value in module_state.arrays.items():
                state.arrays[STATE_PREFIX + name] = value
            state.meta["exploration"] = module_state.meta
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)  # type: ignore[misc]  (its set_weights loads the module's weights)
        if self.exploration_module is not None and "exploration" in state.meta:
            arrays = {
                k.removeprefix(STATE_PREFIX): v for k, v in state.arrays.items() if k.startswith(STATE_PREFIX)
            }
            self.exploration_module.set_state(PolicyState(arrays=arrays, meta=state.meta["exploration"]))

    def to_device(self, device: str) -> None:
        super().to_device(device)  # type: ignore[misc]
        if self.exploration_module is not None:
            self.exploration_module.to_device(device)

    def reseed(self, seed: int) -> None:
        super().reseed(seed)  # type: ignore[misc]
        if self.exploration_module is not None:
            self.exploration_module.reseed(seed)


def _naming_the_file(config: Any, err: UnsupportedError) -> UnsupportedError:
    """A module's refusal of the env's spaces (ICM's of Box actions), prefixed as config errors
    are (``FILE: exploration.name: ...``): the module sees only spaces and options, so its message
    names the key but cannot name the file the user has to edit."""
    fail = getattr(config, "fail", None)
    if fail is None:  # a policy built from a bare config object, outside a run
        return err
    message = str(err).removeprefix("exploration.name: ")
    return UnsupportedError(str(fail("exploration.name", message)))
