"""TF helpers of the numpy-parameter exploration modules (``rnd``, ``icm``): the MLP on tensors.

Eager, not compiled: a few small matmuls per call, where tracing a ``tf.function`` per minibatch
shape would cost more than it saves. The acting-side forward passes stay in numpy."""

from __future__ import annotations

from rlgear.plugins.backends.tf.runtime import tf
from rlgear.plugins.exploration.nets import layer_names


def mlp(params, network: str, num_hidden: int, x):
    for name in layer_names(network, num_hidden)[:-1]:
        x = tf.nn.relu(tf.matmul(x, params[f"{name}/kernel"]) + params[f"{name}/bias"])
    return tf.matmul(x, params[f"{network}/output/kernel"]) + params[f"{network}/output/bias"]
