"""Acting with the catalog MLP in numpy, from framework-neutral weights.

Why: acting is a batch of a few observations through a 64x64 network, where a
deep-learning framework spends most of its time in per-op dispatch, not in
arithmetic (in a profile of the torch evaluator, the forward pass cost more
than stepping 8 CartPoles). The same forward in numpy is several times faster, so
backends use this twin for ``compute_actions`` when the model is the built-in
actor-critic MLP, refreshing it from ``get_weights()`` after every update.
Learning always runs in the framework. Turn it off with
``model.numpy_inference: false``.

Weight names and layouts are the framework-neutral ones (see
``ActorCriticMLP``): ``policy/hidden_<i>/kernel`` ``[in, out]`` etc. With image
observations the conv trunk (``shared/conv_<i>/...``) runs first, in numpy too
(:mod:`rlgear.blocks.conv_inference`).
"""

from __future__ import annotations

import math

import numpy as np

from rlgear.blocks.conv_inference import NumpyConvTrunk
from rlgear.config.conv import ConvSpec
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Space, Tuple

_LOG_2PI = math.log(2.0 * math.pi)
_TINY = float(np.finfo(np.float32).tiny)

#: How many exploration-noise values :meth:`NumpyActorCritic.act_deferred` draws at once (about 1,000
#: steps of 8 envs with 2 actions): one RNG call and two logs per block instead of several numpy
#: calls per step.
NOISE_BLOCK = 16384

#: The column :meth:`NumpyActorCritic.act_deferred`'s callers record in place of ``action_logp``: the
#: policy head's output (logits, or the Gaussian's means), from which :meth:`NumpyActorCritic.logp`
#: gives the log-probabilities of a whole fragment at once, before it is postprocessed.
POLICY_HEAD = "policy_head"


def _elu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, np.where(x > 0, x, np.expm1(np.minimum(x, 0))))
    return out


def _silu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.divide(x, 1.0 + np.exp(-x), out=out)


#: ``activation(x, out)``: writes into ``out`` (the next layer's input buffer) and returns it.
ACTIVATIONS = {
    "tanh": lambda x, out: np.tanh(x, out=out),
    "relu": lambda x, out: np.maximum(x, 0, out=out),
    "elu": _elu,
    "silu": _silu,
}


