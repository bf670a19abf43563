"""``rlgear export --check PATH``: an exported file verified against the checkpoint it came from.

The check (i) hashes the file and compares with its sidecar, (ii) hashes the checkpoint's
config and compares, and (iii) plays the file and rlgear's own acting side by side on random
observations drawn from the observation space (random action masks with at least one action
allowed; recurrent policies through episodes with their state fed back), and compares the
actions: identical for discrete ones, within ``atol`` for continuous ones. An export with
``--explore`` samples, so (iii) compares only that its actions lie in the action space.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from rlgear.errors import RLGearError
from rlgear.export import sidecar as sidecar_mod
from rlgear.export.signature import FORMAT_BACKENDS
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Tuple, space_from_json


@dataclasses.dataclass
class CheckReport:
    """What :func:`check` compared, and the largest differences it found."""

    path: Path
    checkpoint: Path
    observations: int
    actions_equal: int
    max_action_diff: float
    problems: list[str]
    #: What the actions were compared with: rlgear's own acting, or (``--explore``) the action space.
    compared_with: str = "rlgear's acting"

    @property
    def ok(self) -> bool:
        return not self.problems


class OnnxPlayer:
    """Runs an ONNX file with onnxruntime alone (no torch, no rlgear model code)."""

    def __init__(self, path: str | os.PathLike):
        try:
            import onnxruntime
        except ImportError as err:
            raise RLGearError("playing an ONNX file needs onnxruntime: pip install 'rlgear[export]'") from err
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.session.run(None, feeds)
        return dict(zip(self.output_names, outputs, strict=True))


def player(path: str | os.PathLike, sidecar: dict[str, Any] | None = None) -> Any:
    """``play(feeds: {input name: array}) -> {output name: array}`` for an exported file."""
    sidecar = sidecar if sidecar is not None else sidecar_mod.read_sidecar(path)
    fmt = sidecar["format"]
    if fmt == "onnx":
        return OnnxPlayer(path)
    from rlgear.discovery import registry

    try:
        backend = registry.load_backend(FORMAT_BACKENDS[fmt])()
    except ImportError as err:
        raise RLGearError(f"playing a {fmt} file needs {FORMAT_BACKENDS[fmt]}: {err}") from None
    names_in = [spec["name"] for spec in sidecar["inputs"]]
    names_out = [spec["name"] for spec in sidecar["outputs"]]
    return backend.exported_player(Path(path), fmt, names_in, names_out)


def random_observations(space: Space, n: int, rng: np.random.Generator) -> Any:
    """``n`` observations of ``space`` (batched; Dict/Tuple as dicts/tuples of arrays). Unbounded Box
    dimensions draw from a standard normal; an ``action_mask`` allows at least one action."""
    if isinstance(space, Dict):
        out = {key: random_observations(sub, n, rng) for key, sub in space.items()}
        if "action_mask" in out:
            mask = out["action_mask"]
            mask[np.arange(n), rng.integers(mask.shape[1], size=n)] = 1
        return out
    if isinstance(space, Tuple):
        return tuple(random_observations(sub, n, rng) for sub in space.spaces)
    if isinstance(space, Discrete):
        return rng.integers(space.n, size=n).astype(np.int64)
    if isinstance(space, MultiDiscrete):
        return np.stack([rng.integers(k, size=n) for k in space.nvec], axis=-1).astype(np.int64)
    if isinstance(space, MultiBinary):
        return rng.integers(2, size=(n, *space.shape)).astype(np.int8)
    if isinstance(space, Box):
        low = np.broadcast_to(space.low, space.shape).astype(np.float64)
        high = np.broadcast_to(space.high, space.shape).astype(np.float64)
        bounded = np.isfinite(low) & np.isfinite(high)
        values = rng.standard_normal((n, *space.shape))
        span = np.where(bounded, high - low, 1.0)
        values = np.where(bounded, np.where(bounded, low, 0.0) + rng.random((n, *space.shape)) * span, values)
        if np.issubdtype(space.dtype, np.integer):
            values = np.rint(values)
        return values.astype(space.dtype)
    raise TypeError(f"cannot draw observations of {space!r}")


def feeds_for(sidecar: dict[str, Any], observations: Any) -> dict[str, np.ndarray]:
    """The exported graph's observation inputs for a batch of env observations (by the sidecar's names)."""
    feeds = {}
    for spec in sidecar["inputs"]:
        name = spec["name"]
        if name != "obs" and not name.startswith("obs."):
            continue
        value = observations
        for key in name.split(".")[1:]:
            value = value[int(key)] if isinstance(value, tuple) else value[key]
        feeds[name] = np.asarray(value).astype(spec["dtype"])
    return feeds


def exported_actions(sidecar: dict[str, Any], outputs: dict[str, np.ndarray]) -> Any:
    """The action outputs as rlgear's acting returns them (a dict/tuple for Dict/Tuple actions)."""
    space = space_from_json(sidecar["action_space"])
    if isinstance(space, Dict):
        return {key: outputs[f"action.{key}"] for key in space}
    if isinstance(space, Tuple):
        return tuple(outputs[f"action.{i}"] for i in range(len(space.spaces)))
    return outputs["action"]


