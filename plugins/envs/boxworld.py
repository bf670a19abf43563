"""Box-World (``rlgear/BoxWorld-v0``): the keys-and-boxes env of Zambaldi et al. 2018, "Relational deep RL".

A ``size x size`` room inside a one-pixel black border. The agent is one dark-grey pixel that moves
up/down/left/right (actions 0, 1, 2, 3); a move into the border or into a locked box does nothing.

* A **loose key** is one coloured pixel with no other object among its 8 neighbours; the agent picks
  it up by stepping on it. It holds at most one key, shown in the top-left border pixel (as in the
  paper). The levels below never offer a loose key to an agent that already holds one.
* A **box** is two horizontally adjacent pixels: the **right** one is the *lock*, in the colour of the
  key that opens it; the **left** one is the box's *content* (a key in the colour of the next lock,
  or the white **gem**). While the box is locked both pixels are obstacles. Stepping onto the lock
  while holding the key of its colour opens it: the agent moves onto the lock's cell, the key is
  used up, the lock disappears and the content becomes a loose key (step on it to take it).
* **The solution path** is a chain of ``solution_length`` boxes: the one loose key of the level
  opens box 1, whose key opens box 2, ..., whose last box holds the gem. Opening the gem's box
  collects the gem (it appears in the held-key pixel) and ends the episode (``terminated``). This
  merges the paper's two steps "open the box, then walk onto the gem" into one.
* **Distractor branches:** ``num_distractors`` chains of ``distractor_length`` boxes each. Branch
  ``b`` starts with a lock in the colour of one of the ``solution_length`` keys that open path boxes
  (the loose key or the key inside one of the first ``solution_length - 1`` path boxes), drawn
  uniformly and independently per branch, so two branches may hang off the same key; its boxes hold keys of fresh colours, each opening the next box of the
  branch, and the last one holds a key that opens nothing. Opening a branch box uses up the path key
  the agent needed, so the gem can no longer be reached: as in the paper, the episode ends there
  (``terminated``).
* **Rewards** (the paper's: "+10 for collecting the gem, +1 for opening a box in the solution path
  and -1 for opening a distractor box"): +1 for each path box opened, +1 + 10 = 11 for the gem's box
  (it is a path box and the gem is collected on the same step), -1 for a distractor box; 0 otherwise
  (picking up keys and walking pay nothing). A solved level returns ``solution_length + 10``, the
  paper's figure.
* **Time limit:** ``max_steps`` (default 120) steps, then ``truncated``. The paper's text does not
  give one I could cite; 120 leaves the shortest solution of the default level (32 steps on
  average, 58 at most over 1000 seeds: bench/boxworld.py) room to spare, and keeps random episodes
  short.

**Level generation** (all from the env's RNG: ``reset(seed=s)`` reproduces the level). The colours
are ``solution_length + num_distractors * distractor_length`` distinct entries of :data:`PALETTE`
(36 saturated colours, none grey or white). Boxes are placed one at a time at a position drawn
uniformly among those whose whole 3 x 4 surrounding window lies inside the room and holds no other
object, so the agent can walk all the way around every box and the free cells stay connected (any
path through a box can detour along its free ring). Then the loose key goes on a free cell with no
object among its 8 neighbours, and the agent on any other free cell. A draw that runs out of room
is redrawn (up to 1000 times); a level that cannot fit is refused when the env is built: make
``size`` larger. A 12 x 12 room holds at most 15 such boxes; one random draw of 14 fails about
half the time (redrawn), so the paper's hardest level (solution length 10, 4 branches of 1) fits.

**Observations** (``observation_mode``):

* ``"pixels"``: ``uint8 [size + 2, size + 2, 3]`` RGB, border included: border black, floor light
  grey ``(200, 200, 200)``, agent ``(64, 64, 64)``, gem white, keys and locks their colours; the
  top-left border pixel is the held key's colour (black when empty). Image row ``y + 1``, column
  ``x + 1`` is room cell ``(y, x)``.
* ``"entities"``: ``float32 [max_entities, 11]``, one row per coloured pixel (an unordered set for a
  relational module), ``max_entities = 3 + 2 * (number of boxes)``. Columns:

  | column | meaning |
  | --- | --- |
  | 0 | present (1), or 0 on a padding / gone row (the whole row is then 0) |
  | 1, 2 | ``x``, ``y``: the pixel's image column and row divided by ``size + 1`` (border pixels are 0 or 1) |
  | 3 - 7 | kind, one-hot: agent, key (loose or inside a box), lock, gem, held key |
  | 8 - 10 | RGB / 255 |

  Row 0 is the agent, row 1 the held key (at x = y = 0, the top-left pixel; the gem once
  collected), row 2 the level's loose key, then two rows per box (content, lock) in an order shuffled
  per level, so a row's index says nothing about which boxes are on the path. A row whose pixel
  disappears (a key picked up, a lock opened) becomes all zeros; a box's content row turns from
  inside-box key to loose key only by its lock row vanishing. The rows drawn from one state are
  exactly the non-floor pixels of that state's image (tests/test_boxworld.py checks it).

``level`` (a :class:`Level`) holds the generated layout for tests and scripted solvers.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "rlgear/BoxWorld-v0"

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
#: (row, column) change of each action
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))

BORDER = (0, 0, 0)
FLOOR = (200, 200, 200)
AGENT = (64, 64, 64)
GEM = (255, 255, 255)


def _palette() -> np.ndarray:
    """12 hues x 3 (saturation, value) shades: 36 colours far from the greys and white above."""
    colours = []
    for s, v in ((1.0, 1.0), (1.0, 0.55), (0.5, 1.0)):
        for hue in range(12):
            colours.append([round(255 * c) for c in colorsys.hsv_to_rgb(hue / 12, s, v)])
    return np.asarray(colours, np.uint8)


#: The key and lock colours a level draws from (``[36, 3]`` uint8).
PALETTE = _palette()
_PALETTE_RGB = [tuple(int(v) for v in colour) for colour in PALETTE]
#: Index of the gem in a box's ``content`` colour (it is not a palette entry).
GEM_COLOUR = -1

#: Entity columns (see the module docstring).
N_FEATURES = 11
KIND_AGENT, KIND_KEY, KIND_LOCK, KIND_GEM, KIND_HELD = 3, 4, 5, 6, 7
#: Entity rows of the agent, the held key and the level's loose key; boxes follow from row 3.
ROW_AGENT, ROW_HELD, ROW_LOOSE_KEY = 0, 1, 2

# cell codes of the room grid
_EMPTY, _KEY, _LOCK, _CONTENT = 0, 1, 2, 3


@dataclass(frozen=True)
class BoxSpec:
    """One box: cells are ``(row, column)`` of the room (without the border)."""

    lock: tuple[int, int]
    content: tuple[int, int]
    #: palette index of the lock (the key that opens it)
    lock_colour: int
    #: palette index of the key inside, or GEM_COLOUR
    content_colour: int
    #: -1 for a solution-path box, else the distractor branch's index
    branch: int
    #: position in its chain: 0 .. solution_length - 1 on the path, 0 .. distractor_length - 1 in a branch
    depth: int


@dataclass(frozen=True)
class Level:
    """A generated layout: the solution path's boxes first (in order), then each branch's."""

    size: int
    agent: tuple[int, int]
    loose_key: tuple[int, int]
    loose_key_colour: int
    boxes: tuple[BoxSpec, ...]

    @property
    def path(self) -> tuple[BoxSpec, ...]:
        return tuple(b for b in self.boxes if b.branch < 0)


class LevelDoesNotFit(ValueError):
    """The boxes of a level do not fit the room (make ``size`` larger)."""


def generate_level(
    rng: np.random.Generator, size: int, solution_length: int, num_distractors: int, distractor_length: int,
    attempts: int = 1000,
) -> Level:  # fmt: skip
    """Draw a level (see the module docstring); raise LevelDoesNotFit after ``attempts`` failed draws."""
    n_branch_boxes = num_distractors * distractor_length
    colours = rng.choice(len(PALETTE), solution_length + n_branch_boxes, replace=False).tolist()
    path_colours, fresh = colours[:solution_length], colours[solution_length:]
    chains: list[tuple[int, int, int, int]] = []  # (lock colour, content colour, branch, depth)
    for i in range(solution_length):
        content = path_colours[i + 1] if i + 1 < solution_length else GEM_COLOUR
        chains.append((path_colours[i], content, -1, i))
    for b in range(num_distractors):
        lock = path_colours[int(rng.integers(solution_length))]
        for d in range(distractor_length):
            content = fresh.pop()
            chains.append((lock, content, b, d))
            lock = content
    for _ in range(attempts):
        cells = _place(rng, size, len(chains))
        if cells is not None:
            anchors, key, agent = cells
            boxes = tuple(
                BoxSpec((r, c + 1), (r, c), lock, content, branch, depth)
                for (r, c), (lock, content, branch, depth) in zip(anchors, chains, strict=True)
            )
            return Level(size, agent, key, path_colours[0], boxes)
    raise LevelDoesNotFit(
        f"BoxWorld: {len(chains)} boxes (solution_length {solution_length} + num_distractors "
        f"{num_distractors} x distractor_length {distractor_length}) do not fit a {size}x{size} room "
        f"with a free ring around every box ({attempts} draws failed); make size larger"
    )


def _place(rng: np.random.Generator, size: int, n_boxes: int):
    """Box anchors (content cells), the loose key and the agent, or None if the room ran out."""
    near = np.zeros((size, size), bool)  # cells within one step (8-neighbourhood) of an object
    anchors = []
    for _ in range(n_boxes):
        # a box at (r, c), (r, c + 1) with 1 <= r <= size - 2, 1 <= c, c + 1 <= size - 2
        free = ~near[1 : size - 1, 1 : size - 2] & ~near[1 : size - 1, 2 : size - 1]
        options = np.flatnonzero(free)
        if options.size == 0:
            return None
        r, c = divmod(int(options[rng.integers(options.size)]), size - 3)
        r, c = r + 1, c + 1
        anchors.append((r, c))
        near[r - 1 : r + 2, c - 1 : c + 3] = True
    options = np.flatnonzero(~near)
    if options.size < 2:
        return None
    key = divmod(int(options[rng.integers(options.size)]), size)
    occupied = np.zeros((size, size), bool)
    for r, c in anchors:
        occupied[r, c : c + 2] = True
    occupied[key] = True
    options = np.flatnonzero(~occupied)
    agent = divmod(int(options[rng.integers(options.size)]), size)
    return anchors, key, agent


class BoxWorld(gym.Env):
    """Box-World; see the module docstring for the rules, the levels and the observation layouts.

    Args:
        size: the room's side (the image is ``size + 2`` with the border); the paper's is 12.
        solution_length: boxes on the path from the loose key to the gem (>= 1).
        num_distractors: distractor branches (>= 0).
        distractor_length: boxes per distractor branch (>= 1 when there are branches).
        max_steps: steps before the episode is truncated.
        observation_mode: ``"pixels"`` or ``"entities"``.
        render_mode: None or ``"rgb_array"`` (the pixel image, each pixel ``render_scale`` wide).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 8}
    render_scale = 16

    def __init__(
        self, size: int = 12, solution_length: int = 3, num_distractors: int = 2, distractor_length: int = 1,
        max_steps: int = 120, observation_mode: str = "pixels", render_mode: str | None = None,
    ):  # fmt: skip
        for name, value, low in (
            ("size", size, 4), ("solution_length", solution_length, 1), ("num_distractors", num_distractors, 0),
            ("distractor_length", distractor_length, 1), ("max_steps", max_steps, 1),
        ):  # fmt: skip
            if isinstance(value, bool) or int(value) != value or value < low:
                raise ValueError(f"BoxWorld {name} must be an integer >= {low}, got {value!r}")
        if observation_mode not in ("pixels", "entities"):
            raise ValueError(
                f"BoxWorld observation_mode must be 'pixels' or 'entities', got {observation_mode!r}"
            )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"BoxWorld render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.size = int(size)
        self.solution_length = int(solution_length)
        self.num_distractors = int(num_distractors)
        self.distractor_length = int(distractor_length)
        self.max_steps = int(max_steps)
        self.observation_mode = observation_mode
        self.render_mode = render_mode
        self.num_boxes = self.solution_length + self.num_distractors * self.distractor_length
        if self.num_boxes > len(PALETTE):
            raise ValueError(
                f"BoxWorld needs {self.num_boxes} key colours (solution_length + num_distractors x "
                f"distractor_length) and its palette has {len(PALETTE)}"
            )
        self.max_entities = 3 + 2 * self.num_boxes
        side = self.size + 2
        if observation_mode == "pixels":
            self.observation_space = gym.spaces.Box(0, 255, (side, side, 3), np.uint8)
        else:
            self.observation_space = gym.spaces.Box(0.0, 1.0, (self.max_entities, N_FEATURES), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        # refuse a level that cannot fit now, not at the first reset
        generate_level(np.random.default_rng(0), *self._level_args())
        self.level: Level | None = None

    def _level_args(self) -> tuple[int, int, int, int]:
        return self.size, self.solution_length, self.num_distractors, self.distractor_length

    # --- state --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        self.level = level = generate_level(rng, *self._level_args())
        n = self.size
        self._cell = [[_EMPTY] * n for _ in range(n)]  # Python lists: a step reads a few cells
        self._colour = [[0] * n for _ in range(n)]
        self._box_at: dict[tuple[int, int], int] = {}  # lock or content cell -> box index
        self._agent = level.agent
        self._held = None  # palette index, GEM_COLOUR once the gem is collected, or None
        self._steps = 0
        self._opened = 0
        self._done = False
        self._pixels = np.empty((n + 2, n + 2, 3), np.uint8)
        self._pixels[:] = BORDER
        self._pixels[1:-1, 1:-1] = FLOOR
        self._entities = np.zeros((self.max_entities, N_FEATURES), np.float32)
        slots = rng.permutation(len(level.boxes))
        self._rows = [(3 + 2 * int(s), 4 + 2 * int(s)) for s in slots]  # (content row, lock row) per box
        self._put(level.loose_key, _KEY, level.loose_key_colour, ROW_LOOSE_KEY, KIND_KEY)
        for j, box in enumerate(level.boxes):
            content_row, lock_row = self._rows[j]
            gem = box.content_colour == GEM_COLOUR
            self._put(box.content, _CONTENT, box.content_colour, content_row, KIND_GEM if gem else KIND_KEY)
            self._put(box.lock, _LOCK, box.lock_colour, lock_row, KIND_LOCK)
            self._box_at[box.content] = self._box_at[box.lock] = j
        self._key_row = {level.loose_key: ROW_LOOSE_KEY}  # loose key cell -> its entity row
        self._move_agent(level.agent)
        return self._obs(), {"is_success": False, "boxes_opened": 0}

    @staticmethod
    def _rgb(colour: int) -> tuple[int, int, int]:
        return GEM if colour == GEM_COLOUR else _PALETTE_RGB[colour]

    def _set_row(self, row: int, cell: tuple[int, int], kind: int, rgb: tuple[int, int, int]) -> None:
        scale = self.size + 1
        values = [1.0, (cell[1] + 1) / scale, (cell[0] + 1) / scale, 0.0, 0.0, 0.0, 0.0, 0.0]
        values[kind] = 1.0
        values += [v / 255.0 for v in rgb]
        self._entities[row] = values  # one assignment: a reset writes a dozen rows

    def _put(self, cell, code, colour, row, kind) -> None:
        r, c = cell
        self._cell[r][c] = code
        self._colour[r][c] = colour
        rgb = self._rgb(colour)
        self._pixels[r + 1, c + 1] = rgb
        self._set_row(row, cell, kind, rgb)

    def _clear(self, cell, row: int) -> None:
        r, c = cell
        self._cell[r][c] = _EMPTY
        self._pixels[r + 1, c + 1] = FLOOR
        self._entities[row] = 0.0

    def _move_agent(self, cell) -> None:
        r, c = self._agent
        self._pixels[r + 1, c + 1] = FLOOR if self._cell[r][c] == _EMPTY else self._rgb(self._colour[r][c])
        self._agent = cell
        self._pixels[cell[0] + 1, cell[1] + 1] = AGENT
        self._set_row(ROW_AGENT, cell, KIND_AGENT, AGENT)

    def _hold(self, colour: int | None) -> None:
        self._held = colour
        if colour is None:
            self._pixels[0, 0] = BORDER
            self._entities[ROW_HELD] = 0.0
        else:
            rgb = self._rgb(colour)
            self._pixels[0, 0] = rgb
            self._set_row(ROW_HELD, (-1, -1), KIND_HELD, rgb)

    def step(self, action: Any):
        if self.level is None or self._done:
            raise RuntimeError("BoxWorld.step called before reset() or after the episode ended; call reset()")
        dr, dc = MOVES[int(action)]
        r, c = self._agent[0] + dr, self._agent[1] + dc
        reward = 0.0
        terminated = success = False
        n = self.size
        if 0 <= r < n and 0 <= c < n:
            code = self._cell[r][c]
            if code == _EMPTY:
                self._move_agent((r, c))
            elif code == _KEY:
                if self._held is None:  # never otherwise in these levels (see the module docstring)
                    self._hold(self._colour[r][c])
                    self._clear((r, c), self._key_row.pop((r, c)))
                self._move_agent((r, c))
            elif code == _LOCK and self._held == self._colour[r][c]:
                j = self._box_at[(r, c)]
                box = self.level.boxes[j]
                content_row, lock_row = self._rows[j]
                self._clear((r, c), lock_row)
                self._hold(None)
                self._move_agent((r, c))
                self._opened += 1
                if box.branch >= 0:
                    reward, terminated = -1.0, True
                    self._loosen(box, content_row)
                elif box.content_colour == GEM_COLOUR:
                    reward, terminated, success = 11.0, True, True
                    self._clear(box.content, content_row)
                    self._hold(GEM_COLOUR)
                else:
                    reward = 1.0
                    self._loosen(box, content_row)
            # a locked box's content, or a lock without its key: the move does nothing
        self._steps += 1
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        info = {"is_success": success, "boxes_opened": self._opened}
        return self._obs(), reward, terminated, truncated, info

    def _loosen(self, box: BoxSpec, content_row: int) -> None:
        """An opened box's key becomes loose: same pixel and row, now walkable and collectable."""
        r, c = box.content
        self._cell[r][c] = _KEY
        self._key_row[box.content] = content_row

    # --- observations ---------------------------------------------------------------------------
    def pixels(self) -> np.ndarray:
        """The current ``[size + 2, size + 2, 3]`` uint8 image (a copy), whatever the observation mode."""
        return self._pixels.copy()

    def entities(self) -> np.ndarray:
        """The current ``[max_entities, 11]`` float32 entity list (a copy), whatever the observation mode."""
        return self._entities.copy()

    def _obs(self) -> np.ndarray:
        return self._pixels.copy() if self.observation_mode == "pixels" else self._entities.copy()

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array" or self.level is None:
            return None
        s = self.render_scale
        return np.repeat(np.repeat(self._pixels, s, axis=0), s, axis=1)


def register_envs() -> None:
    """Register ``rlgear/BoxWorld-v0`` (the ``gymnasium.envs`` entry point ``rlgear``)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=BoxWorld)
