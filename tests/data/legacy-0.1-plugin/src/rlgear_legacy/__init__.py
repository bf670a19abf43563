"""An example rlgear plugin package: one algorithm and one environment adapter.

Nothing here is imported by rlgear until a run names it: the package is found
through the entry points in ``setup.cfg`` (``simple_pg`` in
``rlgear.algorithms``, ``corridor`` in ``rlgear.envs``). Keep this module
empty of imports, so listing plugins stays cheap.
"""

__version__ = "0.1.0"
