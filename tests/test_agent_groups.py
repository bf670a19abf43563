"""Agent groups (rlgear.sampling.agent_groups): a multi-agent env as one team agent.

Checked on small numpy envs: the single-agent TimeStep contract (``check_vector_env``); the team
observation's layout (presence flags, each agent's observation, the state or the joint
observation, padding pinned to 0 in the bounds); absent and early-finished agents; summed
rewards; terminated vs truncated team episodes; action masks; refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.env import MultiAgentTimeStep
from rlgear.errors import ConfigError
from rlgear.preprocessing import ACTION_MASK_KEY
from rlgear.sampling.agent_groups import AgentGroups, team_layout
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete
from rlgear.testing import check_vector_env
from rlgear.timestep import StepType
from tests.maddpg_envs import make_box_late_join, make_line_sum
from tests.mappo_envs import make_hidden_bonus
from tests.multi_agent_envs import MatchEnv, make_late_join, make_match, make_mixed
from tests.qmix_envs import make_two_step

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


@pytest.mark.parametrize(
    "make",
    [lambda: make_match(3), lambda: make_hidden_bonus(2), lambda: make_two_step(4)],
    ids=["match", "state", "two-step"],
)
def test_the_team_env_keeps_the_vector_env_contract(make):
    counts = check_vector_env(AgentGroups(make()))
    assert counts["episodes_terminated"] > 0


def test_spaces_and_layout_with_the_env_state():
    env = AgentGroups(make_hidden_bonus(2))  # agents observe 4 values, the state has 10
    assert env.observation_space.shape == (3, 11)
    assert env.action_space == MultiDiscrete([4, 4])
    layout = team_layout(env.observation_space)
    assert (layout.n_agents, layout.obs_dim, layout.state_dim) == (2, 4, 10)
    ts = env.reset(seed=0)
    agents, state, present = layout.split(ts.observation)
    np.testing.assert_array_equal(present, 1.0)
    np.testing.assert_array_equal(state, make_hidden_bonus(2).reset(seed=0).state)  # the env's own state
    assert agents.shape == (2, 2, 4)
    assert np.all(ts.observation[:, :2, 5:] == 0)  # padding of the agent rows


def test_without_a_state_the_state_row_is_every_agents_observation():
    env = AgentGroups(make_hidden_bonus(2, state=False))
    layout = team_layout(env.observation_space)
    assert layout.state_dim == 8
    ts = env.step(np.zeros((2, 2), np.int64))
    agents, state, _ = layout.split(ts.observation)
    np.testing.assert_array_equal(state, agents.reshape(2, -1))


def test_absent_and_early_finished_agents_rewards_and_a_truncated_end():
    """``a`` acts at steps 0-3 and terminates at 3, ``b`` joins at 2 and is truncated at 5."""
    inner = make_late_join(1)
    env = AgentGroups(inner)
    layout = team_layout(env.observation_space)
    seen = [env.reset()]
    for _ in range(6):
        seen.append(env.step(np.array([[1, 0]])))
    flags = [tuple(layout.split(ts.observation)[2][0]) for ts in seen]
    assert flags[:6] == [(1, 0), (1, 0), (1, 1), (0, 1), (0, 1), (0, 1)]  # a is absent from its LAST on
    assert [int(ts.step_type[0]) for ts in seen] == [FIRST, MID, MID, MID, MID, LAST, FIRST]
    assert float(seen[5].discount[0]) == 1.0  # the env truncated: the team's return bootstraps
    # absent agents' observations are zeros
    assert np.all(layout.split(seen[3].observation)[0][0, 0] == 0)
    # rewards: every active agent's, a's at its own LAST included (0.5 k + index + 1 + its action)
    assert float(seen[1].reward[0]) == pytest.approx(0.5 + 1 + 1)
    assert float(seen[3].reward[0]) == pytest.approx((1.5 + 1 + 1) + (1.5 + 2 + 0))
    assert float(seen[6].reward[0]) == 0.0
    np.testing.assert_array_equal(seen[6].prev_action, 0)
    np.testing.assert_array_equal(seen[3].prev_action, [[1, 0]])


def test_a_terminated_team_episode_has_discount_0():
    env = AgentGroups(make_match(2, length=2))
    env.reset()
    env.step(np.zeros((2, 2), np.int64))
    ts = env.step(np.zeros((2, 2), np.int64))
    np.testing.assert_array_equal(ts.step_type, LAST)
    np.testing.assert_array_equal(ts.discount, 0.0)


class MaskedMatch(MatchEnv):
    """MatchEnv whose observations carry an action mask: only the target and action 0 allowed
    for ``a``; ``b`` has no mask (a plain Box)."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)
        self.observation_spaces = {
            "a": Dict({"observation": Box(np.zeros(4), np.ones(4)), "action_mask": MultiBinary(4)}),
            "b": Box(np.zeros(4), np.ones(4)),
        }

    def _masked(self, mts: MultiAgentTimeStep) -> MultiAgentTimeStep:
        step = mts.steps["a"]
        mask = np.eye(4, dtype=np.int8)[self.target]
        mask[:, 0] = 1
        mts.steps["a"] = type(step)(
            **{**step.__dict__, "observation": {"observation": step.observation, "action_mask": mask}}
        )
        return mts

    def reset(self, seed=None):
        return self._masked(super().reset(seed))

    def step(self, actions):
        return self._masked(super().step(actions))


