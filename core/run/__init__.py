"""One training run on disk: the run folder, results, progress display, checkpoint files.

- :mod:`~rlgear.run.runner`: what ``rlgear train`` and ``rlgear.train()`` do around a
  Trainer (run folder, stop criteria, Ctrl-C, checkpoints on schedule and on failure);
- :mod:`~rlgear.run.logger`: the logger contract (``logging.loggers``: plugins such as ``jsonl``, ``tensorboard``, ``mlflow``) and the run's loggers;
- :mod:`~rlgear.run.progress`: the live progress line;
- :mod:`~rlgear.run.checkpoint`: the checkpoint format (safetensors + JSON, never pickle);
- :mod:`~rlgear.run.agent`: loading a trained policy from a checkpoint (``rlgear.load``).
"""
