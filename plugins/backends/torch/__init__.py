"""The PyTorch backend: its public API for algorithm policy modules.

Algorithms import from here (and only here) in their ``torch_policy`` module::

    from rlgear.plugins.backends.torch import TorchPolicy, Categorical, DiagGaussian

Importing this package imports torch, so nothing else in rlgear does it.
"""

from rlgear.plugins.backends.torch.backend import TorchBackend
from rlgear.plugins.backends.torch.distributions import (
    Categorical,
    DiagGaussian,
    distribution_class,
)
from rlgear.plugins.backends.torch.losses import (
    actor_critic_loss,
    clipped_surrogate,
    masked_mean,
    normalize_advantages,
)
from rlgear.plugins.backends.torch.models import ActorCriticMLP, ConvEncoder, build_model, conv_encoder
from rlgear.plugins.backends.torch.offpolicy import OffPolicyTorchPolicy, StackedMLP
from rlgear.plugins.backends.torch.policy import TorchPolicy
from rlgear.plugins.backends.torch.target_network import TargetModel
from rlgear.plugins.backends.torch.vtrace import VTraceTorchPolicy, mean_over, vtrace

__all__ = [
    "ActorCriticMLP",
    "Categorical",
    "ConvEncoder",
    "DiagGaussian",
    "OffPolicyTorchPolicy",
    "StackedMLP",
    "TargetModel",
    "TorchBackend",
    "TorchPolicy",
    "VTraceTorchPolicy",
    "actor_critic_loss",
    "build_model",
    "clipped_surrogate",
    "conv_encoder",
    "distribution_class",
    "masked_mean",
    "mean_over",
    "normalize_advantages",
    "vtrace",
]
