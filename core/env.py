"""The environment-adapter contract.

An env adapter (entry-point group ``rlgear.envs``) builds vectorized
environments that emit :class:`~rlgear.timestep.TimeStep` batches with ALF
semantics. ``rlgear`` talks to environments only through this contract, so a
gymnasium env, a simulator in another process, or a fleet of clients over the
network all look the same to the evaluator.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from rlgear.errors import CheckpointError, RLGearError
from rlgear.spaces import Space
from rlgear.timestep import TimeStep

#: Set by the runner when the user asks the run to stop (Ctrl-C, SIGTERM). An env
#: that can block waiting for input (clients over the network) checks it while
#: waiting and raises :class:`EnvInterrupted`, so the run still checkpoints and exits.
stop_requested = threading.Event()


#: The ``TimeStep.info`` key (gymnasium layout: an array over the envs, its mask under ``_env_return``)
#: through which an adapter whose wrappers change the rewards it emits (reward normalization,
#: clipping, scaling) reports the env's own return so far. Why: a run is judged by the env's
#: returns (``stop: {episode_return_mean: 475}``), while training sees the wrapped rewards; SB3
#: reports its Monitor's returns beneath ``VecNormalize`` the same way. Read at an episode's LAST
#: step, it becomes the episode's ``episode_return`` (the sum of the emitted rewards goes to
#: ``wrapped_return``); an adapter that sets no such key reports the sum of the emitted rewards.
ENV_RETURN_INFO_KEY = "env_return"


class EnvInterrupted(RLGearError):
    """An env stopped waiting for input because the run was asked to stop."""


class PolicyExport(Protocol):
    """The acting policy as a file a client can run: what a rollout worker hands an env that asks.

    Why: an external client may act on its own copy of the policy (docs/protocol.md section 10),
    but an env adapter never owns the policy; the run gives it this instead
    (:class:`rlgear.export.live.LivePolicyExport`).
    """

    def version(self) -> int:
        """The acting policy's weights version now (cheap: no export)."""

    def export(self) -> tuple[int, bytes, dict[str, Any]]:
        """``(weights version, ONNX bytes, sidecar)`` of the policy now (seconds; cache it per version)."""


