"""``random`` and ``grid``: searchers whose suggestions never depend on results.

Both give exactly the trials ``rlgear tune`` gave before searchers were plugins
(:func:`rlgear.tune.search_space.variants`): ``tune.num_samples`` repetitions of
the grid, every distribution drawn afresh per trial from one generator seeded
with ``tune.seed``. ``grid`` only refuses spaces that are not grids, so a grid
experiment cannot silently start drawing values.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from rlgear.searcher import Fail, Searcher
from rlgear.tune.search_space import Domain, variants


class RandomSearcher(Searcher):
    """Grids multiplied, distributions drawn at random with ``tune.seed`` (Ray Tune's default)."""

    description: ClassVar[str] = "grid_search values crossed, distributions drawn at random (the default)"
    deterministic: ClassVar[bool] = True

    def __init__(
        self,
        space: Mapping[str, Domain],
        *,
        metric: str,
        mode: str = "max",
        num_samples: int = 1,
        seed: int = 0,
    ):
        super().__init__(space, metric=metric, mode=mode, num_samples=num_samples, seed=seed)
        self._values: Iterator[dict[str, Any]] = variants(self.space, num_samples, seed)
        self._suggested = 0

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        values = next(self._values, None)
        if values is None:
            return self.FINISHED
        self._suggested += 1
        return values

    def total_trials(self) -> int | None:
        grids = [d for d in self.space.values() if d.kind == "grid_search"]
        return self.num_samples * math.prod(len(d.args) for d in grids)

    def get_state(self) -> dict[str, Any]:
        return {"suggested": self._suggested}

    def set_state(self, state: dict[str, Any]) -> None:
        """Replay the seeded sequence up to where it was: the next suggestion is the one it would have made."""
        self._values = variants(self.space, self.num_samples, self.seed)
        self._suggested = 0
        for _ in range(int(state.get("suggested", 0))):
            self.suggest("")


class GridSearcher(RandomSearcher):
    """Every combination of the ``grid_search`` values, ``tune.num_samples`` times; nothing drawn."""

    description: ClassVar[str] = "every combination of grid_search values; refuses distributions"

    @classmethod
    def check_space(cls, space: Mapping[str, Domain], fail: Fail) -> None:
        for path, domain in space.items():
            if domain.kind != "grid_search":
                raise fail(
                    f"{path}.{domain.kind}",
                    "tune.searcher grid enumerates grid_search values only; write "
                    "{grid_search: [...]} here, or use tune.searcher: random (or optuna) to draw it",
                )