def compare_actions(space: Space, ours: Any, theirs: Any, atol: float) -> tuple[int, float]:
    """``(rows with equal actions, largest continuous difference)`` between two action batches."""
    if isinstance(space, Dict | Tuple):
        parts = list(space.keys()) if isinstance(space, Dict) else range(len(space.spaces))
        subs = [space[k] for k in parts] if isinstance(space, Dict) else list(space.spaces)
        equal = None
        worst = 0.0
        for key, sub in zip(parts, subs, strict=True):
            rows, diff = _row_equal(sub, np.asarray(ours[key]), np.asarray(theirs[key]), atol)
            equal = rows if equal is None else equal & rows
            worst = max(worst, diff)
        return int(np.sum(equal)), worst
    rows, diff = _row_equal(space, np.asarray(ours), np.asarray(theirs), atol)
    return int(np.sum(rows)), diff


def _row_equal(space: Space, a: np.ndarray, b: np.ndarray, atol: float) -> tuple[np.ndarray, float]:
    n = a.shape[0]
    if isinstance(space, Discrete | MultiDiscrete):
        return (a.reshape(n, -1) == b.reshape(n, -1)).all(axis=1), 0.0
    diff = np.abs(a.reshape(n, -1).astype(np.float64) - b.reshape(n, -1).astype(np.float64))
    return (diff <= atol).all(axis=1), float(diff.max(initial=0.0))


def check(
    path: str | os.PathLike, checkpoint: str | os.PathLike | None = None, n: int = 1000, atol: float = 1e-4
) -> CheckReport:
    """Verify the exported file ``path`` against ``checkpoint`` (default: the one its sidecar names)."""
    from rlgear.run import agent
    from rlgear.run import checkpoint as ckpt

    path = Path(path)
    sidecar = sidecar_mod.read_sidecar(path)
    problems = []
    if sidecar_mod.file_hash(path) != sidecar.get("file_sha256"):
        problems.append(
            f"{path}: its contents changed since it was exported (sha256 differs from the sidecar's)"
        )
    folder = ckpt.resolve_path(checkpoint if checkpoint is not None else sidecar["checkpoint"])
    _, _, raw_config, _ = ckpt.read(folder)
    if sidecar_mod.config_hash(raw_config) != sidecar.get("config_sha256"):
        problems.append(f"{folder}: its config differs from the one {path.name} was exported from")
    loaded = agent.load(folder, overrides=["model.numpy_inference=false"], policy_id=sidecar.get("policy_id"))
    try:
        play = player(path, sidecar)
    except RLGearError:
        raise
    except Exception as err:  # a damaged file: say so beside the hash mismatch, not as a traceback
        problems.append(
            f"{path}: cannot be played: {str(err).strip().splitlines()[0][:200] if str(err).strip() else err!r}"
        )
        return CheckReport(path, folder, 0, 0, float("nan"), problems)
    space = loaded.action_space
    rng = np.random.default_rng(0)
    equal, worst, total = 0, 0.0, 0
    recurrent = bool(sidecar.get("recurrent"))
    steps = 8 if recurrent else 1
    batch = max(1, n // steps)
    state: dict[str, np.ndarray] = {}
    for step in range(steps):
        observations = random_observations(loaded.observation_space, batch, rng)
        feeds = feeds_for(sidecar, observations)
        if recurrent:
            feeds.update(_recurrent_feeds(sidecar, state, batch, step == 0))
        outputs = play(feeds)
        theirs = exported_actions(sidecar, outputs)
        ours = loaded.compute_actions(observations, explore=False, episode_start=step == 0)
        if recurrent:
            state = {"state_in.0": outputs["state_out.0"], "state_in.1": outputs["state_out.1"],
                     "prev_action": outputs.get("action_raw", outputs["action"])}  # fmt: skip
        total += batch
        if sidecar.get("explore"):
            equal += int(np.sum(_in_space(space, theirs)))
            continue
        rows, diff = compare_actions(space, ours, theirs, atol)
        equal, worst = equal + rows, max(worst, diff)
    if equal != total:
        what = "lie in the action space" if sidecar.get("explore") else f"match rlgear's (atol {atol})"
        problems.append(f"{path}: {total - equal} of {total} actions do not {what}")
    compared = (
        "the action space (an --explore export samples)" if sidecar.get("explore") else "rlgear's acting"
    )
    return CheckReport(path, folder, total, equal, worst, problems, compared)


def _recurrent_feeds(sidecar: dict[str, Any], state: dict[str, np.ndarray], n: int, start: bool) -> dict:
    feeds = {}
    for spec in sidecar["inputs"]:
        name = spec["name"]
        if name.startswith("obs"):
            continue
        shape = (n, *(d for d in spec["shape"][1:]))
        zeros = np.zeros(shape, dtype=spec["dtype"])
        feeds[name] = zeros if start or name not in state else np.asarray(state[name]).astype(spec["dtype"])
    return feeds


def _in_space(space: Space, actions: Any) -> np.ndarray:
    if isinstance(space, Discrete):
        a = np.asarray(actions)
        return (a >= 0) & (a < space.n)
    if isinstance(space, Box):
        a = np.asarray(actions, np.float64).reshape(len(actions), -1)
        low, high = (
            np.broadcast_to(space.low, space.shape).reshape(-1),
            np.broadcast_to(space.high, space.shape).reshape(-1),
        )
        return ((a >= low - 1e-6) & (a <= high + 1e-6)).all(axis=1)
    if isinstance(space, MultiDiscrete):
        a = np.asarray(actions)
        return ((a >= 0) & (a < np.asarray(space.nvec))).all(axis=1)
    n = len(next(iter(actions.values())) if isinstance(actions, dict) else actions[0])
    return np.ones(n, bool)
