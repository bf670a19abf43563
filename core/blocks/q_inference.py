"""DQN's Q-network in numpy, from framework-neutral weights: plain, dueling, C51, QR-DQN and noisy.

Why: the framework-free runtime (:mod:`rlgear.inference`) acts with a DQN checkpoint
without torch or TF. The network is the backends' ``QNetwork`` (names framework-neutral,
kernels ``[in, out]``):

* ``q/conv_<i>``: the conv trunk of image observations (:mod:`rlgear.blocks.conv_inference`);
* ``q/hidden_<i>``: dense layers with ``model.activation``; PQN's layer normalisation (Ba et al.
  2016), when the weights hold ``q/norm_<i>/{scale,offset}``, between each dense layer and its
  activation (:func:`layer_norm`);
* ``q/output`` ``[., actions * atoms]``, or with dueling ``q/value`` ``[., atoms]`` and
  ``q/advantage`` ``[., actions * atoms]`` combined per atom as ``V + A - mean_a(A)``
  (Wang et al. 2016, eq. 9);
* with C51 (``atoms`` > 1) each action's outputs are the logits of its return distribution
  on ``support``, and its Q-value their mean (Bellemare et al. 2017);
* with ``quantiles`` (QR-DQN, Dabney et al. 2018) each action's ``atoms`` outputs are quantile
  estimates of its return, and its Q-value their plain mean (no support);
* noisy layers (Fortunato et al. 2018) have ``{kernel,bias}_{mu,sigma}``: without noise (greedy
  acting, as the backends' ``set_noise(explore=False)``) a layer is ``x @ kernel_mu + bias_mu``;
  with factorised noise ``(e_in, e_out)``
  ``x @ kernel_mu + ((x * e_in) @ kernel_sigma) * e_out + bias_mu + bias_sigma * e_out``.
"""

from __future__ import annotations

import numpy as np

from rlgear.blocks.conv_inference import NumpyConvTrunk
from rlgear.blocks.inference import ACTIVATIONS
from rlgear.config.conv import ConvSpec

#: A noisy layer's noise: ``(f(e_in) [in], f(e_out) [out])``.
Noise = tuple[np.ndarray, np.ndarray]


def factorised_noise(rng: np.random.Generator, in_dim: int, out_dim: int) -> Noise:
    """``f(e) = sign(e) sqrt(|e|)`` of standard normals, ``in_dim`` then ``out_dim`` of them (the
    draws the backends make for a noisy layer, Fortunato et al. 2018, eq. 11)."""

    def scaled(x: np.ndarray) -> np.ndarray:
        return (np.sign(x) * np.sqrt(np.abs(x))).astype(np.float32)

    noise_in = scaled(rng.standard_normal(in_dim))
    return noise_in, scaled(rng.standard_normal(out_dim))


#: LayerNorm's epsilon on every backend (torch's ``nn.LayerNorm`` default).
LAYER_NORM_EPSILON = 1e-5


def layer_norm(x: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * scale + offset`` over the last axis (biased variance, as
    ``torch.nn.LayerNorm``; Ba et al. 2016)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPSILON) * scale + offset


