"""Distribution: the worker set, remote workers, async ops and the Ray session.

- :mod:`~rlgear.distributed.worker_set`: the :class:`WorkerSet` (the local rollout worker plus
  remote ones, weight broadcast, replacement of dead workers, fault counters);
- :mod:`~rlgear.distributed.rollout_ops` and :mod:`~rlgear.distributed.async_ops`: the building
  blocks an algorithm's ``training_step`` composes (synchronous rounds, async sampling and
  gradients, task pools);
- :mod:`~rlgear.distributed.remote_worker`, :mod:`~rlgear.distributed.ray_session`: the Ray side.

Ray is imported only by the modules that need it, and only when a run has remote workers.
"""
