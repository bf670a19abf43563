"""``checkpoint.init_from``: a run whose policies start from another run's weights.

This is how an offline run continues online (docs/offline-algorithms.md#offline-to-online): a ``cql``
checkpoint starts a ``sac`` run, a ``discrete_cql`` checkpoint a ``dqn`` run, because those pairs
build the same networks under the same weight names. Any checkpoint whose weights fit works the
same way (``sac`` from ``sac`` of another env seed, ``ppo`` from ``bc``'s actor-critic when the
models match), so the check is on what matters, not on algorithm names: the spaces must be equal
and every weight this run's policies have must be in the checkpoint with the same shape.

Only the weights move (and the target networks restart from them), with the observation-filter
statistics when the run filters observations: the optimizer, the counters, the replay buffer and
the iteration start fresh, since the new run's algorithm may keep different ones. ``--resume``
of the new run restores its own checkpoints as usual, over this.
"""

from __future__ import annotations

import logging
from typing import Any

from rlgear.run import checkpoint as ckpt
from rlgear.sampling.observation_filter import RunningStats
from rlgear.spaces import space_from_json

logger = logging.getLogger(__name__)

KEY = "checkpoint.init_from"


def start_from_checkpoint(trainer: Any, source: str) -> str:
    """Load the policy weights (and observation-filter statistics) of the checkpoint at ``source``
    (a checkpoint folder, or a run folder: its newest checkpoint) into ``trainer``'s learner and
    workers. Everything is checked before anything changes; a problem is a
    :class:`~rlgear.errors.ConfigError` naming ``checkpoint.init_from``. Returns the one-line
    summary it logs."""
    config = trainer.config
    try:
        path = ckpt.resolve_path(source)
        arrays, state, _saved_config, metadata = ckpt.read(path)
    except Exception as err:  # CheckpointError: missing, incomplete or damaged
        raise config.fail(KEY, str(err)) from None
    worker = trainer.workers.local_worker
    saved_ids = ckpt.checkpoint_policy_ids(arrays, state)
    run_ids = list(worker.collectors)
    pairs = _policy_pairs(saved_ids, run_ids, config, path)
    saved_spaces = metadata.get("policy_spaces") or {
        saved_ids[0]: {k: metadata[k] for k in ("observation_space", "action_space")}
    }
    several = len(saved_ids) > 1
    filters: dict[str, dict[str, Any]] = {}
    weights: dict[str, dict[str, Any]] = {}
    for run_id, saved_id in pairs.items():
        collector = worker.collectors[run_id]
        which = "" if len(pairs) == 1 else f"policy '{run_id}': "
        for key in ("observation_space", "action_space"):
            saved = space_from_json(saved_spaces[saved_id][key])
            if saved != getattr(collector, key):
                raise config.fail(
                    KEY,
                    f"{path}: {which}the checkpoint's {key} is {saved}, this run's env has "
                    f"{getattr(collector, key)}",
                )
        weights[run_id] = ckpt.policy_weights(arrays, saved_id)
        saved_filter = ckpt.obs_filter_arrays(dict(arrays), saved_id, several)
        obs_filter = collector.obs_filter
        if obs_filter is None and saved_filter:
            raise config.fail(
                KEY,
                f"{path}: {which}the checkpoint's policy saw observations normalised by its mean_std "
                "filter; set model.observation_filter: mean_std in this run too (its weights expect "
                "normalised inputs)",
            )
        if obs_filter is not None:
            if not saved_filter:
                raise config.fail(
                    KEY,
                    f"{path}: {which}this run's model.observation_filter is mean_std, but the checkpoint "
                    "holds no filter statistics (it was trained on raw observations); set "
                    "model.observation_filter: none",
                )
            try:
                RunningStats.from_arrays(saved_filter, obs_filter.shape, "the checkpoint")
            except ValueError as err:
                raise config.fail(KEY, f"{path}: {which}{err}") from None
            filters[run_id] = saved_filter
    _check_weights(trainer, weights, metadata, path)
    trainer.learner.set_weights(weights if len(weights) > 1 else next(iter(weights.values())))
    if filters:
        trainer.workers.foreach_worker(lambda w, f=filters: _set_filters(w, f))
    trainer.workers.sync_weights()
    summary = (
        f"{KEY}: policies start from {path} (algorithm '{metadata.get('algorithm')}', "
        f"backend '{metadata.get('backend')}'); optimizer, counters and replay start fresh"
    )
    logger.info(summary)
    return summary


def _policy_pairs(saved_ids: list[str], run_ids: list[str], config: Any, path: Any) -> dict[str, str]:
    """``{this run's policy id: the checkpoint's policy id}``: by id, or one policy to one policy."""
    if len(saved_ids) == 1 and len(run_ids) == 1:
        return {run_ids[0]: saved_ids[0]}
    missing = [pid for pid in run_ids if pid not in saved_ids]
    if missing:
        raise config.fail(
            KEY,
            f"{path}: the checkpoint holds policies {', '.join(saved_ids)}; this run's "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not among them",
        )
    return {pid: pid for pid in run_ids}


def _check_weights(trainer: Any, weights: dict[str, dict[str, Any]], metadata: dict, path: Any) -> None:
    """Every weight this run's policies have is in the checkpoint with its shape (else a
    ConfigError listing what is missing or different; extra checkpoint weights are ignored)."""
    for run_id, saved in weights.items():
        own = trainer.policy_map[run_id].get_weights()
        missing = sorted(name for name in own if name not in saved)
        different = sorted(
            f"{name} {tuple(saved[name].shape)} (expected {tuple(value.shape)})"
            for name, value in own.items()
            if name in saved and tuple(saved[name].shape) != tuple(value.shape)
        )
        if missing or different:
            which = "" if len(weights) == 1 else f"policy '{run_id}': "
            problems = []
            if missing:
                problems.append(f"missing {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
            if different:
                problems.append(f"different shapes: {', '.join(different[:4])}")
            raise trainer.config.fail(
                KEY,
                f"{path}: {which}the weights of algorithm '{metadata.get('algorithm')}' do not fit "
                f"this '{trainer.name}' policy ({'; '.join(problems)}); the model section (and the "
                "algorithm's networks) must match the checkpoint's",
            )


def _set_filters(evaluator: Any, filters: dict[str, dict[str, Any]]) -> None:
    for pid, obs_filter in evaluator.obs_filters.items():
        if pid in filters:
            obs_filter.set_state(filters[pid])