class NumpyQNetwork:
    """Forward pass of the catalog Q-network; :meth:`q_values` gives one value per action."""

    def __init__(
        self,
        num_actions: int,
        hidden_layers: int,
        activation: str,
        dueling: bool,
        num_atoms: int = 1,
        support: np.ndarray | None = None,
        conv: ConvSpec | None = None,
        quantiles: bool = False,
    ):
        self.quantiles = quantiles
        if num_atoms > 1 and not quantiles and (support is None or len(support) != num_atoms):
            raise ValueError(f"C51 with {num_atoms} atoms needs a support of {num_atoms} values")
        self.num_actions, self.num_atoms = num_actions, num_atoms
        self.support = None if support is None else np.asarray(support, np.float32)
        self.activation = ACTIVATIONS[activation]
        self.dueling = dueling
        self.trunk = None if conv is None else NumpyConvTrunk(conv)
        self.layer_names = [f"q/hidden_{i}" for i in range(hidden_layers)] + (
            ["q/value", "q/advantage"] if dueling else ["q/output"]
        )
        #: per layer ``{kernel, bias}`` or, noisy, ``{kernel_mu, kernel_sigma, bias_mu, bias_sigma}``
        self.layers: dict[str, dict[str, np.ndarray]] = {}
        self.noisy = False
        #: per hidden layer ``{scale, offset}`` of its layer normalisation (PQN), empty without
        self.norms: dict[str, dict[str, np.ndarray]] = {}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Take the ``q/`` weights (plain or noisy layers, as the checkpoint holds them)."""
        self.noisy = f"{self.layer_names[0]}/kernel_mu" in weights
        parts = ("kernel_mu", "kernel_sigma", "bias_mu", "bias_sigma") if self.noisy else ("kernel", "bias")
        self.layers = {
            name: {part: np.asarray(weights[f"{name}/{part}"], np.float32) for part in parts}
            for name in self.layer_names
        }
        self.norms = {
            name: {
                part: np.asarray(weights[f"q/norm_{i}/{part}"], np.float32) for part in ("scale", "offset")
            }
            for i, name in enumerate(self.layer_names[: -2 if self.dueling else -1])
            if f"q/norm_{i}/scale" in weights
        }
        if self.trunk is not None:
            self.trunk.load(weights, scope="q")

    def sample_noise(self, rng: np.random.Generator) -> dict[str, Noise]:
        """Fresh noise for every noisy layer, drawn in the backends' layer order (hidden layers, then the
        heads)."""
        out = {}
        for name in self.layer_names:
            kernel = self.layers[name]["kernel_mu"]
            out[name] = factorised_noise(rng, kernel.shape[0], kernel.shape[1])
        return out

    def _dense(self, name: str, x: np.ndarray, noise: dict[str, Noise] | None) -> np.ndarray:
        layer = self.layers[name]
        if not self.noisy:
            return x @ layer["kernel"] + layer["bias"]
        y = x @ layer["kernel_mu"] + layer["bias_mu"]
        if noise is not None:
            e_in, e_out = noise[name]
            y = y + ((x * e_in) @ layer["kernel_sigma"]) * e_out + layer["bias_sigma"] * e_out
        return y

    def forward(self, obs: np.ndarray, noise: dict[str, Noise] | None = None) -> np.ndarray:
        """The network's outputs ``[B, actions * atoms]`` for flat float32 observations ``[B, F]``
        (``noise``: from :meth:`sample_noise`; None acts on the mean weights)."""
        x = obs
        if self.trunk is not None:
            x = self.trunk.forward(obs, np.empty((obs.shape[0], self.trunk.spec.output_dim), np.float32))
        for name in self.layer_names[: -2 if self.dueling else -1]:
            y = self._dense(name, x, noise)
            if name in self.norms:
                y = layer_norm(y, **self.norms[name]).astype(np.float32, copy=False)
            x = self.activation(y, np.empty_like(y))
        if not self.dueling:
            return self._dense("q/output", x, noise)
        advantages = self._dense("q/advantage", x, noise).reshape(-1, self.num_actions, self.num_atoms)
        values = self._dense("q/value", x, noise).reshape(-1, 1, self.num_atoms)
        q = values + advantages - advantages.mean(axis=1, keepdims=True)
        return q.reshape(-1, self.num_actions * self.num_atoms)

    def q_values(self, obs: np.ndarray, noise: dict[str, Noise] | None = None) -> np.ndarray:
        """``[B, actions]``: the outputs, or with C51 each return distribution's mean ``sum_i p_i z_i``,
        or with quantiles each action's mean quantile."""
        outputs = self.forward(obs, noise)
        if self.num_atoms == 1:
            return outputs
        logits = outputs.reshape(outputs.shape[0], self.num_actions, self.num_atoms)
        if self.quantiles:
            return logits.mean(axis=-1)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return (probs / probs.sum(axis=-1, keepdims=True)) @ self.support
