"""Box-World (``rlgear/BoxWorld-v0``, plugins/envs/boxworld.py): levels, mechanics, observations, contract.

A scripted solver plays from the entity observation alone (BFS over the grid plus the key chain:
from the held key's colour, the one lock whose chain of contents ends at the gem), so "solvable"
means solvable from what the agent sees.
"""

from __future__ import annotations

import itertools
from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlgear.plugins.envs.boxworld import (
    AGENT,
    BORDER,
    ENV_ID,
    FLOOR,
    GEM,
    GEM_COLOUR,
    KIND_AGENT,
    KIND_GEM,
    KIND_HELD,
    KIND_KEY,
    KIND_LOCK,
    MOVES,
    PALETTE,
    ROW_HELD,
    BoxWorld,
    LevelDoesNotFit,
    generate_level,
)
from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter
from rlgear.plugins.envs.registration import register_envs

register_envs()  # what the gymnasium.envs entry point does when rlgear's env adapter loads

#: (solution_length, num_distractors, distractor_length): the default, a long path, long branches,
#: no branches, and the paper's hardest training-distribution level plus its longest test path.
LEVELS = [(3, 2, 1), (6, 3, 1), (2, 3, 3), (1, 0, 1), (4, 4, 1), (10, 4, 1)]


# --- reading the entity observation ----------------------------------------------------------
def parse(entities: np.ndarray, size: int) -> dict:
    """The scene as the entity list describes it: cells are (row, column) of the room."""
    scene = {"held": None, "keys": {}, "locks": {}, "gem": None, "agent": None}
    for row in entities[entities[:, 0] == 1.0]:
        cell = (round(row[2] * (size + 1)) - 1, round(row[1] * (size + 1)) - 1)
        rgb = tuple(int(v) for v in np.round(row[8:11] * 255))
        kind = int(np.argmax(row[3:8])) + 3
        if kind == KIND_AGENT:
            scene["agent"] = cell
        elif kind == KIND_HELD:
            scene["held"] = rgb
        elif kind == KIND_KEY:
            scene["keys"][cell] = rgb
        elif kind == KIND_LOCK:
            scene["locks"][cell] = rgb
        else:
            scene["gem"] = cell
    return scene


def locked_cells(scene: dict) -> set:
    """Obstacles: every lock and the content (key or gem) left of it."""
    return set(scene["locks"]) | {(r, c - 1) for r, c in scene["locks"]}


def loose_keys(scene: dict) -> dict:
    return {cell: rgb for cell, rgb in scene["keys"].items() if (cell[0], cell[1] + 1) not in scene["locks"]}


def lock_chain_to_gem(scene: dict, rgb) -> list:
    """The locks to open, in order, from a held key of colour ``rgb`` to the gem; [] if none leads there."""
    for lock, lock_rgb in scene["locks"].items():
        if lock_rgb != rgb:
            continue
        content = (lock[0], lock[1] - 1)
        if content == scene["gem"]:
            return [lock]
        rest = lock_chain_to_gem(scene, scene["keys"][content])
        if rest:
            return [lock, *rest]
    return []


def bfs(start, goal, blocked: set, size: int) -> list[int] | None:
    """Actions from start to goal (goal itself may be a blocked cell: a lock to open)."""
    came = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            actions = []
            while came[cell] is not None:
                cell, action = came[cell]
                actions.append(action)
            return actions[::-1]
        for action, (dr, dc) in enumerate(MOVES):
            nxt = (cell[0] + dr, cell[1] + dc)
            inside = 0 <= nxt[0] < size and 0 <= nxt[1] < size
            if inside and nxt not in came and (nxt == goal or nxt not in blocked):
                came[nxt] = (cell, action)
                queue.append(nxt)
    return None


