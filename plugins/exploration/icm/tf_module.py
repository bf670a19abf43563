"""ICM's loss and gradients with ``tf.GradientTape`` (the rest is :mod:`.common`, shared with torch).
Eager, as :mod:`rlgear.plugins.exploration.tf_nets` says why."""

from __future__ import annotations

import numpy as np

from rlgear.plugins.backends.tf.runtime import tf
from rlgear.plugins.exploration.icm.common import ICMModuleBase
from rlgear.plugins.exploration.nets import INTRINSIC_VALUE
from rlgear.plugins.exploration.tf_nets import mlp


class ICMTFModule(ICMModuleBase):
    """ICM on the TF backend."""

    def loss_and_gradients(self, params, inputs):
        tensors = {k: tf.constant(v) for k, v in params.items()}
        o = self.options
        value_mode = "value_targets" in inputs
        names = [n for n in self.trainable if value_mode or not n.startswith(INTRINSIC_VALUE + "/")]

        def net(name, x):
            return mlp(tensors, name, len(self.specs[name].hidden), x)

        actions = tf.constant(inputs["actions"])
        with tf.GradientTape() as tape:
            for name in names:
                tape.watch(tensors[name])
            phi = net("feature", tf.constant(inputs["x"]))
            phi_next = net("feature", tf.constant(inputs["next_x"]))
            logits = net("inverse", tf.concat([phi, phi_next], axis=1))
            inverse_loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)
            )
            one_hot = tf.one_hot(actions, self.num_actions, dtype=phi.dtype)
            predicted = net("forward", tf.concat([phi, one_hot], axis=1))
            forward_loss = 0.5 * tf.reduce_mean(tf.reduce_sum(tf.square(predicted - phi_next), axis=1))
            loss = (1.0 - o.beta) * inverse_loss + o.beta * forward_loss
            if value_mode:
                values = net(INTRINSIC_VALUE, tf.constant(inputs["obs"]))
                value_loss = 0.5 * tf.reduce_mean(
                    tf.square(values[:, 0] - tf.constant(inputs["value_targets"]))
                )
                loss = loss + value_loss
        grads = tape.gradient(loss, [tensors[n] for n in names])
        stats = {"inverse_loss": float(inverse_loss), "forward_loss": float(forward_loss)}
        if value_mode:
            stats["intrinsic_value_loss"] = float(value_loss)
        out = {n: g.numpy() for n, g in zip(names, grads, strict=True)}
        for name in self.trainable:  # the value head without value targets: no gradient
            out.setdefault(name, np.zeros_like(params[name]))
        return float(loss), stats, out