def test_action_masks_are_carried_per_agent_and_all_allowed_where_there_is_none():
    env = AgentGroups(MaskedMatch(3))
    assert isinstance(env.observation_space, Dict)
    assert env.observation_space["action_mask"] == MultiBinary(8)
    ts = env.reset(seed=1)
    mask = ts.observation["action_mask"].reshape(3, 2, 4).astype(bool)
    expected = np.eye(4, dtype=bool)[env.env.target]
    expected[:, 0] = True
    np.testing.assert_array_equal(mask[:, 0], expected)
    np.testing.assert_array_equal(mask[:, 1], True)  # b has no mask
    check_vector_env(AgentGroups(MaskedMatch(2)))


def test_agents_with_different_action_spaces_are_refused_naming_them():
    with pytest.raises(ConfigError, match=r"box: Box.*disc: Discrete"):
        AgentGroups(make_mixed(2))


def test_image_observations_are_refused():
    env = make_match(2)
    env.observation_spaces = {a: Box(np.zeros((4, 4, 3)), np.ones((4, 4, 3))) for a in env.possible_agents}
    with pytest.raises(ConfigError, match="image"):
        AgentGroups(env)


def test_padding_to_the_widest_agent():
    env = make_two_step(2)
    env.observation_spaces = {"a": Box(np.zeros(3), np.ones(3)), "b": Discrete(5)}
    env.action_spaces = {"a": Discrete(2), "b": Discrete(2)}
    team = AgentGroups(env)
    assert team_layout(team.observation_space).obs_dim == 5  # b's one-hot is the widest
    assert team.observation_space.high[0, 4:].tolist() == [0.0, 0.0]  # a's padding pinned to 0


def test_a_team_layout_needs_a_team_space():
    with pytest.raises(ValueError, match="team observation"):
        team_layout(Box(np.zeros(3), np.ones(3)))


# --- Box teams (maddpg): the team acts in a Box [n, A] ----------------------------------------
def test_a_box_team_keeps_the_vector_env_contract():
    counts = check_vector_env(AgentGroups(make_line_sum(3)))
    assert counts["episodes_terminated"] > 0


def test_a_box_team_acts_in_the_agents_boxes_stacked():
    env = AgentGroups(make_line_sum(2))
    assert env.action_space == Box(np.full((2, 1), -1.0), np.full((2, 1), 1.0))
    assert env.box_actions == 1
    layout = team_layout(env.observation_space)
    assert (layout.n_agents, layout.obs_dim, layout.state_dim) == (2, 2, 3)
    ts = env.reset(seed=0)
    assert ts.prev_action.shape == (2, 2, 1) and ts.prev_action.dtype == np.float32
    np.testing.assert_array_equal(ts.prev_action, 0.0)


def test_a_box_team_action_is_split_per_agent():
    inner = make_line_sum(2)
    env = AgentGroups(inner)
    env.reset(seed=0)
    start, goal = inner.pos.copy(), inner.goal.copy()
    actions = np.array([[[0.5], [-1.0]], [[1.0], [0.2]]], np.float32)
    ts = env.step(actions)
    np.testing.assert_allclose(inner.pos, start + 0.25 * actions[..., 0], rtol=1e-6)
    np.testing.assert_allclose(ts.reward, -np.abs(inner.pos.sum(1) - goal), rtol=1e-6)  # the halves summed
    np.testing.assert_array_equal(ts.prev_action, actions)  # the previous joint action, float


def test_a_box_team_hands_each_agent_its_row_even_while_absent_and_restarts_prev_action():
    """``b`` is absent at steps 0-1: the env ignores its row (LateJoinEnv reads only active agents)."""
    inner = make_box_late_join(1)
    env = AgentGroups(inner)
    layout = team_layout(env.observation_space)
    seen = [env.reset()]
    for k in range(6):
        seen.append(env.step(np.array([[[1.0, 0.5 + k], [0.0, -k]]], np.float32)))
    for k, received in enumerate(inner.received):
        np.testing.assert_array_equal(received["a"], [[1.0, 0.5 + k]])
        np.testing.assert_array_equal(received["b"], [[0.0, -k]])
    flags = [tuple(layout.split(ts.observation)[2][0]) for ts in seen]
    assert flags[:6] == [(1, 0), (1, 0), (1, 1), (0, 1), (0, 1), (0, 1)]
    assert [int(ts.step_type[0]) for ts in seen] == [FIRST, MID, MID, MID, MID, LAST, FIRST]
    np.testing.assert_array_equal(seen[3].prev_action, [[[1.0, 2.5], [0.0, -2.0]]])
    np.testing.assert_array_equal(seen[6].prev_action, 0.0)  # FIRST: zeros