def flood(start, blocked: set, size: int) -> set:
    """Every cell reachable from ``start`` around ``blocked``."""
    seen, queue = {start}, deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES:
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in seen and nxt not in blocked:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def walk(env: BoxWorld, goal, avoid=()) -> tuple[float, bool, bool, dict]:
    """Walk to ``goal`` by BFS on the current entity list (around ``avoid`` too): rewards summed, terminated,
    truncated, info."""
    scene = parse(env.entities(), env.size)
    actions = bfs(scene["agent"], goal, locked_cells(scene) | set(avoid), env.size)
    assert actions is not None, f"no way from {scene['agent']} to {goal}"
    total, terminated, truncated, info = 0.0, False, False, {}
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
        if terminated or truncated:
            break
    return total, terminated, truncated, info


def solve(env: BoxWorld) -> tuple[float, int, dict]:
    """Play the level to the gem from the entity list: return, steps taken, last info."""
    total, steps, info = 0.0, 0, {}
    for _ in range(2 * env.solution_length + 1):
        scene = parse(env.entities(), env.size)
        if scene["held"] is None:
            (goal,) = loose_keys(scene)
        else:
            goal = lock_chain_to_gem(scene, scene["held"])[0]
        before = env._steps
        reward, terminated, truncated, info = walk(env, goal)
        total, steps = total + reward, steps + env._steps - before
        assert not truncated
        if terminated:
            return total, steps, info
    raise AssertionError("the solver did not reach the gem")


def draw_entities(entities: np.ndarray, size: int) -> np.ndarray:
    """The image the entity list describes (floor, border, one pixel per present row)."""
    image = np.empty((size + 2, size + 2, 3), np.uint8)
    image[:] = BORDER
    image[1:-1, 1:-1] = FLOOR
    for row in entities[entities[:, 0] == 1.0]:
        x, y = (round(float(v) * (size + 1)) for v in row[1:3])
        image[y, x] = np.round(row[8:11] * 255)
    return image


def rgb_of(colour: int) -> tuple[int, int, int]:
    return GEM if colour == GEM_COLOUR else tuple(int(v) for v in PALETTE[colour])


def reset(seed=0, **kwargs) -> BoxWorld:
    env = BoxWorld(**kwargs)
    env.reset(seed=seed)
    return env


# --- gymnasium's and rlgear's contracts -----------------------------------------------------
@pytest.mark.parametrize("mode", ["pixels", "entities"])
def test_gymnasium_env_checker_passes(mode):
    check_env(
        gym.make(ENV_ID, observation_mode=mode, render_mode="rgb_array").unwrapped, skip_render_check=False
    )
    env = gym.make(ENV_ID, observation_mode=mode, size=8, solution_length=2, num_distractors=1)
    obs, _ = env.reset(seed=3)
    assert obs in env.observation_space
    side = 10
    expected = (side, side, 3) if mode == "pixels" else (3 + 2 * 3, 11)
    assert obs.shape == expected == env.observation_space.shape


@pytest.mark.parametrize("mode", ["pixels", "entities"])
def test_gymnasium_adapter_passes_the_vector_env_contract_check(mode):
    from rlgear.testing import check_vector_env

    kwargs = {"observation_mode": mode, "max_steps": 25, "solution_length": 1, "num_distractors": 1}
    env = GymnasiumAdapter().make(ENV_ID, 3, kwargs=kwargs, vectorization="sync")
    counts = check_vector_env(env, steps=300)
    assert counts["episodes_truncated"] > 0


def test_bad_kwargs_are_refused_with_the_key_named():
    with pytest.raises(ValueError, match="solution_length"):
        BoxWorld(solution_length=0)
    with pytest.raises(ValueError, match="observation_mode"):
        BoxWorld(observation_mode="rgb")
    with pytest.raises(LevelDoesNotFit, match="make size larger"):
        BoxWorld(size=6, solution_length=4)
    with pytest.raises(ValueError, match="palette"):
        BoxWorld(size=40, solution_length=10, num_distractors=9, distractor_length=3)


