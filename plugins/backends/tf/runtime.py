"""The one place that imports tensorflow, after silencing its start-up log.

TensorFlow prints several lines to stderr on import and on the first op
(oneDNN notices, CPU-feature notices, absl warnings). Only
``TF_CPP_MIN_LOG_LEVEL=2`` together with ``TF_ENABLE_ONEDNN_OPTS=0`` silences
them completely (shared/DEPENDENCY-NOTES.md: the oneDNN lines ignore the log
level), so both are set before the import, unless the user already set them,
which is how a user asks for the noise back. Every module of this backend
imports ``tf`` from here, so the variables are always set first.
"""

from __future__ import annotations

import logging
import os

_USER_SET_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL" in os.environ
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf  # noqa: E402  (the environment must be set first)

if not _USER_SET_LOG_LEVEL:
    # TF's Python-side warnings (absl logger), e.g. retracing notices.
    tf.get_logger().setLevel(logging.ERROR)

__all__ = ["tf"]
