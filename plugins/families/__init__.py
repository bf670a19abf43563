"""Families: code that several algorithms share, above the backends and below the algorithms.

- :mod:`~rlgear.plugins.families.onpolicy`: the on-policy SGD loop (epochs over shuffled
  minibatches) that PPO, A2C and PG run;
- :mod:`~rlgear.plugins.families.replay`: the replay training loop (DQN, SAC, TD3/DDPG) and
  Ape-X with its replay shards;
- :mod:`~rlgear.plugins.families.vtrace`: the V-trace learner (IMPALA, APPO);
- :mod:`~rlgear.plugins.families.evolution`: the evolution-strategies population (ES, ARS).

Algorithms import families; families never import an algorithm, and a family's framework-free
modules import no backend (import-linter holds both rules). A third-party algorithm may build on
a family exactly as the built-ins do.
"""
