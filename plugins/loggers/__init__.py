"""The built-in loggers (entry-point group ``rlgear.loggers``; ``logging.loggers`` names them).

``jsonl`` (``progress.jsonl``, every run has it), ``tensorboard``, ``csv``,
``mlflow`` (``pip install 'rlgear[mlflow]'``) and ``wandb``
(``pip install 'rlgear[wandb]'``). Each module imports its tool only when a run
uses it; they import rlgear's core only, like any third-party logger.
"""
