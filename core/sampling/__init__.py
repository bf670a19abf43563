"""Sampling: how a rollout worker turns env steps into training rows.

- :mod:`~rlgear.sampling.rollout_worker`: the :class:`RolloutWorker` (env adapter + acting
  policies; in-process or as a Ray actor);
- :mod:`~rlgear.sampling.sampler`: the :class:`~rlgear.sampling.sampler.Sampler` every run steps
  (fragments, whole episodes, episode bookkeeping; a single-agent env is its one-agent case);
- :mod:`~rlgear.sampling.collector`: per-policy acting (preprocessing, observation filter,
  recurrent state);
- :mod:`~rlgear.sampling.observation_filter`, :mod:`~rlgear.sampling.postprocessing`,
  :mod:`~rlgear.sampling.sequences`, :mod:`~rlgear.sampling.metrics`.

Importing this package imports none of its modules: take what you need by its module path.
"""