class VectorEnv(ABC):
    """``num_envs`` environments stepped together.

    Contract (``rlgear.testing.check_vector_env`` checks an implementation):

    * ``reset`` returns a TimeStep with every env at FIRST.
    * ``step(actions)`` returns the next TimeStep. An env whose previous step
      was LAST starts a new episode: it ignores its action and returns FIRST
      with reward 0 (gymnasium's next-step autoreset).
    * Terminated episodes end with LAST and discount 0, truncated ones (time
      limits, the run's ``horizon``) with LAST and discount 1.
    * Each TimeStep owns its arrays: callers may keep it across steps.
    """

    num_envs: int
    observation_space: Space
    action_space: Space
    #: True for an env whose TimeSteps may carry ``taken`` (actions chosen outside the run, see
    #: :class:`~rlgear.timestep.TakenActions`): the sampler then records them. Off by default.
    takes_actions: ClassVar[bool] = False
    #: True for an env that wants the acting policy as a file (:meth:`set_policy_export`).
    wants_policy_export: ClassVar[bool] = False

    def set_policy_export(self, export: PolicyExport) -> None:
        """Receive the acting policy's exporter (called once, before sampling, when
        :attr:`wants_policy_export` is True; the default ignores it)."""

    @abstractmethod
    def reset(self, seed: int | None = None) -> TimeStep:
        """Start an episode in every env; env ``i`` is seeded with ``seed + i``."""

    @abstractmethod
    def step(self, actions: np.ndarray) -> TimeStep:
        """Apply ``actions`` (``[num_envs, *action_shape]``, within the action bounds)."""

    def close(self) -> None:
        """Release processes, sockets and files."""

    def get_state(self) -> dict[str, np.ndarray]:
        """Arrays a checkpoint keeps for these envs: running statistics that change what the policy
        sees (``env.wrappers_vector``: NormalizeObservation's mean and variance ...). None by default.

        Why: a policy trained on normalized observations is wrong on raw ones; a resumed run and
        ``rlgear evaluate`` must normalize with the statistics training reached.
        """
        return {}

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`get_state` returned (the default has no state and refuses any)."""
        if arrays:
            raise CheckpointError(
                f"the checkpoint holds env state ({', '.join(sorted(arrays))}) that these envs do not have: "
                "were env.wrappers_vector changed?"
            )

    def freeze_statistics(self) -> None:
        """Stop updating the statistics of :meth:`get_state` (evaluation envs use them as they are)."""


@dataclass
class MultiAgentTimeStep:
    """One step of ``num_envs`` multi-agent envs: a :class:`TimeStep` per agent, over the env slots.

    ``steps[agent]`` holds arrays ``[num_envs]`` for every agent in ``possible_agents``;
    ``active[agent]`` (bool ``[num_envs]``) says in which env slots the agent has a step now.
    Rows where it is False carry nothing (zeros, step_type LAST, discount 0; an action mask there is
    all False): they are never acted on, counted or trained on. This is the vectorized form of "per env slot, a dict of the
    agents that have a step": one array per agent instead of one dict per slot, so a policy acts
    on all its agents of all slots in one call.

    Each agent's stream, read over the steps where it is active in a slot, follows the
    single-agent ALF table on its own:

    ============================  =============================================================
    the agent's step              step_type / reward / discount
    ============================  =============================================================
    its first step of an episode  FIRST, reward 0, discount 1 (at the env's reset, or later:
                                  an agent may join late)
    a later step where it acts    MID, reward = everything it received since its previous step
                                  (in turn-based games: during the other agents' turns too)
    it is terminated              LAST, discount 0 (its action here is ignored); it is then
                                  inactive until the env's next episode
    it is truncated               LAST, discount 1 (the return bootstraps from its value)
    the env's episode ends        every agent still active gets LAST in that step: discount 0
                                  if it terminated, 1 if the env truncated (time limit, the
                                  run's ``horizon``)
    ============================  =============================================================

    ``episode_end[i]`` is True at the step where env slot ``i``'s episode ended (every agent
    that took part has had its LAST by then); the slot's next step is a reset, whose actions are
    ignored, where the agents present get FIRST (next-step autoreset, as single-agent).
    Reward an agent receives after its own LAST is dropped. ``prev_action`` is the agent's own
    previous action (zeros at its FIRST), not the last action taken in the env: in turn-based games
    these differ. In a turn-based game only the agent to move is present at the reset; the others
    get their FIRST at their first move.

    ``steps[agent].info`` is the agent's own info (gymnasium's vector layout, as
    :attr:`TimeStep.info`), or None; ``episode.last_info`` in ``on_episode_end`` is
    ``{agent: its info row}`` for the agents that have a step when the episode ends.

    ``state`` (optional, None by default) is the env's global state ``[num_envs, ...]`` at this
    step (PettingZoo's ``state()``), in :attr:`MultiAgentVectorEnv.state_space`: what a
    centralised critic (``algorithm: mappo``) sees. The sampler records it with every active
    agent's row only when it is given, so envs without one cost nothing.
    """

    steps: dict[str, TimeStep]
    active: dict[str, np.ndarray]
    episode_end: np.ndarray  # bool [num_envs]
    state: np.ndarray | None = None
    #: bool ``[num_envs]``: the slots whose env stepped in this call, for an env that steps only some
    #: of its slots per call (an asynchronous pool: :attr:`MultiAgentVectorEnv.steps_per_call`); a
    #: slot that did not step has no active agent, and its episode's reset comes when it next steps.
    #: None (the default): every slot stepped.
    stepped: np.ndarray | None = None

    @property
    def num_envs(self) -> int:
        return int(self.episode_end.shape[0])


class MultiAgentVectorEnv(ABC):
    """``num_envs`` multi-agent environments stepped together (PettingZoo's envs, a team game ...).

    What an env adapter's ``make`` returns instead of a :class:`VectorEnv` for an env with several
    agents. The contract (``rlgear.testing.check_multi_agent_env`` checks an implementation) is the
    table of :class:`MultiAgentTimeStep`; ``reset`` gives FIRST to the agents present at the start,
    in every slot. Each returned MultiAgentTimeStep owns its arrays.
    """

    num_envs: int
    #: Every agent id that can appear, in a fixed order.
    possible_agents: tuple[str, ...]
    observation_spaces: dict[str, Space]
    action_spaces: dict[str, Space]
    #: The space of :attr:`MultiAgentTimeStep.state` (the env's global state), or None when the env
    #: gives none; an env that sets it gives ``state`` with every step.
    state_space: Space | None = None
    #: True for an env where a slot may have no agent acting at a step, its episode going on without
    #: them (:class:`rlgear.league.env.LeagueEnv`: the opponent's turn is played inside the env);
    #: False (the default): every slot has an agent acting at its reset, which the contract check holds.
    idle_slots: bool = False
    #: How many slots step per :meth:`step` call: ``num_envs`` (None) except for an asynchronous pool,
    #: which steps the ``steps_per_call`` envs that came back first (:attr:`MultiAgentTimeStep.stepped`).
    steps_per_call: int | None = None
    #: True for a single-agent env presented as a one-agent MultiAgentVectorEnv only so that it can
    #: step some slots per call: the run is single-agent (one policy, its spaces in
    #: ``observation_space`` and ``action_space``, single-agent metrics and checkpoints).
    one_agent: bool = False

    @abstractmethod
    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        """Start an episode in every env; env ``i`` is seeded with ``seed + i``."""

    @abstractmethod
    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        """Apply ``actions[agent]`` (``[num_envs, *action_shape]``); rows of slots where the agent
        was not active, or was at LAST, are ignored, and an agent active nowhere may be left out."""

    def close(self) -> None:
        """Release processes, sockets and files."""

    def get_state(self) -> dict[str, np.ndarray]:
        """Arrays a checkpoint keeps for these envs (see :meth:`VectorEnv.get_state`); none by default."""
        return {}

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`get_state` returned (the default has no state and refuses any)."""
        if arrays:
            raise CheckpointError(
                f"the checkpoint holds env state ({', '.join(sorted(arrays))}) that these envs do not have"
            )

    def freeze_statistics(self) -> None:
        """Stop updating the statistics of :meth:`get_state`."""


@dataclass
class VideoRequest:
    """Record episodes of env 0 as mp4 files (``make(..., video=VideoRequest(...))``).

    The adapter wraps env 0 so that each episode that starts while :meth:`wants` says
    so is written to ``folder/<name_prefix>-episode-<id>.mp4``; the caller arms it
    with :meth:`arm` right before the episodes it wants, so resets done while setting
    up record nothing. ``started`` lists the ids of the episodes recorded so far.
    """

    folder: str
    name_prefix: str = "rlgear"
    remaining: int = 0
    started: list[int] = field(default_factory=list)

    def arm(self, episodes: int) -> None:
        """Record the next ``episodes`` episodes that start."""
        self.remaining = int(episodes)

    def wants(self, episode_id: int) -> bool:
        """Whether the episode starting now (the env's ``episode_id``-th reset) is recorded."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        self.started.append(int(episode_id))
        return True

    def path(self, episode_id: int) -> Path:
        """The file the episode ``episode_id`` is written to (once it ended or the env closed)."""
        return Path(self.folder) / f"{self.name_prefix}-episode-{episode_id}.mp4"


class EnvAdapter(ABC):
    """What an ``rlgear.envs`` entry point resolves to. Instantiated with no arguments."""

    #: One line shown by ``rlgear plugins``.
    description: ClassVar[str] = ""
    #: The env ``rlgear plugins --check`` builds when it is given no ``--env-name``
    #: (None: the first of the adapter's ``names``, if it lists the env names it builds).
    default_env: ClassVar[str | None] = None
    #: ``env.kwargs`` for that env in ``rlgear plugins --check``.
    default_env_kwargs: ClassVar[dict[str, Any]] = {}
    #: Why ``rlgear plugins --check`` cannot step this adapter's envs in its own process
    #: (e.g. clients play them over the network); empty when it can.
    check_skip_reason: ClassVar[str] = ""
    #: Whether ``make`` takes ``video=`` (a :class:`VideoRequest`): ``rlgear evaluate --video``
    #: and ``training.evaluation_video_every`` need it.
    records_video: ClassVar[bool] = False
    #: The gymnasium-wrapper keys of ``env`` that ``make`` takes and applies: ``"wrappers"``
    #: (around each env), ``"wrappers_vector"`` (around the vector env). The base
    #: :meth:`check_config` refuses the others when the config sets them.
    applies_wrappers: ClassVar[tuple[str, ...]] = ()
    #: The ``env.preset`` names ``make`` takes (as ``preset=``); the base :meth:`check_config`
    #: refuses the others.
    presets: ClassVar[tuple[str, ...]] = ()
    #: The ``env.vectorization`` values ``make`` honours; the base :meth:`check_config`
    #: refuses the others.
    vectorizations: ClassVar[tuple[str, ...]] = ("auto", "sync", "async", "native")
    #: Why ``make`` refuses what the two attributes above leave out, completing "the <adapter>
    #: adapter ..." in the error message (the envpool adapter: "steps all envs in one C++ pool").
    steps_envs: ClassVar[str] = "batches its envs itself"

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Refuse env settings this adapter can't apply, when the config is read (before anything runs).

        Raise ``config.fail(path, message)``. This base check, written once for every adapter,
        refuses what the class attributes say ``make`` can't take: ``env.wrappers`` and
        ``env.wrappers_vector`` (gymnasium wrappers) outside :attr:`applies_wrappers`, an
        ``env.preset`` outside :attr:`presets`, an
        ``env.vectorization`` outside :attr:`vectorizations`, and
        ``training.evaluation_video_every`` unless :attr:`records_video`. An adapter that
        checks more (the wrappers it applies) overrides this and calls it first.
        """
        name = config.env.adapter
        for key in ("wrappers", "wrappers_vector"):
            if not getattr(config.env, key) or key in cls.applies_wrappers:
                continue
            if key == "wrappers" and "wrappers_vector" in cls.applies_wrappers:
                raise config.fail(
                    "env.wrappers",
                    f"the {name} adapter {cls.steps_envs}, so per-env gymnasium wrappers cannot apply; "
                    "use env.wrappers_vector, or the gymnasium adapter",
                )
            raise config.fail(
                f"env.{key}",
                f"env adapter '{name}' does not apply gymnasium wrappers (the gymnasium adapter "
                "does); remove the key, or wrap the env on its side",
            )
        preset = getattr(config.env, "preset", None)
        if preset is not None and preset not in cls.presets:
            known = f"its presets: {', '.join(cls.presets)}" if cls.presets else "it has none"
            raise config.fail("env.preset", f"the {name} adapter has no preset '{preset}' ({known})")
        if config.env.vectorization not in cls.vectorizations:
            raise config.fail(
                "env.vectorization",
                f"'{config.env.vectorization}' does not apply to the {name} adapter (it {cls.steps_envs}); "
                f"use {' or '.join(cls.vectorizations)}",
            )
        if not cls.records_video and getattr(config.training, "evaluation_video_every", 0):
            raise config.fail(
                "training.evaluation_video_every",
                f"env adapter '{name}' cannot record videos (the gymnasium adapter can); set it to 0",
            )

    @abstractmethod
    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "sync",
        horizon: int | None = None,
        worker_index: int = 0,
    ) -> VectorEnv | MultiAgentVectorEnv:
        """Build ``num_envs`` copies of env ``name`` (a :class:`MultiAgentVectorEnv` for a multi-agent env).

        ``horizon``, when given, must truncate every episode after that many
        steps (LAST with discount 1), regardless of the env's own time limit.
        Raise :class:`rlgear.errors.ConfigError` for a name or kwargs the
        adapter cannot use, with a message that names the problem.

        rlgear passes further keywords only to an adapter that accepts them:
        ``wrappers`` and ``wrappers_vector`` (lists of
        :class:`rlgear.config.WrapperConfig`, when the config sets them and
        :meth:`check_config` let them through), ``preset`` (the ``env.preset`` name, one of
        :attr:`presets`) and ``video`` (a :class:`VideoRequest`, only if :attr:`records_video`).
        """
