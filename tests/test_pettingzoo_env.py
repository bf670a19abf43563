"""The pettingzoo env adapter: the MultiAgentTimeStep contract on PettingZoo's envs, turn by turn.

Parallel API (``mpe2``'s simple_spread, a relay env with late and early agents in
tests/pettingzoo_envs.py) and AEC (``connect_four``: only the agent to move acts). Needs the
``pettingzoo`` extra; the mpe2 tests also need mpe2.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="needs PettingZoo: pip install 'rlgear[pettingzoo]'")

from pettingzoo.test import api_test, parallel_api_test

from rlgear.errors import ConfigError, NonFiniteError
from rlgear.plugins.envs.pettingzoo_aec import AECVectorEnv
from rlgear.plugins.envs.pettingzoo_env import PettingZooAdapter, resolve_factory
from rlgear.plugins.envs.pettingzoo_parallel import ParallelVectorEnv
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.spaces import Box, Dict, Discrete, MultiBinary
from rlgear.testing import check_multi_agent_env
from rlgear.timestep import StepType

from .pettingzoo_envs import RelayParallelEnv, TurnsAECEnv

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3"
SPREAD = "mpe2:simple_spread_v3"
RELAY = "tests.pettingzoo_envs:RelayParallelEnv"
TURNS = "tests.pettingzoo_envs:TurnsAECEnv"


def make(name: str, num_envs: int = 2, horizon: int | None = None, **kwargs):
    return PettingZooAdapter().make(name, num_envs, kwargs=kwargs, horizon=horizon)


def needs_mpe2() -> None:
    pytest.importorskip("mpe2", reason="needs mpe2: pip install 'rlgear[pettingzoo]'")


def row(ts, agent: str, slot: int = 0) -> tuple:
    """(active, step_type, reward, discount, prev_action) of one agent in one slot."""
    step = ts.steps[agent]
    return (
        bool(ts.active[agent][slot]),
        int(step.step_type[slot]),
        float(step.reward[slot]),
        float(step.discount[slot]),
        int(step.prev_action[slot]),
    )


# --- the contract, by rlgear's checker and by PettingZoo's own API tests ---------------------------


@pytest.mark.parametrize(
    ("name", "kwargs", "horizon"),
    [
        (CONNECT_FOUR, {}, None),
        (CONNECT_FOUR, {}, 5),
        (RELAY, {}, None),
        (RELAY, {"rest_at": 3, "mask_in_info": True}, None),
        (RELAY, {"episode_length": 9}, 4),
        (TURNS, {}, None),
        (TURNS, {"length": 9}, 4),
        ("pettingzoo.classic.tictactoe_v3", {}, None),
    ],
)
def test_check_multi_agent_env_passes(name, kwargs, horizon):
    counts = check_multi_agent_env(make(name, 3, horizon, **kwargs), steps=150, seed=1)
    assert counts["episodes"] > 0 and counts["agent_steps"] > counts["episodes"]


def test_check_multi_agent_env_passes_on_simple_spread():
    needs_mpe2()
    counts = check_multi_agent_env(make(SPREAD, 3, continuous_actions=False), steps=60, seed=0)
    # max_cycles=25: every agent of every slot is truncated at step 25 and 51
    assert counts["episodes"] == 6 and counts["agents_truncated"] == 18 and counts["agents_terminated"] == 0
    assert counts["agent_steps"] == 3 * counts["env_steps"]


def test_pettingzoo_own_api_tests_pass_on_the_envs_used():
    """PettingZoo's api_test / parallel_api_test hold on the envs the adapter is tested with."""
    import pettingzoo.classic.connect_four_v3 as connect_four

    api_test(connect_four.env(), num_cycles=100)
    api_test(TurnsAECEnv(), num_cycles=100)
    parallel_api_test(RelayParallelEnv(), num_cycles=100)
    parallel_api_test(RelayParallelEnv(mask_in_info=True, join_at=1, quit_at=4), num_cycles=100)
    needs_mpe2()
    from mpe2 import simple_spread_v3

    parallel_api_test(simple_spread_v3.parallel_env(continuous_actions=False), num_cycles=100)


# --- AEC: connect_four, one move per step ---------------------------------------------------------