# --- level generation --------------------------------------------------------------------------
@pytest.mark.parametrize(("length", "branches", "branch_length"), LEVELS)
def test_levels_follow_the_documented_structure(length, branches, branch_length):
    n = 12
    for seed in range(60):
        level = generate_level(np.random.default_rng(seed), n, length, branches, branch_length)
        path = level.path
        assert len(level.boxes) == length + branches * branch_length
        # the solution path: loose key -> box 0 -> ... -> the gem, exactly `length` boxes
        assert [b.depth for b in path] == list(range(length))
        assert path[0].lock_colour == level.loose_key_colour
        for a, b in itertools.pairwise(path):
            assert a.content_colour == b.lock_colour
        assert path[-1].content_colour == GEM_COLOUR
        assert sum(b.content_colour == GEM_COLOUR for b in level.boxes) == 1
        # distractor branches hang off a key of the path and use fresh colours after it
        path_keys = [b.lock_colour for b in path]
        for branch in range(branches):
            boxes = [b for b in level.boxes if b.branch == branch]
            assert [b.depth for b in boxes] == list(range(branch_length))
            assert boxes[0].lock_colour in path_keys
            for a, b in itertools.pairwise(boxes):
                assert a.content_colour == b.lock_colour
            assert not {b.content_colour for b in boxes} & set(path_keys)
        keys = [level.loose_key_colour] + [
            b.content_colour for b in level.boxes if b.content_colour != GEM_COLOUR
        ]
        assert len(set(keys)) == len(keys)  # every key colour is drawn once
        # no overlaps; a free ring inside the room around every box; a loose key touches nothing
        coloured = [level.loose_key] + [cell for b in level.boxes for cell in (b.content, b.lock)]
        assert len({*coloured, level.agent}) == len(coloured) + 1
        for b in level.boxes:
            r, c = b.content
            assert b.lock == (r, c + 1) and 1 <= r <= n - 2 and c >= 1 and c + 1 <= n - 2
            window = {(i, j) for i in range(r - 1, r + 2) for j in range(c - 1, c + 3)}
            assert set(coloured) & window == {b.content, b.lock}
        kr, kc = level.loose_key
        assert not {(kr + i, kc + j) for i in (-1, 0, 1) for j in (-1, 0, 1)} & set(coloured[1:])
        # every relevant cell is reachable with every box still locked: the key, a side of every lock
        blocked = set(coloured[1:])
        free = [(r, c) for r in range(n) for c in range(n) if (r, c) not in blocked]
        reach = flood(level.agent, blocked, n)
        assert reach == set(free)  # the floor is one connected region
        assert level.loose_key in reach
        for b in level.boxes:
            r, c = b.lock
            assert {(r - 1, c), (r + 1, c), (r, c + 1)} <= reach


@pytest.mark.parametrize(("length", "branches", "branch_length"), LEVELS)
@pytest.mark.parametrize("mode", ["pixels", "entities"])
def test_the_scripted_solver_reaches_the_gem_with_the_documented_return(
    mode, length, branches, branch_length
):
    env = BoxWorld(
        solution_length=length, num_distractors=branches, distractor_length=branch_length,
        observation_mode=mode, max_steps=1000,
    )  # fmt: skip
    for seed in range(25):
        env.reset(seed=seed)
        # one lock chain from the loose key to the gem, as long as the solution path
        scene = parse(env.entities(), env.size)
        assert len(lock_chain_to_gem(scene, next(iter(loose_keys(scene).values())))) == length
        total, steps, info = solve(env)
        assert total == length + 10 and info == {"is_success": True, "boxes_opened": length}
        assert steps <= 120 or length > 4


def test_reset_with_a_seed_reproduces_the_level_and_different_seeds_differ():
    a, b = BoxWorld(observation_mode="entities"), BoxWorld(observation_mode="entities")
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=7)
    assert a.level == b.level and np.array_equal(obs_a, obs_b) and np.array_equal(a.pixels(), b.pixels())
    actions = np.random.default_rng(0).integers(0, 4, 60)
    for action in actions:
        step_a, step_b = a.step(action), b.step(action)
        assert np.array_equal(step_a[0], step_b[0]) and step_a[1:] == step_b[1:]
        if step_a[2] or step_a[3]:
            break
    levels = {BoxWorld().reset(seed=s)[0].tobytes() for s in range(20)}
    assert len(levels) == 20
    a.reset(seed=7)
    assert a.level == b.level  # seeding again gives the same level again


