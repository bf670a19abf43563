"""Built-in searchers (entry-point group ``rlgear.searchers``): ``random``, ``grid`` and ``optuna``."""