def test_connect_four_is_turn_based_with_masked_dict_observations():
    env = make(CONNECT_FOUR)
    assert isinstance(env, AECVectorEnv)
    assert env.possible_agents == ("player_0", "player_1")
    space = env.observation_spaces["player_0"]
    assert isinstance(space, Dict) and set(space.keys()) == {"observation", "action_mask"}
    assert env.action_spaces["player_1"] == Discrete(7)
    # rlgear's preprocessing reads the mask from the observation as it is
    preprocessor = ObservationPreprocessor(space, env.action_spaces["player_0"], CONNECT_FOUR)
    assert preprocessor.mask_width == 7
    ts = env.reset(seed=0)
    assert preprocessor.action_mask(ts.steps["player_0"].observation)[ts.active["player_0"]].all()


def test_connect_four_scripted_games_give_exact_rewards_step_types_and_masks():
    """Slot 0: player_0 plays column 0 four times (player_1 column 1) and wins at move 7.
    Slot 1: player_0 plays 0, 0, 0, 6 and player_1 column 1 four times: player_1 wins at move 8."""
    env = make(CONNECT_FOUR, 2)
    moves = {
        0: {"player_0": [0, 0, 0, 0], "player_1": [1, 1, 1]},
        1: {"player_0": [0, 0, 0, 6], "player_1": [1] * 4},
    }
    p0, p1 = "player_0", "player_1"
    off = (False, LAST, 0.0, 0.0, 0)
    # (player_0's row, player_1's row) per step, slot 0 then slot 1; rows: (active, type, reward, discount, prev)
    expected = {
        0: [
            ((True, FIRST, 0.0, 1.0, 0), off),
            (off, (True, FIRST, 0.0, 1.0, 0)),
            ((True, MID, 0.0, 1.0, 0), off),
            (off, (True, MID, 0.0, 1.0, 1)),
            ((True, MID, 0.0, 1.0, 0), off),
            (off, (True, MID, 0.0, 1.0, 1)),
            ((True, MID, 0.0, 1.0, 0), off),
            ((True, LAST, 1.0, 0.0, 0), (True, LAST, -1.0, 0.0, 1)),  # the win: both LAST, discount 0
            ((True, FIRST, 0.0, 1.0, 0), off),  # the next game
        ],
        1: [
            ((True, FIRST, 0.0, 1.0, 0), off),
            (off, (True, FIRST, 0.0, 1.0, 0)),
            ((True, MID, 0.0, 1.0, 0), off),
            (off, (True, MID, 0.0, 1.0, 1)),
            ((True, MID, 0.0, 1.0, 0), off),
            (off, (True, MID, 0.0, 1.0, 1)),
            ((True, MID, 0.0, 1.0, 0), off),
            (off, (True, MID, 0.0, 1.0, 1)),
            ((True, LAST, -1.0, 0.0, 6), (True, LAST, 1.0, 0.0, 1)),
        ],
    }
    ts = env.reset(seed=0)
    played = {slot: {agent: 0 for agent in (p0, p1)} for slot in (0, 1)}
    for step in range(9):
        for slot in (0, 1):
            if step < len(expected[slot]):
                assert (row(ts, p0, slot), row(ts, p1, slot)) == expected[slot][step], (step, slot)
        ending = [step == 7, step == 8]
        assert ts.episode_end.tolist() == ending, step
        actions = {agent: np.zeros(2, dtype=np.int64) for agent in (p0, p1)}
        for slot in (0, 1):
            for agent in (p0, p1):
                script = moves[slot][agent]
                if ts.active[agent][slot] and ts.steps[agent].step_type[slot] != LAST:
                    actions[agent][slot] = script[played[slot][agent] % len(script)]  # mod: the next game
                    played[slot][agent] += 1
                    mask = ts.steps[agent].observation["action_mask"][slot]
                    assert mask.tolist() == [1] * 7  # no column is full in these games
        ts = env.step(actions)


def test_connect_four_mask_closes_a_full_column():
    env = make(CONNECT_FOUR, 1)
    ts = env.reset(seed=0)
    for move in range(6):  # both players drop into column 3 until it is full
        agent = "player_0" if move % 2 == 0 else "player_1"
        assert ts.active[agent][0]
        assert ts.steps[agent].observation["action_mask"][0][3] == 1
        ts = env.step({a: np.full(1, 3) for a in env.possible_agents})
    mask = ts.steps["player_0"].observation["action_mask"][0]
    assert ts.active["player_0"][0] and mask.tolist() == [1, 1, 1, 0, 1, 1, 1]


