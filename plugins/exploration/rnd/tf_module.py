"""RND's loss and gradients with ``tf.GradientTape`` (the rest is :mod:`.common`, shared with torch).
Eager, as :mod:`rlgear.plugins.exploration.tf_nets` says why."""

from __future__ import annotations

import numpy as np

from rlgear.plugins.backends.tf.runtime import tf
from rlgear.plugins.exploration.rnd.common import RNDModuleBase
from rlgear.plugins.exploration.tf_nets import mlp as _mlp


class RNDTFModule(RNDModuleBase):
    """RND on the TF backend."""

    def loss_and_gradients(self, params, inputs):
        tensors = {k: tf.constant(v) for k, v in params.items()}
        value_mode = "value_targets" in inputs
        names = [n for n in self.trainable if n.startswith("predictor/") or value_mode]
        hidden = len(self.options.hidden_sizes)
        x = tf.constant(inputs["x"])
        mask = tf.constant(inputs["mask"])
        target = tf.stop_gradient(_mlp(tensors, "target", hidden, x))
        with tf.GradientTape() as tape:
            for name in names:
                tape.watch(tensors[name])
            predicted = _mlp(tensors, "predictor", hidden, x)
            per_row = tf.reduce_mean(tf.square(predicted - target), axis=1)
            predictor_loss = tf.reduce_sum(per_row * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
            loss = predictor_loss
            if value_mode:
                values = _mlp(
                    tensors,
                    "intrinsic_value",
                    len(self.options.value_hidden_sizes),
                    tf.constant(inputs["obs"]),
                )
                value_loss = 0.5 * tf.reduce_mean(
                    tf.square(values[:, 0] - tf.constant(inputs["value_targets"]))
                )
                loss = loss + value_loss
        grads = tape.gradient(loss, [tensors[n] for n in names])
        stats = {"predictor_loss": float(predictor_loss)}
        if value_mode:
            stats["intrinsic_value_loss"] = float(value_loss)
        out = {n: g.numpy() for n, g in zip(names, grads, strict=True)}
        for name in self.trainable:  # the value head without value targets: no gradient
            out.setdefault(name, np.zeros_like(params[name]))
        return float(loss), stats, out
