"""The callback hooks a plugin may implement (pluggy hook specifications).

Implement any subset in a class or module, decorated with ``@rlgear.hookimpl``,
and either pass it in code (``rlgear.train(config, hooks=[MyHooks()])``) or
register it under the ``rlgear.hooks`` entry-point group so every run picks it
up. Hooks are always called with keyword arguments, so an implementation may
take only the arguments it needs. Set ``RLGEAR_DISABLE_PLUGIN_AUTOLOAD=1`` to
skip entry-point hooks (as pytest does with PYTEST_DISABLE_PLUGIN_AUTOLOAD).

The argument types are imported for type checkers and the API reference only
(``TYPE_CHECKING``): importing this module imports none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - annotations only; nothing below is imported at run time
    from rlgear.sample_batch import SampleBatch
    from rlgear.sampling.metrics import Episode
    from rlgear.sampling.rollout_worker import RolloutWorker
    from rlgear.trainer import Trainer

hookspec = pluggy.HookspecMarker("rlgear")
#: Decorates a hook implementation: ``@rlgear.hookimpl def on_train_result(self, result): ...``
hookimpl = pluggy.HookimplMarker("rlgear")


@hookspec
def on_trainer_init(trainer: Trainer) -> None:
    """The trainer is built (workers, policy and envs exist), before the first iteration."""


@hookspec
def on_episode_start(worker: RolloutWorker, episode: Episode) -> None:
    """An episode started in ``worker``'s env ``episode.env_id``."""


@hookspec
def on_episode_end(worker: RolloutWorker, episode: Episode) -> None:
    """An episode ended (terminated or truncated) in ``worker``.

    ``episode`` has ``episode_return`` (the env's own, beneath reward-changing wrappers;
    ``wrapped_return`` then holds the sum of the rewards training saw), ``length``,
    ``terminated``, ``truncated``, ``env_id``, a free ``user_data`` dict, and ``custom_metrics``: numbers put
    there are aggregated over the metrics window and reported as
    ``custom_metrics/<name>_mean`` (also ``_min`` and ``_max``).
    """


@hookspec
def on_sample_end(worker: RolloutWorker, batch: SampleBatch) -> None:
    """``worker`` finished a postprocessed SampleBatch (may be modified in place); for a multi-agent
    env a :class:`~rlgear.sample_batch.MultiAgentBatch` (``{policy id: SampleBatch}``)."""


@hookspec
def on_postprocess_fragment(
    worker: RolloutWorker,
    policy_id: str,
    fragment: SampleBatch,
    window: dict[str, Any],
    rows: Any,
    slots: Any,
) -> None:
    """A fragment of policy ``policy_id`` is about to be postprocessed (the centralised-critic hook).

    ``fragment`` is time-major ``[n, k]``: ``k`` agent streams (compacted: each agent's own rows,
    the last one the bootstrap) of equal length ``n``. Add columns to it in place (e.g. the other
    agents' observations, for a value function that sees them) before the algorithm's
    postprocessing (GAE ...) runs; columns the loss does not read are never sent to it.

    ``window`` holds every policy's rows of the same env steps, un-compacted:
    ``window[pid]["rows"][column]`` is ``[T+1, S_pid, ...]`` (row 0: each slot's row carried from
    the previous fragment, valid where ``window[pid]["valid"][0]``; rows 1..T: this fragment's env
    steps, aligned across policies), ``window[pid]["agents"]`` the policy's agents (slot
    ``a * num_envs + i`` is agent ``a`` in env slot ``i``), ``window[pid]["num_envs"]`` and
    ``window[pid]["recorded"]`` (this fragment's own rows: the table's last ones; a first row before
    them is the carried one). When the env gives a global state, each row has it in column ``state``.
    Element ``[r, c]`` of ``fragment`` is row ``rows[r, c]`` of slot ``slots[c]`` of this policy's
    table, so its env slot is ``slots[c] % num_envs`` and rows ``>= 1`` of other policies at the
    same index are the same env step. Called for every fragment of ``truncate_episodes`` sampling; a
    single-agent run is the one-agent case (one agent, every slot active, ``rows`` the identity).
    """


@hookspec
def on_train_result(trainer: Trainer, result: dict[str, Any]) -> None:
    """An iteration's result is ready; add or change keys in ``result`` in place.

    Keys added under ``custom_metrics/`` are logged like the built-in ones.
    """


@hookspec
def on_checkpoint(trainer: Trainer, checkpoint_dir: str) -> None:
    """A checkpoint was written (it is complete and in place) at ``checkpoint_dir``."""