def test_connect_four_horizon_truncates_every_agent_with_discount_one():
    env = make(CONNECT_FOUR, 1, horizon=3)
    ts = env.reset(seed=0)
    for column in (2, 4, 5):  # player_0, player_1, player_0
        ts = env.step({a: np.full(1, column) for a in env.possible_agents})
    assert row(ts, "player_0") == (True, LAST, 0.0, 1.0, 5)
    assert row(ts, "player_1") == (True, LAST, 0.0, 1.0, 4)
    assert ts.episode_end.tolist() == [True]
    ts = env.step({a: np.zeros(1, dtype=np.int64) for a in env.possible_agents})
    assert row(ts, "player_0") == (True, FIRST, 0.0, 1.0, 0) and not ts.active["player_1"][0]


def test_aec_rewards_from_the_other_agents_turns_accumulate_and_an_agent_can_leave_early():
    """TurnsAECEnv, every move with action 1: the mover gets 1, the other agent 10; b leaves after its
    second move, a plays on alone until the env truncates it after 7 moves."""
    env = make(TURNS, 1)
    off = (False, LAST, 0.0, 0.0, 0)
    expected = [  # (a, b) per step
        ((True, FIRST, 0.0, 1.0, 0), off),
        (off, (True, FIRST, 0.0, 1.0, 0)),  # the 10 b got during a's move, before its first, is dropped
        ((True, MID, 11.0, 1.0, 1), off),  # its own move's 1 + 10 from b's move
        (off, (True, MID, 11.0, 1.0, 1)),
        ((True, MID, 11.0, 1.0, 1), (True, LAST, 1.0, 0.0, 1)),  # b terminated by its move: LAST now
        ((True, MID, 1.0, 1.0, 1), off),  # alone: only its own moves' rewards
        ((True, MID, 1.0, 1.0, 1), off),
        ((True, LAST, 1.0, 1.0, 1), off),  # the env's own limit: truncated, discount 1
        ((True, FIRST, 0.0, 1.0, 0), off),
    ]
    ts = env.reset(seed=0)
    for step, rows in enumerate(expected):
        assert (row(ts, "a"), row(ts, "b")) == rows, step
        assert ts.episode_end.tolist() == [step == 7]
        ts = env.step({agent: np.ones(1, dtype=np.int64) for agent in env.possible_agents})


def test_aec_horizon_gives_each_agent_its_pending_reward():
    env = make(TURNS, 1, horizon=3, length=9)
    ts = env.reset(seed=0)
    for action in (2, 1, 2):  # a, b, a
        ts = env.step({agent: np.full(1, action) for agent in env.possible_agents})
    assert row(ts, "a") == (True, LAST, 2.0, 1.0, 2)  # its own last move
    assert row(ts, "b") == (True, LAST, 11.0, 1.0, 1)  # its move's 1 + 10 from a's last move
    assert ts.episode_end.tolist() == [True]


# --- Parallel API: late join, early finish, sitting a step out -------------------------------------


def test_relay_agents_join_late_finish_early_and_keep_rewards_of_a_skipped_step():
    env = make(RELAY, 1, rest_at=3)
    assert isinstance(env, ParallelVectorEnv)
    off = (False, LAST, 0.0, 0.0, 0)
    expected = [  # (early, late, quitter) per step; every agent sends action 1 (reward 1 per step)
        ((True, FIRST, 0.0, 1.0, 0), off, (True, FIRST, 0.0, 1.0, 0)),
        ((True, MID, 1.0, 1.0, 1), off, (True, MID, 1.0, 1.0, 1)),
        (
            (True, MID, 1.0, 1.0, 1),
            (True, FIRST, 0.0, 1.0, 0),
            (True, MID, 1.0, 1.0, 1),
        ),  # late: its 5 dropped
        (off, (True, MID, 1.0, 1.0, 1), (True, LAST, 1.0, 0.0, 1)),  # early rests; quitter terminated
        ((True, MID, 11.0, 1.0, 1), (True, MID, 1.0, 1.0, 1), off),  # 1 + 10 while resting + 0 (sent nothing)
        ((True, MID, 1.0, 1.0, 1), (True, MID, 1.0, 1.0, 1), off),
        ((True, LAST, 1.0, 1.0, 1), (True, LAST, 1.0, 1.0, 1), off),  # the env's time limit: truncated
        (
            (True, FIRST, 0.0, 1.0, 0),
            off,
            (True, FIRST, 0.0, 1.0, 0),
        ),  # reset: the agents present at the start
    ]
    ts = env.reset(seed=0)
    for step, rows in enumerate(expected):
        assert (row(ts, "early"), row(ts, "late"), row(ts, "quitter")) == rows, step
        assert ts.episode_end.tolist() == [step == 6]
        ts = env.step({agent: np.ones(1, dtype=np.int64) for agent in env.possible_agents})


