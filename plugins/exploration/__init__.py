"""Built-in exploration plugins (entry-point group ``rlgear.exploration``; contract: :mod:`rlgear.exploration`)."""
