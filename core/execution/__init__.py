"""How experience is gathered and turned into training data: the machinery under a training step.

- :mod:`~rlgear.execution.evaluator`: the :class:`Evaluator` (rollout worker: env adapter +
  policy) and the :class:`WorkerSet` that owns the local and remote evaluators;
- :mod:`~rlgear.execution.rollout_ops` and :mod:`~rlgear.execution.async_ops`: the building
  blocks an algorithm's ``training_step`` composes (synchronous rounds, async sampling and
  gradients);
- :mod:`~rlgear.execution.postprocessing`, :mod:`~rlgear.execution.replay_buffers`,
  :mod:`~rlgear.execution.schedules`: framework-free data handling for learners;
- :mod:`~rlgear.execution.metrics`: the episode-statistics window;
- :mod:`~rlgear.execution.remote_worker`, :mod:`~rlgear.execution.ray_session`: the Ray side
  (imported only when a run has remote workers);
- :mod:`~rlgear.execution.inference`: acting with the catalog MLP in numpy.

Importing this package imports none of its modules (nor Ray): take what you need by its
module path.
"""