def test_relay_info_masks_become_a_dict_observation():
    env = make(RELAY, 2, mask_in_info=True)
    space = env.observation_spaces["early"]
    assert isinstance(space, Dict) and isinstance(space["action_mask"], MultiBinary)
    assert isinstance(space["observation"], Box) and space["action_mask"].shape == (3,)
    ts = env.reset(seed=0)
    preprocessor = ObservationPreprocessor(space, env.action_spaces["early"], RELAY)
    mask = preprocessor.action_mask(ts.steps["early"].observation)
    assert mask.tolist() == [[True, True, False]] * 2
    assert preprocessor.transform(ts.steps["early"].observation).shape == (2, 2)


def test_horizon_truncates_every_agent_still_going():
    env = make(RELAY, 2, horizon=4, episode_length=9)
    ts = env.reset(seed=0)
    for _ in range(4):
        ts = env.step({agent: np.zeros(2, dtype=np.int64) for agent in env.possible_agents})
    assert ts.episode_end.tolist() == [True, True]
    for agent in ("early", "late"):
        assert ts.active[agent].all() and (ts.steps[agent].step_type == LAST).all()
        assert (ts.steps[agent].discount == 1).all()
    assert not ts.active["quitter"].any()  # terminated at step 3, inactive since


def test_simple_spread_horizon_and_its_own_time_limit_truncate_all_three_agents():
    needs_mpe2()
    for horizon, length in ((5, 5), (None, 25)):  # the run's horizon, then the env's max_cycles
        env = make(SPREAD, 2, horizon=horizon, continuous_actions=False)
        ts = env.reset(seed=0)
        for step in range(1, length + 1):
            ts = env.step({agent: np.zeros(2, dtype=np.int64) for agent in env.possible_agents})
            assert ts.episode_end.tolist() == [step == length] * 2
        for agent in env.possible_agents:
            assert (ts.steps[agent].step_type == LAST).all() and (ts.steps[agent].discount == 1).all()


def test_seeding_is_reproducible_and_slot_i_gets_seed_plus_i():
    needs_mpe2()
    env = make(SPREAD, 3, continuous_actions=False)
    first = env.reset(seed=7).steps["agent_0"].observation
    again = env.reset(seed=7).steps["agent_0"].observation
    shifted = env.reset(seed=8).steps["agent_0"].observation
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first[1:], shifted[:2])
    assert not np.array_equal(first[0], first[1])


def test_a_non_finite_reward_is_refused_naming_the_agent_and_slot():
    env = make(RELAY, 2)
    env.reset(seed=0)
    relay = env.envs[1]
    step = relay.step

    def poisoned(actions):
        observations, rewards, terminations, truncations, infos = step(actions)
        rewards["quitter"] = float("nan")
        return observations, rewards, terminations, truncations, infos

    relay.step = poisoned
    with pytest.raises(NonFiniteError, match=r"agent quitter got a reward that is NaN.* env slot 1"):
        env.step({agent: np.zeros(2, dtype=np.int64) for agent in env.possible_agents})


def test_a_non_finite_observation_is_refused_naming_the_agent_and_slot():
    env = make(RELAY, 3)
    env.reset(seed=0)
    relay = env.envs[2]
    step = relay.step

    def poisoned(actions):
        observations, rewards, terminations, truncations, infos = step(actions)
        observations["early"] = np.array([np.inf, 0.0], dtype=np.float32)
        return observations, rewards, terminations, truncations, infos

    relay.step = poisoned
    with pytest.raises(NonFiniteError, match=r"agent early's observation holds NaN.* env slot\(s\) \[2\]"):
        env.step({agent: np.zeros(3, dtype=np.int64) for agent in env.possible_agents})


# --- env.name and env.kwargs -----------------------------------------------------------------------


