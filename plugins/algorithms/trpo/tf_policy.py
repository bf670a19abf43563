"""TRPO on the TensorFlow backend (the torch policy's twin, op for op): the Fisher-vector product by
nested gradient tapes, inside compiled functions traced once per set of batch columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.plugins.algorithms.trpo.learning import TRPO_COLUMNS, TRPOLearning, split_weight_names
from rlgear.plugins.backends.tf import TFPolicy, masked_mean, tf
from rlgear.plugins.backends.tf.compiled import _columns_key, _spec
from rlgear.plugins.backends.tf.optimizers import make_optimizer
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


def _flat(grads: list[tf.Tensor]) -> tf.Tensor:
    return tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)


class TFPolicyStep:
    """One batch's policy step (:class:`~rlgear.plugins.algorithms.trpo.natural_gradient.PolicyStepProblem`)."""

    def __init__(self, policy: TRPOTFPolicy, batch: SB):
        self.policy = policy
        self.tensors = policy.to_tensors(batch, policy.learner_columns(policy.loss_columns))
        self.names = [name for name, _ in policy.policy_variables]
        self.variables = [v for _, v in policy.policy_variables]
        self.functions = policy.policy_step_functions(self.tensors)
        self.old_inputs: tf.Tensor | None = None

    def get_params(self) -> np.ndarray:
        return np.concatenate([v.numpy().reshape(-1).astype(np.float64) for v in self.variables])

    def set_params(self, flat: np.ndarray) -> None:
        start = 0
        for v in self.variables:
            size = int(np.prod(v.shape))
            v.assign(np.asarray(flat[start : start + size], np.float32).reshape(v.shape))
            start += size

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """A flat vector as ``{neutral name: array}`` (TF's layout is the neutral one)."""
        out, start = {}, 0
        for name, v in zip(self.names, self.variables, strict=True):
            size = int(np.prod(v.shape))
            out[name] = np.asarray(flat[start : start + size]).reshape(tuple(v.shape))
            start += size
        return out

    def flatten(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The inverse of :meth:`unflatten`."""
        return np.concatenate([np.asarray(arrays[name], np.float64).reshape(-1) for name in self.names])

    def surrogate_and_gradient(self) -> tuple[float, np.ndarray, float]:
        surrogate, gradient, entropy, dist_inputs = self.functions["gradient"](self.tensors)
        self.old_inputs = dist_inputs
        return float(surrogate), gradient.numpy().astype(np.float64), float(entropy)

    def fisher_vector_product(self, v: np.ndarray) -> np.ndarray:
        vector = tf.convert_to_tensor(np.asarray(v, np.float32))
        return self.functions["fvp"](self.tensors, self.old_inputs, vector).numpy().astype(np.float64)

    def surrogate_and_kl(self) -> tuple[float, float]:
        surrogate, kl = self.functions["evaluate"](self.tensors, self.old_inputs)
        return float(surrogate), float(kl)


class TRPOTFPolicy(TRPOLearning, TFPolicy):
    loss_columns = TRPO_COLUMNS

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        policy_names, value_names = split_weight_names(name for name, _ in self.named_variables)
        self.policy_variables = [(n, v) for n, v in self.named_variables if n in set(policy_names)]
        self.value_variables = [v for n, v in self.named_variables if n in set(value_names)]
        training = config.training
        # The value function's optimizer holds the value net only: a value step cannot move the policy.
        self.optimizer = make_optimizer(
            training.optimizer,
            self.value_variables,
            self._current_lr(),
            training.optimizer_epsilon,
            training.optimizer_kwargs,
            getattr(config, "fail", None),
        )
        self._step_functions: dict[Any, dict[str, Callable]] = {}

    def _compile(self) -> None:
        super()._compile()
        self._step_functions = {}

    # --- the policy step --------------------------------------------------------------------
    def policy_step_problem(self, batch: SB) -> TFPolicyStep:
        return TFPolicyStep(self, batch)

    def _surrogate(self, dist: Any, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        ratio = tf.exp(dist.logp(batch[SB.ACTIONS]) - batch[SB.ACTION_LOGP])
        return tf.reduce_mean(ratio * batch[SB.ADVANTAGES])

    def _gradient_impl(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, ...]:
        variables = [v for _, v in self.policy_variables]
        with tf.GradientTape() as tape:
            dist_inputs, _ = self.model_outputs(batch)
            dist = self.action_distribution(dist_inputs, batch)
            surrogate = self._surrogate(dist, batch)
        grads = tape.gradient(surrogate, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        entropy = tf.reduce_mean(dist.entropy())
        return surrogate, _flat(grads), entropy, tf.stop_gradient(dist_inputs)

    def _fvp_impl(self, batch: dict[str, tf.Tensor], old_inputs: tf.Tensor, vector: tf.Tensor) -> tf.Tensor:
        variables = [v for _, v in self.policy_variables]
        old = self.action_distribution(old_inputs, batch)
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                kl = tf.reduce_mean(old.kl(self.action_distribution(self.model_outputs(batch)[0], batch)))
            kl_gradient = _flat(
                inner.gradient(kl, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            )
            directional = tf.reduce_sum(kl_gradient * vector)
        return _flat(
            outer.gradient(directional, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        )

    def _evaluate_impl(
        self, batch: dict[str, tf.Tensor], old_inputs: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        dist = self.action_distribution(self.model_outputs(batch)[0], batch)
        old = self.action_distribution(old_inputs, batch)
        return self._surrogate(dist, batch), tf.reduce_mean(old.kl(dist))

    def policy_step_functions(self, tensors: dict[str, tf.Tensor]) -> dict[str, Callable]:
        """The compiled gradient, Fisher-vector product and evaluation for these batch columns."""
        key = _columns_key(tensors)
        functions = self._step_functions.get(key)
        if functions is None:
            columns = {k: _spec(v) for k, v in tensors.items()}
            inputs = tf.TensorSpec([None, self.num_outputs], tf.float32)
            size = sum(int(np.prod(v.shape)) for _, v in self.policy_variables)
            functions = self._step_functions[key] = {
                "gradient": self.function(self._gradient_impl, [columns]),
                "fvp": self.function(self._fvp_impl, [columns, inputs, tf.TensorSpec([size], tf.float32)]),
                "evaluate": self.function(self._evaluate_impl, [columns, inputs]),
            }
        return functions

    # --- the value function -----------------------------------------------------------------
    def _loss_and_gradients(
        self, batch: dict[str, tf.Tensor]
    ) -> tuple[list[tf.Tensor], dict[str, tf.Tensor]]:
        """The value loss's gradients, one per value-net variable (the optimizer's variables)."""
        with tf.GradientTape() as tape:
            loss, stats = self.loss(batch)
        grads = tape.gradient(loss, self.value_variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return grads, {**stats, "total_loss": loss, "grad_gnorm": tf.linalg.global_norm(grads)}

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The value loss ``0.5 mean (V(s) - target)^2``, the one loss TRPO descends by gradient steps."""
        _, values = self.model_outputs(batch)
        vf_loss = 0.5 * masked_mean((values - batch[SB.VALUE_TARGETS]) ** 2, batch.get(SB.SEQ_MASK))
        return vf_loss, {"vf_loss": vf_loss}