# --- mechanics ---------------------------------------------------------------------------------
def _first(env: BoxWorld) -> tuple:
    """Path box 0 (the loose key opens it) and path box 1."""
    return env.level.path[0], env.level.path[1]


def _neighbour(env: BoxWorld, cell) -> tuple:
    """A free cell next to a lock (above, below or right of it) and the move from there into it."""
    r, c = cell
    blocked = locked_cells(parse(env.entities(), env.size)) | {env.level.loose_key}
    for nxt, action in (((r - 1, c), 1), ((r + 1, c), 0), ((r, c + 1), 2)):
        if nxt not in blocked and bfs(parse(env.entities(), env.size)["agent"], nxt, blocked, env.size):
            return nxt, action
    raise AssertionError("no free side")


def test_a_lock_blocks_without_its_key_and_a_locked_box_content_blocks_too():
    env = reset(seed=1, observation_mode="entities")
    box0, box1 = _first(env)
    side, into = _neighbour(env, box0.lock)
    walk(env, side, avoid=[env.level.loose_key])
    before = env.entities()
    obs, reward, terminated, truncated, _ = env.step(into)  # no key yet
    assert np.array_equal(obs, before) and (reward, terminated, truncated) == (0.0, False, False)
    # the content cell, from any free side of it, does not let the agent in either
    r, c = box0.content
    for nxt, action in (((r - 1, c), 1), ((r + 1, c), 0), ((r, c - 1), 3)):
        walk(env, nxt, avoid=[env.level.loose_key])
        obs, *_ = env.step(action)
        assert parse(obs, env.size)["agent"] == nxt
    # with the loose key (the wrong colour for box 1), box 1's lock still blocks
    walk(env, env.level.loose_key)
    side, into = _neighbour(env, box1.lock)
    walk(env, side)
    obs, reward, *_ = env.step(into)
    assert parse(obs, env.size)["agent"] == side and reward == 0.0


def test_picking_up_a_key_shows_it_in_the_top_left_pixel_and_opening_uses_it_up():
    env = reset(seed=2)
    box0, _ = _first(env)
    key_rgb = rgb_of(env.level.loose_key_colour)
    assert tuple(env.pixels()[0, 0]) == BORDER and env.entities()[ROW_HELD, 0] == 0.0
    reward, *_ = walk(env, env.level.loose_key)
    image, entities = env.pixels(), env.entities()
    assert reward == 0.0 and tuple(image[0, 0]) == key_rgb
    r, c = env.level.loose_key
    assert tuple(image[r + 1, c + 1]) == AGENT  # the key left its cell
    held = entities[ROW_HELD]
    assert held[0] == 1.0 and held[KIND_HELD] == 1.0 and tuple(held[1:3]) == (0.0, 0.0)
    assert tuple(np.round(held[8:11] * 255).astype(int)) == key_rgb
    # open box 0: +1, the agent on the lock's cell, the key used up, the content now loose
    reward, terminated, _, info = walk(env, box0.lock)
    image = env.pixels()
    assert (reward, terminated, info["boxes_opened"]) == (1.0, False, 1)
    assert env._agent == box0.lock and tuple(image[0, 0]) == BORDER
    content_rgb = rgb_of(box0.content_colour)
    assert tuple(image[box0.content[0] + 1, box0.content[1] + 1]) == content_rgb
    assert loose_keys(parse(env.entities(), env.size)) == {box0.content: content_rgb}
    obs, reward, *_ = env.step(2)  # left, onto the box's key: taken
    assert reward == 0.0 and tuple(obs[0, 0]) == content_rgb and env._agent == box0.content