def test_env_name_forms():
    import pettingzoo.classic.connect_four_v3 as connect_four

    assert resolve_factory(CONNECT_FOUR) is connect_four.env  # AEC only: env()
    assert resolve_factory("pettingzoo.classic:connect_four_v3") is connect_four.env
    assert resolve_factory(RELAY) is RelayParallelEnv
    needs_mpe2()
    from mpe2 import simple_spread_v3

    assert resolve_factory(SPREAD) is simple_spread_v3.parallel_env  # the Parallel API when offered


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "no_such_module_xyz:env",
            {},
            "env.name: no_such_module_xyz:env: cannot import module 'no_such_module_xyz'",
        ),
        (
            "pettingzoo.classic:connect_for_v3",
            {},
            "has no attribute 'connect_for_v3'; did you mean 'connect_four_v3'?",
        ),
        ("json", {}, "env.name: json: module 'json' has neither parallel_env() nor env()"),
        ("tests.pettingzoo_envs:AGENTS", {}, "is a tuple, not a PettingZoo env or its factory"),
        ("numpy:zeros", {"shape": 2}, "built a ndarray, not a PettingZoo ParallelEnv or AECEnv"),
        (CONNECT_FOUR, {"board_size": 9}, "env.kwargs: pettingzoo.classic.connect_four_v3 does not accept"),
        ("pettingzoo.classic.connect_four_v3:", {}, "is not a module path"),
    ],
)
def test_bad_names_and_kwargs_are_config_errors(name, kwargs, message):
    with pytest.raises(ConfigError) as caught:
        make(name, 1, **kwargs)
    assert message in str(caught.value)


def test_subprocess_vectorization_is_refused():
    with pytest.raises(
        ConfigError, match=r"env\.vectorization: the pettingzoo adapter steps its envs in this"
    ):
        PettingZooAdapter().make(RELAY, 2, kwargs={}, vectorization="async")


def test_the_example_of_the_env_adapters_page_runs():
    """The python block of the PettingZoo section of docs/plugins/envs.md, as a user would paste it."""
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "plugins" / "envs.md").read_text()
    section = page.split("## PettingZoo: multi-agent envs", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```python\n")[1:]
    assert len(blocks) == 1, "the section should hold one python example"
    code = blocks[0].split("```", 1)[0]
    assert "check_multi_agent_env(env" in code
    exec(compile(code, "docs/plugins/envs.md", "exec"), {})


def test_a_state_the_env_cannot_give_after_a_termination_is_zeros_and_mid_episode_an_error():
    """PettingZoo's multiwalker raises in state() once a fallen walker's body is gone, at the
    termination: nothing bootstraps from that state, so the slot gets zeros and the run goes on. The
    same failure mid-episode stops the run naming the env and the cause."""
    from rlgear.errors import EnvDataError

    env = make("tests.pettingzoo_envs:BrittleStateParallelEnv", 2, end_at=3)
    assert env.state_space is not None
    ts = env.reset(seed=0)
    np.testing.assert_array_equal(ts.state, [[0.0, 7.0], [0.0, 7.0]])
    for t in (1, 2):
        ts = env.step({a: np.zeros(2, np.int64) for a in env.possible_agents})
        np.testing.assert_array_equal(ts.state, [[t, 7.0], [t, 7.0]])
    ts = env.step({a: np.zeros(2, np.int64) for a in env.possible_agents})
    assert ts.episode_end.all() and all(ts.steps[a].discount.tolist() == [0.0, 0.0] for a in ts.steps)
    np.testing.assert_array_equal(ts.state, np.zeros((2, 2)))
    ts = env.step({a: np.zeros(2, np.int64) for a in env.possible_agents})  # the slots reset
    np.testing.assert_array_equal(ts.state, [[0.0, 7.0], [0.0, 7.0]])

    broken = make("tests.pettingzoo_envs:BrittleStateParallelEnv", 1, end_at=5, break_at=2)
    broken.reset(seed=0)
    broken.step({a: np.zeros(1, np.int64) for a in broken.possible_agents})
    with pytest.raises(
        EnvDataError,
        match=r"env tests.pettingzoo_envs:BrittleStateParallelEnv: its state\(\) raised "
        r"AttributeError: 'NoneType' object has no attribute 'position' \(env slot 0, mid-episode\)",
    ):
        broken.step({a: np.zeros(1, np.int64) for a in broken.possible_agents})