def _with_bias_row(kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``[in + 1, out]``: the kernel with the bias as its last row, for inputs ending in a 1."""
    return np.ascontiguousarray(np.vstack([kernel, bias[None, :]]), dtype=np.float32)


def _block_diagonal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((a.shape[0] + b.shape[0], a.shape[1] + b.shape[1]), dtype=np.float32)
    out[: a.shape[0], : a.shape[1]] = a
    out[a.shape[0] :, a.shape[1] :] = b
    return out


class NumpyActorCritic:
    """Forward pass, sampling and log-probabilities of the catalog actor-critic MLP (after its conv
    trunk when ``conv`` describes one).

    With MultiDiscrete, Tuple or Dict actions only :meth:`forward` and :meth:`dist_inputs` apply (the
    head is the distribution inputs; the backends act on those in the framework, the framework-free
    runtime with :mod:`rlgear.blocks.action_inference`).
    """

    def __init__(
        self,
        action_space: Space,
        hidden_layers: int,
        activation: str,
        shared: bool,
        seed: int | None = None,
        conv: ConvSpec | None = None,
    ):
        if not isinstance(action_space, Discrete | Box | MultiDiscrete | Tuple | Dict):
            raise TypeError(f"unsupported action space {action_space!r}")
        self.discrete = isinstance(action_space, Discrete)
        self.continuous = isinstance(action_space, Box)  # the only kind with a log_std weight
        self.hidden_layers = hidden_layers
        self.activation = ACTIVATIONS[activation]
        self.shared = shared
        self.rng = np.random.default_rng(seed)
        self.trunk = None if conv is None else NumpyConvTrunk(conv)
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []
        self.version = -1
        self._row_index = np.arange(0)
        self._kernels: list[np.ndarray] = []  # hidden layers then head, each with its bias as last row
        self._inputs: list[np.ndarray] = []  # per layer, [B, in + 1] with a last column of ones
        # act_deferred's noise: a block drawn from ``_noise_rng`` when its state was ``_noise_rng_state``
        self._noise = np.zeros(0, dtype=np.float32)
        self._noise_next = 0
        self._noise_rng: np.random.Generator | None = None
        self._noise_rng_state: dict | None = None

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Take new weights. Separate policy and value MLPs are fused into one wider MLP
        (side-by-side first layer, block-diagonal deeper layers and heads), so a forward
        pass is one matmul per layer: with a handful of observations the cost is the
        number of numpy calls, not the arithmetic."""

        def dense(prefix: str) -> tuple[np.ndarray, np.ndarray]:
            return (
                np.asarray(weights[f"{prefix}/kernel"], dtype=np.float32),
                np.asarray(weights[f"{prefix}/bias"], dtype=np.float32),
            )

        policy_head, value_head = dense("policy/output"), dense("value/output")
        self.num_head_outputs = policy_head[0].shape[1]
        layers = []
        if self.shared:
            layers = [dense(f"shared/hidden_{i}") for i in range(self.hidden_layers)]
            head_kernel = np.concatenate([policy_head[0], value_head[0]], axis=1)
            head_bias = np.concatenate([policy_head[1], value_head[1]])
        else:
            for i in range(self.hidden_layers):
                (kp, bp), (kv, bv) = dense(f"policy/hidden_{i}"), dense(f"value/hidden_{i}")
                kernel = np.concatenate([kp, kv], axis=1) if i == 0 else _block_diagonal(kp, kv)
                layers.append((kernel, np.concatenate([bp, bv])))
            head_kernel = _block_diagonal(policy_head[0], value_head[0])
            head_bias = np.concatenate([policy_head[1], value_head[1]])
        self.layers = [(np.ascontiguousarray(k), b) for k, b in layers]
        self.head = (np.ascontiguousarray(head_kernel), head_bias)
        self._kernels = [_with_bias_row(k, b) for k, b in (*self.layers, self.head)]
        self._inputs = []
        if self.trunk is not None:
            self.trunk.load(weights)
        self.log_std = np.asarray(weights["policy/log_std"], dtype=np.float32) if self.continuous else None
        self.version = version

    def _input_buffers(self, n: int) -> list[np.ndarray]:
        if not self._inputs or self._inputs[0].shape[0] != n:
            self._inputs = [np.ones((n, k.shape[0]), dtype=np.float32) for k in self._kernels]
        return self._inputs

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(policy head output, values)`` for flat float32 observations ``[B, F]`` (images flat in HWC
        order, as the framework models take them).

        Why this shape: with a handful of observations each numpy call costs far more
        than its arithmetic, so the biases ride in the matmuls (inputs end in a column
        of ones, kernels in a bias row) and each activation writes straight into the
        next layer's input buffer: one matmul and one activation per layer.
        """
        inputs = self._input_buffers(obs.shape[0])
        if self.trunk is None:
            inputs[0][:, :-1] = obs
        else:
            self.trunk.forward(obs, out=inputs[0][:, :-1])
        for kernel, x, following in zip(self._kernels, inputs, inputs[1:], strict=False):
            self.activation(x @ kernel, following[:, :-1])
        out = inputs[-1] @ self._kernels[-1]
        return out[:, : self.num_head_outputs], out[:, self.num_head_outputs]

    def _rows(self, n: int) -> np.ndarray:
        if self._row_index.shape[0] != n:
            self._row_index = np.arange(n)
        return self._row_index

    def act(
        self, obs: np.ndarray, explore: bool, action_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, action_logp, values)``, as the framework's distributions would give.

        ``action_mask`` (bool ``[B, n]``, Discrete actions): disallowed actions get logit -inf,
        so they are never sampled nor chosen greedily.
        """
        head, values = self.forward(obs)
        return self.sample(head, values, explore, action_mask)

    def sample(
        self, head: np.ndarray, values: np.ndarray, explore: bool, action_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, action_logp, values)`` from the policy head's output (logits or means)."""
        if self.discrete:  # ufuncs' own reduce/accumulate: the ndarray methods add a Python call each
            if action_mask is not None:
                head = np.where(action_mask, head, -np.inf).astype(np.float32, copy=False)
            shifted = head - np.maximum.reduce(head, axis=-1, keepdims=True)
            cdf = np.add.accumulate(np.exp(shifted), axis=-1)
            total = cdf[:, -1]
            rows = self._rows(head.shape[0])
            if explore:  # inverse-CDF sampling: u < total, so the index stays below n
                u = self.rng.random(head.shape[0], dtype=np.float32)
                u *= total
                if action_mask is not None:  # u > 0: a masked action's cdf equals its left neighbour's
                    np.maximum(u, np.finfo(np.float32).tiny, out=u)
                actions = np.add.reduce(cdf < u[:, None], axis=-1, dtype=np.int64)
            else:
                actions = np.argmax(head, axis=-1)
            logp = shifted[rows, actions] - np.log(total)
            return actions.astype(np.int64, copy=False), logp.astype(np.float32, copy=False), values
        if action_mask is not None:
            raise ValueError("an action mask needs Discrete actions, not Box")
        std = np.exp(self.log_std)
        if explore:
            noise = self.rng.standard_normal(head.shape, dtype=np.float32)
            actions = head + std * noise
        else:
            noise = np.zeros_like(head)
            actions = head
        logp = (-0.5 * noise * noise - self.log_std - 0.5 * _LOG_2PI).sum(axis=-1)
        return actions.astype(np.float32), logp.astype(np.float32), values

    def act_deferred(
        self, obs: np.ndarray, explore: bool, action_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, head, values)``: what sampling needs at each step, with the log-probabilities
        left to :meth:`logp` over the whole fragment (the head is recorded as :data:`POLICY_HEAD`).

        Why: with a handful of envs, a step's cost is the number of numpy calls, not arithmetic;
        drawing the noise in blocks and sampling by Gumbel-max (the argmax of logits plus Gumbel
        noise is a Categorical sample) takes two calls per step where inverse-CDF sampling and
        log-probabilities took about a dozen. Box actions are ``mean + std * noise``, as in
        :meth:`act`. The distribution is the same as :meth:`act`'s; the random stream is not.
        """
        head, values = self.forward(obs)
        if self.discrete:
            if action_mask is not None:  # disallowed actions: -inf, never the argmax
                head = np.where(action_mask, head, -np.inf).astype(np.float32, copy=False)
            if explore:
                return np.argmax(head + self._exploration_noise(head.shape), axis=-1), head, values
            return np.argmax(head, axis=-1), head, values
        if action_mask is not None:
            raise ValueError("an action mask needs Discrete actions, not Box")
        if explore:
            return head + np.exp(self.log_std) * self._exploration_noise(head.shape), head, values
        return head.copy(), head, values

    def logp(
        self, head: np.ndarray, actions: np.ndarray, action_mask: np.ndarray | None = None
    ) -> np.ndarray:
        """float32 log-probabilities of ``actions`` (``[...]``) under the head's output ``[..., A]``
        (as :meth:`act_deferred` returned it: masked logits, or means), for any leading shape.

        A row whose mask allows nothing (an inactive multi-agent slot, never trained on) is taken
        as unmasked, so no NaN appears in the table.
        """
        if self.discrete:
            if action_mask is not None:
                unmasked = ~np.logical_or.reduce(action_mask, axis=-1, keepdims=True)
                head = np.where(action_mask | unmasked, head, -np.inf)
            with np.errstate(invalid="ignore"):  # rows of -inf only where a row was all masked
                shifted = head - np.max(head, axis=-1, keepdims=True)
            chosen = np.take_along_axis(shifted, actions[..., None].astype(np.intp), axis=-1)[..., 0]
            return (chosen - np.log(np.sum(np.exp(shifted), axis=-1))).astype(np.float32)
        noise = (actions - head) / np.exp(self.log_std)
        return (-0.5 * noise * noise - self.log_std - 0.5 * _LOG_2PI).sum(axis=-1).astype(np.float32)

    def _exploration_noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """The next ``shape`` values of the noise block (Gumbel for Discrete, normal for Box)."""
        size = math.prod(shape)
        if self._noise_rng is not self.rng or self._noise_next + size > self._noise.size:
            self._draw_noise(max(NOISE_BLOCK, size))  # a new Generator (reseed) or the block is used up
        start = self._noise_next
        self._noise_next = start + size
        return self._noise[start : start + size].reshape(shape)

    def _draw_noise(self, size: int) -> None:
        self._noise_rng, self._noise_rng_state = self.rng, self.rng.bit_generator.state
        if self.discrete:  # Gumbel: -log(-log(u)), u in [tiny, 1): finite, within about [-4.5, 16.7]
            noise = self.rng.random(size, dtype=np.float32)
            np.maximum(noise, _TINY, out=noise)
            np.log(noise, out=noise)
            np.negative(noise, out=noise)
            np.log(noise, out=noise)
            np.negative(noise, out=noise)
        else:
            noise = self.rng.standard_normal(size, dtype=np.float32)
        self._noise, self._noise_next = noise, 0

    def rng_state(self) -> dict:
        """The acting RNG as a checkpoint keeps it: with a noise block in use, the Generator's state
        before the block was drawn and how much of it was used, so a restored run draws the same
        block again and goes on where this one is (``{"generator": ..., "noise": [size, used]}``)."""
        if self._noise_rng is self.rng and self._noise_next < self._noise.size:
            return {
                "generator": self._noise_rng_state,
                "noise": [int(self._noise.size), int(self._noise_next)],
            }
        return {"generator": self.rng.bit_generator.state}

    def set_rng_state(self, saved: dict) -> None:
        """Undo :meth:`rng_state` (or take a bare bit-generator state, as older checkpoints hold)."""
        if "generator" not in saved:  # a bit generator's own state
            self.rng.bit_generator.state = saved
            self._noise_rng = None
            return
        self.rng.bit_generator.state = saved["generator"]
        self._noise_rng = None
        if "noise" in saved:
            size, used = saved["noise"]
            self._draw_noise(int(size))
            self._noise_next = int(used)

    def dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        head, _ = self.forward(obs)
        if self.log_std is None:  # logits, or a composite action's inputs (all from the head)
            return head
        return np.concatenate([head, np.broadcast_to(self.log_std, head.shape)], axis=-1)


class NumpyActor(NumpyActorCritic):
    """The numpy twin of an actor whose value function is not on its observation (mappo: a
    centralised critic, ``critic/...``, on the critic input): the catalog policy MLP
    (``policy/hidden_<i>``, ``policy/output``, ``policy/log_std``) acting as
    :class:`NumpyActorCritic` does, with values 0. Why a subclass: acting, sampling noise, deferred
    log-probabilities and their checkpointed generator stay the ones every policy uses."""

    def __init__(self, action_space: Space, hidden_layers: int, activation: str, seed: int | None = None):
        super().__init__(action_space, hidden_layers, activation, True, seed, None)

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        """The policy MLP as the shared trunk of the fused layout, with a zero value head."""
        actor = {key: value for key, value in weights.items() if key.startswith("policy/")}
        for i in range(self.hidden_layers):
            for part in ("kernel", "bias"):
                actor[f"shared/hidden_{i}/{part}"] = weights[f"policy/hidden_{i}/{part}"]
        width = np.shape(weights["policy/output/kernel"])[0]
        actor["value/output/kernel"] = np.zeros((width, 1), np.float32)
        actor["value/output/bias"] = np.zeros(1, np.float32)
        super().load(actor, version)


def fill_action_logp(actor: NumpyActorCritic | None, columns: dict[str, np.ndarray]) -> None:
    """A policy's :meth:`~rlgear.policy.Policy.finish_fragment` for rows its twin acted on with
    :meth:`NumpyActorCritic.act_deferred`: the :data:`POLICY_HEAD` column becomes ``action_logp``."""
    head = columns.pop(POLICY_HEAD, None)
    if head is None or actor is None:
        return
    columns[SampleBatch.ACTION_LOGP] = actor.logp(
        head, columns[SampleBatch.ACTIONS], columns.get(SampleBatch.ACTION_MASK)
    )
