"""The observation filter (``model.observation_filter: mean_std``): running mean and variance, in numpy.

Each evaluator normalises the flat observations it receives with running
statistics, ``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)``, before the
policy sees them; the batch stores the filtered observation, so the learner
trains on exactly what the policy acted on.

Statistics are kept as ``(count, mean, M2)`` (M2: the sum of squared
deviations from the mean) and combined with the parallel rule of Chan, Golub
and LeVeque (1979), exact for any split of the data: merging the statistics
of several streams gives those of one stream over all their data (up to
float64 rounding).

With remote workers each worker keeps, besides the statistics it normalises
with, a *delta*: the statistics of the observations it saw since it last
reported. The driver pops the deltas (with the episode metrics, once per
iteration), merges them into the global filter (the local evaluator's), and
sends the merged state back with the weights; a worker then normalises with
the global statistics plus its not-yet-reported delta, so nothing it saw is
counted twice or lost. This is RLlib's ``MeanStdFilter`` scheme.

Image observations are refused: the conv net scales uint8 pixels by 1/255,
and per-pixel statistics would only add noise. For the same reason the image
part of an image-plus-vector row (:class:`~rlgear.config.conv.ImageVectorBox`,
an image in a Dict/Tuple) passes through as it is: only the vector after it
is normalised, and the statistics have the vector's shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.config.conv import ImageVectorBox, is_image
from rlgear.errors import ConfigError
from rlgear.spaces import Box, Space

#: Checkpoint array names of the global filter statistics: ``obs_filter/{count,mean,m2}``.
OBS_FILTER_PREFIX = "obs_filter/"

#: Added to the variance before the square root (as SB3's VecNormalize and RLlib do).
EPSILON = 1e-8


class RunningStats:
    """Count, mean and M2 (sum of squared deviations) of a stream of ``[*shape]`` observations, float64."""

    def __init__(self, shape: tuple[int, ...]):
        self.count = 0
        self.mean = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)

    @property
    def var(self) -> np.ndarray:
        """Population variance (0 before two observations)."""
        return self.m2 / self.count if self.count > 0 else np.zeros_like(self.m2)

    def push(self, observations: np.ndarray) -> None:
        """Add a batch ``[N, *shape]`` of observations."""
        batch = np.asarray(observations, dtype=np.float64)
        n = batch.shape[0]
        if n == 0:
            return
        batch_mean = batch.mean(axis=0)
        self._merge(n, batch_mean, ((batch - batch_mean) ** 2).sum(axis=0))

    def merge(self, other: RunningStats) -> None:
        """Add another stream's statistics (Chan et al.'s parallel rule)."""
        self._merge(other.count, other.mean, other.m2)

    def _merge(self, n: int, mean: np.ndarray, m2: np.ndarray) -> None:
        if n == 0:
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.count = total

    def copy(self) -> RunningStats:
        out = RunningStats(self.mean.shape)
        out.count, out.mean, out.m2 = self.count, self.mean.copy(), self.m2.copy()
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"count": np.array(self.count, dtype=np.int64), "mean": self.mean.copy(), "m2": self.m2.copy()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], shape: tuple[int, ...], what: str) -> RunningStats:
        """Rebuild from :meth:`to_arrays`, checking names and shapes (``what`` names the source in errors)."""
        missing = [key for key in ("count", "mean", "m2") if key not in arrays]
        if missing:
            raise ValueError(f"{what}: observation filter statistics are missing {missing}")
        for key in ("mean", "m2"):
            if tuple(np.shape(arrays[key])) != tuple(shape):
                raise ValueError(
                    f"{what}: observation filter '{key}' has shape {tuple(np.shape(arrays[key]))}, "
                    f"the observations have {tuple(shape)}"
                )
        out = cls(shape)
        out.count = int(arrays["count"])
        out.mean = np.array(arrays["mean"], dtype=np.float64)
        out.m2 = np.array(arrays["m2"], dtype=np.float64)
        return out


class MeanStdFilter:
    """Normalise and clip observations with running statistics, keeping a delta for the driver.

    ``frozen`` filters (evaluation, ``rlgear evaluate``, loaded agents) only
    apply the statistics they were given. ``passthrough``: the number of leading
    columns of flat ``[B, F]`` observations left as they are and kept out of the
    statistics (the image of an image-plus-vector row); ``shape`` is then the rest's.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, passthrough: int = 0):
        self.shape = tuple(shape)
        self.clip = float(clip)
        self.passthrough = int(passthrough)
        self.stats = RunningStats(self.shape)  # what observations are normalised with
        self.delta = RunningStats(self.shape)  # seen since the last pop_delta()
        self.frozen = False

    def __call__(self, observations: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """``[B, *shape]`` observations, normalised and clipped, float32 (the statistics first take them in).

        ``valid`` (``TimeStep.valid``): rows that carry no env step (an external client's empty
        slot) are normalised but not counted.
        """
        if not self.frozen:
            seen = observations if valid is None else np.asarray(observations)[valid]
            if self.passthrough:
                seen = np.asarray(seen)[:, self.passthrough :]
            self.stats.push(seen)
            self.delta.push(seen)
        return self.apply(observations)

    def apply(self, observations: np.ndarray) -> np.ndarray:
        """Normalise and clip without updating anything."""
        if self.passthrough:
            out = np.array(observations, dtype=np.float32)
            out[:, self.passthrough :] = self._normalised(out[:, self.passthrough :])
            return out
        return self._normalised(observations)

    def _normalised(self, observations: np.ndarray) -> np.ndarray:
        scaled = (np.asarray(observations, dtype=np.float64) - self.stats.mean) / np.sqrt(
            self.stats.var + EPSILON
        )
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    # --- the driver and its workers -------------------------------------------------
    def pop_delta(self) -> dict[str, np.ndarray]:
        """The statistics of the observations seen since the last call (and forget them)."""
        out = self.delta.to_arrays()
        self.delta = RunningStats(self.shape)
        return out

    def merge_delta(self, arrays: dict[str, np.ndarray]) -> None:
        """Merge a worker's :meth:`pop_delta` into these (the global) statistics."""
        self.stats.merge(RunningStats.from_arrays(arrays, self.shape, "a worker's delta"))

    def sync(self, global_arrays: dict[str, np.ndarray]) -> None:
        """Take the driver's merged statistics, plus this worker's delta not yet reported."""
        stats = RunningStats.from_arrays(global_arrays, self.shape, "the driver's observation filter")
        stats.merge(self.delta)
        self.stats = stats

    # --- checkpoints --------------------------------------------------------------
    def get_state(self) -> dict[str, np.ndarray]:
        return self.stats.to_arrays()

    def set_state(self, arrays: dict[str, np.ndarray], what: str = "checkpoint") -> None:
        """Restore :meth:`get_state` exactly; the delta starts empty."""
        self.stats = RunningStats.from_arrays(arrays, self.shape, what)
        self.delta = RunningStats(self.shape)


def make_observation_filter(model_config: Any, observation_space: Space) -> MeanStdFilter | None:
    """The filter ``model.observation_filter`` asks for (None for ``none``), or a ConfigError."""
    kind = getattr(model_config, "observation_filter", "none")
    if kind == "none":
        return None
    if is_image(observation_space):
        raise ConfigError(
            f"model.observation_filter: mean_std normalises flat observations; the observation space "
            f"{observation_space!r} is an image, which the conv net scales itself (uint8 by 1/255). "
            "Use observation_filter: none"
        )
    if not isinstance(observation_space, Box):
        raise ConfigError(
            f"model.observation_filter: mean_std needs Box observations, the env's are {observation_space!r}"
        )
    if model_config.observation_filter_clip <= 0:
        raise ConfigError(
            f"model.observation_filter_clip: expected a positive number, got {model_config.observation_filter_clip}"
        )
    if isinstance(observation_space, ImageVectorBox):  # the image part is the conv net's to scale
        return MeanStdFilter(
            (observation_space.vector_size,),
            model_config.observation_filter_clip,
            passthrough=observation_space.image.size,
        )
    return MeanStdFilter(observation_space.shape, model_config.observation_filter_clip)
