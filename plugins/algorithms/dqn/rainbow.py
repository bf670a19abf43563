"""Framework-free pieces of DQN's Rainbow switches (Hessel et al. 2018): the C51 support and noisy-net noise.

Both backends draw their noisy layers' noise here, from one numpy generator in the
same layer order, so a seed gives the same exploration on torch and TF, and the
noise a test feeds a layer is the noise the layer uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np


def atom_support(num_atoms: int, v_min: float, v_max: float) -> np.ndarray:
    """The C51 atoms ``z_i = v_min + i (v_max - v_min) / (num_atoms - 1)`` (Bellemare et al. 2017), float32."""
    return np.linspace(v_min, v_max, num_atoms, dtype=np.float64).astype(np.float32)


def expected_q(logits: np.ndarray, support: np.ndarray) -> np.ndarray:
    """``[B, actions]`` means ``sum_i p_i z_i`` of the C51 distributions with logits ``[B, actions, atoms]``."""
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (probs / probs.sum(axis=-1, keepdims=True)) @ support


def scaled_noise(x: np.ndarray) -> np.ndarray:
    """``f(x) = sign(x) sqrt(|x|)``, the factorised noise transform of Fortunato et al. 2018, eq. 11."""
    return np.sign(x) * np.sqrt(np.abs(x))


def factorised_noise(rng: np.random.Generator, in_dim: int, out_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(f(e_in) [in], f(e_out) [out])`` with ``e ~ N(0, 1)``: a noisy layer's kernel noise is their outer
    product and its bias noise ``f(e_out)`` (Fortunato et al. 2018, sec. 3.2: p + q draws, not p x q)."""
    noise_in = scaled_noise(rng.standard_normal(in_dim))
    noise_out = scaled_noise(rng.standard_normal(out_dim))
    return noise_in.astype(np.float32), noise_out.astype(np.float32)


class NoisyLayer(Protocol):
    in_dim: int
    out_dim: int

    def set_noise(self, noise_in: np.ndarray, noise_out: np.ndarray) -> None: ...


def resample_noise(layers: Iterable[NoisyLayer], rng: np.random.Generator) -> None:
    """Fresh factorised noise for every layer, drawn in the layers' order."""
    for layer in layers:
        layer.set_noise(*factorised_noise(rng, layer.in_dim, layer.out_dim))


def zero_noise(layers: Iterable[NoisyLayer]) -> None:
    """No noise: the layers compute with their mean weights (greedy evaluation)."""
    for layer in layers:
        layer.set_noise(np.zeros(layer.in_dim, np.float32), np.zeros(layer.out_dim, np.float32))


class NoiseRngState:
    """Saves the generator of the noisy layers' noise (``noise_rng``) in the policy's checkpoint meta,
    so a restored noisy run draws the noise it would have drawn. Mixed in before the backend policy."""

    noise_rng: np.random.Generator

    def get_state(self):  # -> PolicyState
        state = super().get_state()
        state.meta["noise_rng"] = self.noise_rng.bit_generator.state
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        if "noise_rng" in state.meta:
            self.noise_rng.bit_generator.state = state.meta["noise_rng"]