def test_the_gem_pays_eleven_and_terminates_with_success():
    env = reset(seed=3, solution_length=1, num_distractors=0)
    (box,) = env.level.boxes
    walk(env, env.level.loose_key)
    reward, terminated, truncated, info = walk(env, box.lock)
    assert (reward, terminated, truncated) == (11.0, True, False) and info["is_success"]
    assert tuple(env.pixels()[0, 0]) == GEM  # the gem, collected, in the held pixel
    assert parse(env.entities(), env.size)["gem"] is None
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_opening_a_distractor_box_costs_one_and_ends_the_episode():
    for seed in range(50):  # a level with a branch hanging off the loose key's colour
        env = reset(seed=seed, num_distractors=3)
        branch = [b for b in env.level.boxes if b.branch >= 0 and b.lock_colour == env.level.loose_key_colour]
        if branch:
            break
    walk(env, env.level.loose_key)
    reward, terminated, truncated, info = walk(env, branch[0].lock)
    assert (reward, terminated, truncated) == (-1.0, True, False) and not info["is_success"]
    assert tuple(env.pixels()[0, 0]) == BORDER  # the path's key is gone: the gem is out of reach


def test_the_episode_is_truncated_at_max_steps():
    env = reset(seed=4, max_steps=7)
    for t in range(1, 8):
        _, _, terminated, truncated, _ = env.step(0 if t % 2 else 1)  # up, down: no box opened
        assert not terminated and truncated == (t == 7)


def test_the_entity_list_and_the_pixels_agree_at_every_step():
    env = BoxWorld(observation_mode="entities", num_distractors=3)
    pix = BoxWorld(observation_mode="pixels", num_distractors=3)
    rng = np.random.default_rng(0)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        image, _ = pix.reset(seed=seed)
        for t in range(200):
            assert np.array_equal(draw_entities(obs, env.size), image), (seed, t)
            assert np.array_equal(obs, env.entities()) and np.array_equal(image, env.pixels())
            action = rng.integers(4)
            obs, _, terminated, truncated, _ = env.step(action)
            image, *_ = pix.step(action)
            if terminated or truncated:
                break
        # and along a solved episode (keys picked, boxes opened, the gem taken)
        env.reset(seed=seed)
        solve(env)
        assert np.array_equal(draw_entities(env.entities(), env.size), env.pixels())
    rows = env.entities()
    assert set(np.unique(rows[:, 3:8].sum(axis=1))) <= {0.0, 1.0}  # one kind per present row


def test_box_rows_are_shuffled_per_level():
    env = BoxWorld(observation_mode="entities", solution_length=4)
    rows = set()
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        gem_row = int(np.flatnonzero(obs[:, KIND_GEM])[0])
        rows.add(gem_row)
    assert len(rows) > 2  # the gem's box is not always in the same rows


def test_render_is_the_image_scaled_up():
    env = BoxWorld(render_mode="rgb_array")
    image, _ = env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (14 * 16, 14 * 16, 3) and np.array_equal(frame[::16, ::16], image)


def test_a_random_policy_rarely_solves_the_default_level():
    """The figures of docs/boxworld.md come from bench/boxworld.py (1000 episodes); this is a cheaper check."""
    rng = np.random.default_rng(0)
    for kwargs, low, high in (({}, 0.0, 0.02), ({"solution_length": 1, "num_distractors": 0}, 0.01, 0.15)):
        env = BoxWorld(**kwargs)
        wins = 0
        for episode in range(200):
            env.reset(seed=episode)
            while True:
                _, _, terminated, truncated, info = env.step(rng.integers(4))
                if terminated or truncated:
                    wins += info["is_success"]
                    break
        assert low <= wins / 200 <= high, (kwargs, wins)


def test_the_palette_is_distinct_and_apart_from_floor_agent_border_and_gem():
    colours = {tuple(int(v) for v in c) for c in PALETTE}
    assert len(colours) == len(PALETTE) == 36
    assert not colours & {FLOOR, AGENT, BORDER, GEM}
    assert all(max(c) - min(c) >= 60 for c in colours)  # saturated: no grey a CNN could confuse
