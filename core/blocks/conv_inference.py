"""The conv trunk of image observations in numpy, for the acting twin.

Why: a conv policy acting for 8 envs runs one small convolution per layer on a
handful of frames, where the framework's per-op dispatch costs more than the
arithmetic (the same reason the MLP has a numpy twin, see
:mod:`rlgear.blocks.inference`). In numpy each layer is an im2col copy, one
matmul (the bias rides in it: each patch row ends in a 1, each kernel in a bias row) and a
ReLU, into buffers allocated once per batch size, with the window views over them built once
too.

The math is the backends' (see :mod:`rlgear.config.conv`): observations flat
``[B, H * W * C]`` in HWC order, scaled (1/255 for uint8, folded into the first
kernel), conv layers without padding and with ReLU, features flattened in HWC
order, then the vector part of an image-plus-vector row copied after them.
Neutral kernels are ``[kh, kw, in, out]``.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rlgear.config.conv import ConvSpec


class _LayerBuffers:
    """One layer's buffers for a batch size: its input image, its patch matrix and its output.

    ``patches`` is ``[B * H' * W', kh * kw * C + 1]``, its last column ones (for the kernel's bias
    row: a separate bias add cost as much as the matmul at 8 frames); ``patch_grid`` is the memory
    of its other columns seen as ``[B, H', W', kh, kw, C]``, and ``windows`` the strided view of
    ``image`` in that layout, copied into it on every call. Channels last in the patch (the neutral
    kernel's row order) keep each window row ``kw * C`` contiguous floats in both arrays, so the copy
    runs in long strides: with channels first (``sliding_window_view``'s own order) it cost several
    times more.
    """

    def __init__(self, batch: int, in_shape: tuple[int, int, int], kernel: int, stride: int, out: int):
        height, width, channels = in_shape
        out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        self.image = np.zeros((batch, height, width, channels), np.float32)
        windows = sliding_window_view(self.image, (kernel, kernel), axis=(1, 2))  # [B, h, w, C, kh, kw]
        self.windows = windows[:, ::stride, ::stride][:, :out_h, :out_w].transpose(0, 1, 2, 4, 5, 3)
        self.patches = np.ones((batch * out_h * out_w, kernel * kernel * channels + 1), np.float32)
        self.patch_grid = self.patches[:, :-1].reshape(batch, out_h, out_w, kernel, kernel, channels)
        self.output = np.zeros((batch * out_h * out_w, out), np.float32)
        self.out_shape = (batch, out_h, out_w, out)


class NumpyConvTrunk:
    """Forward pass of the conv trunk described by a :class:`ConvSpec`, from neutral weights."""

    def __init__(self, spec: ConvSpec):
        self.spec = spec
        # per layer [kh * kw * C + 1, out]: the neutral kernel's rows, then the bias
        self._kernels: list[np.ndarray] = []
        self._buffers: list[_LayerBuffers] = []

    def load(self, weights: dict[str, np.ndarray], scope: str = "shared") -> None:
        """Take ``{scope}/conv_<i>/{kernel,bias}``; the input scale is folded into the first kernel."""
        self._kernels = []
        for i, layer in enumerate(self.spec.layers):
            kernel = np.asarray(weights[f"{scope}/conv_{i}/kernel"], dtype=np.float32)
            expected = (layer.kernel, layer.kernel, layer.in_channels, layer.out_channels)
            if kernel.shape != expected:
                raise ValueError(f"{scope}/conv_{i}/kernel: expected shape {expected}, got {kernel.shape}")
            if i == 0 and self.spec.scale != 1.0:
                kernel = kernel * np.float32(self.spec.scale)
            bias = np.asarray(weights[f"{scope}/conv_{i}/bias"], dtype=np.float32)
            rows = np.vstack([kernel.reshape(-1, layer.out_channels), bias[None, :]])
            self._kernels.append(np.ascontiguousarray(rows, dtype=np.float32))

    def _buffers_for(self, batch: int) -> list[_LayerBuffers]:
        if not self._buffers or self._buffers[0].image.shape[0] != batch:
            buffers, shape = [], self.spec.image_shape
            for layer in self.spec.layers:
                buffers.append(_LayerBuffers(batch, shape, layer.kernel, layer.stride, layer.out_channels))
                shape = buffers[-1].out_shape[1:]
            for buffer in buffers:  # the grid must be the patch matrix's memory, not a copy of it
                assert np.shares_memory(buffer.patch_grid, buffer.patches)
            self._buffers = buffers
        return self._buffers

    def forward(self, obs: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Features ``[B, H' * W' * C' + vector_size]`` (conv output in HWC order, then the row's
        vector part) of flat observations ``[B, H * W * C + vector_size]``, written into ``out``
        (e.g. a slice of the MLP's input buffer) and returned."""
        buffers = self._buffers_for(obs.shape[0])
        image_size, conv_dim = self.spec.image_size, self.spec.conv_dim
        features = out
        if self.spec.vector_size:
            out[:, conv_dim:] = obs[:, image_size:]
            buffers[0].image.reshape(obs.shape[0], -1)[...] = obs[:, :image_size]
            features = out[:, :conv_dim]
        else:
            buffers[0].image.reshape(obs.shape[0], -1)[...] = obs
        last = len(buffers) - 1
        for i, (buffer, kernel) in enumerate(zip(buffers, self._kernels, strict=True)):
            np.copyto(buffer.patch_grid, buffer.windows)
            y = np.matmul(buffer.patches, kernel, out=buffer.output)
            if i == last:
                np.maximum(y.reshape(features.shape), 0, out=features)
            else:
                np.maximum(y.reshape(buffers[i + 1].image.shape), 0, out=buffers[i + 1].image)
        return out
