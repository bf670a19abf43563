"""The TensorFlow backend: its public API for algorithm policy modules.

Algorithms import from here (and only here) in their ``tf_policy`` module::

    from rlgear.plugins.backends.tf import TFPolicy, normalize_advantages, tf

Importing this package imports tensorflow (quietly, see ``runtime``), so
nothing else in rlgear does it.
"""

from rlgear.plugins.backends.tf.backend import TFBackend
from rlgear.plugins.backends.tf.distributions import (
    Categorical,
    DiagGaussian,
    distribution_class,
)
from rlgear.plugins.backends.tf.losses import (
    actor_critic_loss,
    clipped_surrogate,
    masked_mean,
    normalize_advantages,
)
from rlgear.plugins.backends.tf.models import (
    ACTIVATIONS,
    ActorCriticMLP,
    ConvEncoder,
    Dense,
    DenseStack,
    build_model,
    conv_encoder,
    named_variables,
)
from rlgear.plugins.backends.tf.offpolicy import OffPolicyTFPolicy, StackedMLP
from rlgear.plugins.backends.tf.policy import TFPolicy
from rlgear.plugins.backends.tf.runtime import tf  # every module imports tf via runtime
from rlgear.plugins.backends.tf.target_network import TargetModel
from rlgear.plugins.backends.tf.vtrace import VTraceTFPolicy, mean_over, vtrace

__all__ = [
    "ACTIVATIONS",
    "ActorCriticMLP",
    "Categorical",
    "ConvEncoder",
    "Dense",
    "DenseStack",
    "DiagGaussian",
    "OffPolicyTFPolicy",
    "StackedMLP",
    "TFBackend",
    "TFPolicy",
    "TargetModel",
    "VTraceTFPolicy",
    "actor_critic_loss",
    "build_model",
    "clipped_surrogate",
    "conv_encoder",
    "distribution_class",
    "masked_mean",
    "mean_over",
    "named_variables",
    "normalize_advantages",
    "tf",
    "vtrace",
]