@pytest.mark.parametrize(
    ("spaces", "match"),
    [
        ({"a": Box(np.full(1, -1.0), np.full(1, 1.0)), "b": Discrete(2)}, r"a: Box.*b: Discrete"),
        (
            {"a": Box(-np.ones((1, 2)), np.ones((1, 2))), "b": Box(-np.ones((1, 2)), np.ones((1, 2)))},
            "one-dimensional",
        ),
    ],
    ids=["mixed", "two-dimensional"],
)
def test_unequal_or_mixed_action_spaces_are_refused_naming_the_agents(spaces, match):
    env = make_line_sum(2)
    env.action_spaces = spaces
    with pytest.raises(ConfigError, match=match):
        AgentGroups(env)


# --- agents whose action spaces differ in size (MPE's simple_speaker_listener) -------------------
def test_box_agents_of_different_widths_and_bounds_act_in_a_padded_team_box():
    """The team Box holds each agent's bounds in its first columns, padding pinned to [0, 0]; each
    agent receives its own columns only."""
    inner = make_box_late_join(1)
    inner.action_spaces = {
        "a": Box(np.full(1, -1.0), np.full(1, 1.0)),
        "b": Box(np.full(3, -2.0), np.full(3, 2.0)),
    }
    env = AgentGroups(inner)
    assert env.action_space == Box(
        np.array([[-1.0, 0.0, 0.0], [-2.0, -2.0, -2.0]]), np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    )
    assert env.reset().prev_action.shape == (1, 2, 3)
    ts = env.step(np.array([[[0.5, 0.0, 0.0], [1.0, -1.5, 0.25]]], np.float32))
    assert inner.received[0]["a"].shape == (1, 1)
    np.testing.assert_array_equal(inner.received[0]["a"], [[0.5]])
    np.testing.assert_array_equal(inner.received[0]["b"], [[1.0, -1.5, 0.25]])
    np.testing.assert_array_equal(ts.prev_action, [[[0.5, 0.0, 0.0], [1.0, -1.5, 0.25]]])


def test_a_box_team_with_different_bounds_per_agent_keeps_the_vector_env_contract():
    inner = make_line_sum(3)
    inner.action_spaces["b"] = Box(np.full(1, -0.5), np.full(1, 0.5))
    env = AgentGroups(inner)
    assert env.action_space == Box(np.array([[-1.0], [-0.5]]), np.array([[1.0], [0.5]]))
    check_vector_env(env)


def test_discrete_agents_with_fewer_actions_have_the_rest_masked_even_while_absent():
    """LateJoinEnv with ``a``: Discrete(2), ``b``: Discrete(5): the team acts in MultiDiscrete([5, 5])
    and ``a``'s actions 2-4 are never allowed; ``b`` (absent at steps 0-1) may take any of its own."""

    inner = make_late_join(2)
    inner.action_spaces = {"a": Discrete(2), "b": Discrete(5)}
    env = AgentGroups(inner)
    assert env.action_space == MultiDiscrete([5, 5])
    assert env.observation_space[ACTION_MASK_KEY] == MultiBinary(10)
    expected = np.array([[True, True, False, False, False], [True] * 5])
    ts = env.reset()
    for _ in range(6):
        mask = np.asarray(ts.observation[ACTION_MASK_KEY], bool).reshape(2, 2, 5)
        np.testing.assert_array_equal(mask, np.broadcast_to(expected, (2, 2, 5)))
        ts = env.step(np.array([[1, 4], [0, 3]]))
    match = make_match(3)
    match.action_spaces["a"] = Discrete(2)
    check_vector_env(AgentGroups(match))


def test_an_agents_own_mask_is_kept_and_its_padding_masked():
    """MaskedMatch (``a`` masks its 4 actions) with ``b`` acting in Discrete(6): ``a``'s block is its
    own mask then two disallowed actions; ``b``'s allows all 6."""
    inner = MaskedMatch(2)
    inner.action_spaces = {"a": Discrete(4), "b": Discrete(6)}
    env = AgentGroups(inner)
    assert env.action_space == MultiDiscrete([6, 6])
    ts = env.reset(seed=0)
    mask = np.asarray(ts.observation[ACTION_MASK_KEY], bool).reshape(2, 2, 6)
    own = np.eye(4, dtype=bool)[inner.target]
    own[:, 0] = True
    np.testing.assert_array_equal(mask[:, 0, :4], own)
    np.testing.assert_array_equal(mask[:, 0, 4:], False)
    np.testing.assert_array_equal(mask[:, 1], True)
