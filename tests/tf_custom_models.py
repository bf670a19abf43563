"""Small custom TF models for ``model.custom`` tests (imported as ``tf_custom_models:<Class>``).

Tests put this folder on ``sys.path`` (``monkeypatch.syspath_prepend``), as
``custom_models.py`` is for the torch backend.
"""

from __future__ import annotations

import numpy as np

from rlgear.plugins.backends.tf import tf
from rlgear.spaces import flat_dim


class TinyTFActorCritic(tf.Module):
    """One hidden layer of ``hidden`` units; exports its weights under its own neutral names."""

    def __init__(self, observation_space, action_space, num_outputs, model_config, hidden=4):
        super().__init__()
        rng = np.random.default_rng(0)
        obs_dim = flat_dim(observation_space)
        self.body = tf.Variable(rng.normal(0, 0.5, (obs_dim, hidden)).astype(np.float32))
        self.pi = tf.Variable(rng.normal(0, 0.1, (hidden, num_outputs)).astype(np.float32))
        self.vf = tf.Variable(rng.normal(0, 0.1, (hidden, 1)).astype(np.float32))

    def __call__(self, obs):
        h = tf.tanh(obs @ self.body)
        return h @ self.pi, (h @ self.vf)[:, 0]

    def named_variables(self):
        return [("tiny/body", self.body), ("tiny/pi", self.pi), ("tiny/vf", self.vf)]


class NotAModel:
    """Has neither ``__call__`` nor ``trainable_variables``."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        pass
