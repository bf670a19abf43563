"""League self-play (rlgear.league): matchmaking, snapshots, ratings, the players' env, config errors,
and a league run's results and checkpoints."""

from __future__ import annotations

import dataclasses
from importlib.util import find_spec

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.config.league import LeagueConfig, kind_of
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.league.env import LeagueEnv, RandomOpponent
from rlgear.league.league import League, pfsp_weights
from rlgear.league.ratings import INITIAL_ELO, Elo, Payoff
from rlgear.testing import check_multi_agent_env
from tests.multi_agent_envs import make_mixed

TICTACTOE = "pettingzoo.classic.tictactoe_v3"
#: The tests that play or configure tic-tac-toe (PettingZoo); the league's own logic needs no env.
needs_pettingzoo = pytest.mark.skipif(
    find_spec("pettingzoo") is None, reason="needs the pettingzoo extra: pip install 'rlgear[pettingzoo]'"
)


# --- PFSP, payoff, Elo ----------------------------------------------------------------------
def test_pfsp_weightings_follow_the_win_rate_as_documented():
    x = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(pfsp_weights(x, "squared"), (1 - x) ** 2 / ((1 - x) ** 2).sum())
    np.testing.assert_allclose(pfsp_weights(x, "linear"), (1 - x) / (1 - x).sum())
    np.testing.assert_allclose(pfsp_weights(x, "variance"), x * (1 - x) / (x * (1 - x)).sum())
    # a player that beats everything still plays: uniform, not NaN
    np.testing.assert_allclose(pfsp_weights(np.ones(4), "squared"), np.full(4, 0.25))
    with pytest.raises(ValueError, match="unknown PFSP weighting"):
        pfsp_weights(x, "cubic")


def test_payoff_is_mirrored_and_starts_at_one_prior_draw():
    payoff = Payoff()
    assert payoff.win_rate("a", "b") == 0.5
    payoff.record("a", "b", 1)
    payoff.record("a", "b", 1)
    payoff.record("a", "b", 0)
    assert payoff.results[("a", "b")] == [2, 1, 0] and payoff.results[("b", "a")] == [0, 1, 2]
    assert payoff.win_rate("a", "b") == pytest.approx((2 + 0.5 + 0.5) / 4)
    assert payoff.win_rate("b", "a") == pytest.approx((0 + 0.5 + 0.5) / 4)
    restored = Payoff()
    restored.set_state(payoff.get_state())
    assert dict(restored.results) == dict(payoff.results)


def test_elo_moves_by_k_times_the_surprise_and_keeps_anchors():
    elo = Elo(k=32.0, anchored=("random",))
    elo.record("a", "b", 1)  # equal ratings: expected 0.5, so +16 / -16
    assert elo.rating("a") == pytest.approx(INITIAL_ELO + 16.0)
    assert elo.rating("b") == pytest.approx(INITIAL_ELO - 16.0)
    elo.record("a", "random", -1)
    expected = 1.0 / (1.0 + 10.0 ** ((INITIAL_ELO - (INITIAL_ELO + 16.0)) / 400.0))
    assert elo.rating("a") == pytest.approx(INITIAL_ELO + 16.0 - 32.0 * expected)
    assert elo.rating("random") == INITIAL_ELO


# --- matchmaking and snapshots ------------------------------------------------------------------
def _league(**overrides) -> League:
    return League(dataclasses.replace(LeagueConfig(), **overrides), seed=0)


def _weights(value: float) -> dict[str, np.ndarray]:
    return {"policy/output/kernel": np.full((2, 2), value, np.float32)}


def test_player_ids_and_kinds():
    config = LeagueConfig(main_agents=2, main_exploiters=1, league_exploiters=0)
    assert config.player_ids() == ["main_0", "main_1", "main_exploiter_0"]
    assert [kind_of(p) for p in ("main_1", "main_exploiter_0", "league_exploiter_3@12")] == [
        "main",
        "main_exploiter",
        "league_exploiter",
    ]


def test_before_any_snapshot_every_player_plays_the_current_main_agents():
    league = _league(main_agents=2)
    for player in league.players:
        assert {league.choose_opponent(player) for _ in range(50)} <= {"main_0", "main_1"}


def test_main_agents_mix_self_play_and_pfsp_over_snapshots():
    league = _league(self_play=0.35)
    league.add_snapshot("main_0", _weights(0.0), 1)
    league.add_snapshot("league_exploiter_0", _weights(1.0), 1)
    for _ in range(30):  # main_0 beats its own snapshot, loses to the exploiter's
        league.record("main_0", "main_0@1", 1)
        league.record("main_0", "league_exploiter_0@1", -1)
    picks = [league.choose_opponent("main_0") for _ in range(4000)]
    share = {o: picks.count(o) / len(picks) for o in set(picks)}
    assert share["main_0"] == pytest.approx(0.35, abs=0.03)
    # squared PFSP: weights (1 - x)^2 with x = 30.5/31 and 0.5/31
    x = np.array([30.5 / 31, 0.5 / 31])
    expected = 0.65 * (1 - x) ** 2 / ((1 - x) ** 2).sum()
    assert share["main_0@1"] == pytest.approx(expected[0], abs=0.02)
    assert share["league_exploiter_0@1"] == pytest.approx(expected[1], abs=0.03)


def test_a_main_exploiter_that_cannot_beat_the_main_agent_plays_its_snapshots():
    league = _league(snapshot_min_games=10)
    league.add_snapshot("main_0", _weights(0.0), 2)
    assert league.choose_opponent("main_exploiter_0") == "main_0"  # too few games to judge
    for _ in range(20):
        league.record("main_exploiter_0", "main_0", -1)
    picks = {league.choose_opponent("main_exploiter_0") for _ in range(50)}
    assert picks == {"main_0@2"}  # the only snapshot of main_0 (variance PFSP over its history)
    for _ in range(20):
        league.record("main_exploiter_0", "main_0", 1)
    assert {league.choose_opponent("main_exploiter_0") for _ in range(50)} == {"main_0"}


def test_snapshots_are_due_by_interval_or_by_win_rate_and_reset_exploiters():
    league = _league(
        snapshot_interval=5, snapshot_win_rate=0.7, snapshot_min_games=10, exploiter_reset_probability=1.0
    )
    assert not league.due("main_0", 4) and league.due("main_0", 5)
    for _ in range(10):
        league.record("league_exploiter_0", "main_0", 1)
    assert league.due("league_exploiter_0", 1)  # 10 wins of 10 games >= 0.7
    resets: list[str] = []
    out = league.after_iteration(5, lambda pid: _weights(3.0), resets.append)
    assert set(league.snapshots) == {"main_0@5", "main_exploiter_0@5", "league_exploiter_0@5"}
    assert resets == ["main_exploiter_0", "league_exploiter_0"]  # main agents are never reset
    np.testing.assert_array_equal(league.snapshot_weights["main_0@5"]["policy/output/kernel"], 3.0)
    assert out["league/num_snapshots"] == 3.0 and out["league/league_exploiter_0/win_rate"] == 1.0
    assert out["league/main_exploiter_0/resets"] == 1.0 and out["league/main_0/resets"] == 0.0
    assert not league.due("league_exploiter_0", 6)  # counters restart with the snapshot
    never = _league(snapshot_interval=1, exploiter_reset_probability=0.0)
    resets.clear()
    never.after_iteration(1, lambda pid: _weights(0.0), resets.append)
    assert resets == ["main_exploiter_0"]


def test_snapshot_weights_are_copies():
    league = _league()
    weights = _weights(1.0)
    league.add_snapshot("main_0", weights, 1)
    weights["policy/output/kernel"][:] = 7.0
    np.testing.assert_array_equal(league.snapshot_weights["main_0@1"]["policy/output/kernel"], 1.0)


def test_league_state_round_trip_continues_the_same_matchmaking():
    league = _league(self_play=0.5)
    league.add_snapshot("main_0", _weights(1.0), 3)
    league.record("main_0", "main_0@3", 1)
    state, arrays = league.get_state()
    restored = _league(self_play=0.5)
    restored.set_state(state, arrays)
    assert restored.snapshots == league.snapshots
    np.testing.assert_array_equal(restored.snapshot_weights["main_0@3"]["policy/output/kernel"], 1.0)
    assert dict(restored.payoff.results) == dict(league.payoff.results)
    assert restored.elo.ratings == league.elo.ratings
    assert [restored.choose_opponent("main_0") for _ in range(30)] == [
        league.choose_opponent("main_0") for _ in range(30)
    ]


def test_evaluation_results_score_draws_half_and_leave_the_payoff_alone():
    league = _league()
    out = league.evaluation_results(
        [("main_0", "random", 1), ("main_0", "random", 0), ("main_0", "random", -1), ("main_0", "random", 1)]
    )
    assert out["league/main_0/win_rate_vs_random"] == pytest.approx(2.5 / 4)
    assert out["league/main_0/elo"] != INITIAL_ELO
    assert not league.payoff.results and league.since_snapshot["main_0"] == [0, 0, 0]


# --- the players' env ---------------------------------------------------------------------------
def _tictactoe(num_envs: int):
    return registry.load_env_adapter("pettingzoo")().make(TICTACTOE, num_envs, kwargs={})


@needs_pettingzoo
def test_the_league_env_keeps_the_multi_agent_contract_and_records_every_game():
    inner = _tictactoe(6)
    league = _league()
    seat = inner.possible_agents[0]
    made: list[str] = []

    def make(opponent):
        made.append(opponent)
        return RandomOpponent(inner.observation_spaces[seat], inner.action_spaces[seat], "tictactoe", 1)

    env = LeagueEnv(inner, league, make, seed=0)
    assert env.possible_agents == ("main_0", "main_exploiter_0", "league_exploiter_0")
    counts = check_multi_agent_env(env, steps=200, close=False)
    assert counts["episodes"] > 50
    # every finished game reached the league, and before any snapshot every game is against main_0
    assert sum(sum(league.since_snapshot[p]) for p in league.players) == counts["episodes"]
    assert env.outcomes == []  # recorded in the league, not also kept: nobody pops a training env's
    assert set(made) == {"main_0"}
    # each player acts only in its own slots (two per player)
    ts = env.reset(seed=1)
    for index, player in enumerate(env.possible_agents):
        others = np.ones(6, dtype=bool)
        others[2 * index : 2 * index + 2] = False
        assert not ts.active[player][others].any()
    env.close()


@needs_pettingzoo
def test_seats_alternate_between_games_and_the_opponent_moves_inside_the_env():
    inner = _tictactoe(3)
    league = League(LeagueConfig(main_exploiters=0, league_exploiters=0), seed=0)
    seat = inner.possible_agents[0]
    env = LeagueEnv(
        inner,
        league,
        lambda o: RandomOpponent(inner.observation_spaces[seat], inner.action_spaces[seat], "tictactoe", 2),
        seed=3,
        report_outcomes=True,  # as a remote worker's: kept for pop_outcomes
    )
    ts = env.reset(seed=0)
    seats_seen = set()
    for _ in range(300):
        seats_seen.update(int(s) for s in env._seat)
        legal = ts.steps["main_0"].observation["action_mask"].astype(bool)
        actions = {"main_0": np.where(legal.any(axis=1), legal.argmax(axis=1), 0).astype(np.int64)}
        ts = env.step(actions)
        # on the player's turn the board has an even count of marks when it moves first, odd second
        board = ts.steps["main_0"].observation["observation"].reshape(3, -1).sum(axis=1)
        moving = ts.active["main_0"] & (ts.steps["main_0"].step_type != 2)
        first = np.asarray(env._seat) == 0
        assert np.all((board[moving] % 2 == 0) == first[moving])
    assert seats_seen == {0, 1}
    assert len(env.outcomes) > 20 and {o for _, o, _ in env.outcomes} == {"main_0"}
    env.close()


def test_the_league_env_refuses_what_it_cannot_play():
    league = _league()
    with pytest.raises(ConfigError, match="same observation space"):
        LeagueEnv(make_mixed(4), league, lambda o: None)  # two agents, different spaces


# --- config -------------------------------------------------------------------------------------
def _raw(**extra) -> dict:
    raw = {
        "algorithm": "ppo",
        "backend": "torch",
        "seed": 0,
        "env": {"adapter": "pettingzoo", "name": TICTACTOE},
        "workers": {"num_envs_per_worker": 2},
        "model": {"hidden_sizes": [16]},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1},
        "league": {"snapshot_interval": 1},
        "logging": {"progress": "none", "tensorboard": False},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


@needs_pettingzoo
@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ({"multiagent": {"policies": {"a": {}}}}, "multiagent", "remove the multiagent section"),
        ({"learners": {"num_learners": 1}}, "learners.num_learners", "expected 0, got 1"),
        ({"model": {"observation_filter": "mean_std"}}, "model.observation_filter", "expected none"),
        ({"league": {"main_agents": 0}}, "league.main_agents", "at least 1"),
        ({"league": {"self_play": 1.5}}, "league.self_play", "probability"),
        ({"league": {"pfsp_weighting": "cubic"}}, "league.pfsp_weighting", "cubic"),
        ({"league": {"snapshot_every": 3}}, "league.snapshot_every", "snapshot_interval"),
    ],
)
def test_config_errors_name_the_key(extra, key, message):
    with pytest.raises(ConfigError) as err:
        config_mod.resolve(_raw(**extra))
    assert key in str(err.value) and message in str(err.value)


@needs_pettingzoo
@pytest.mark.parametrize("algorithm", ["mappo", "qmix", "a2c"])
def test_only_algorithms_that_play_in_a_league_take_the_section(algorithm):
    raw = {**_raw(algorithm=algorithm), "training": {}}
    if algorithm == "a2c":  # a multi-agent algorithm that keeps agents apart: accepted
        assert config_mod.resolve(raw).league is not None
        return
    with pytest.raises(ConfigError, match=f"league: algorithm '{algorithm}' does not play in a league"):
        config_mod.resolve(raw)


def test_a_league_needs_a_two_player_env(tmp_path):
    raw = _raw(env={"adapter": "gymnasium", "name": "CartPole-v1"})
    config = config_mod.resolve(raw)
    with pytest.raises(ConfigError, match="league: a league plays a two-player env"):
        registry.load_algorithm("ppo")(config, logdir=tmp_path)


@needs_pettingzoo
def test_the_config_lists_the_players_as_policies():
    config = config_mod.resolve(_raw(league={"main_agents": 2, "league_exploiters": 0}))
    from rlgear.config.multiagent import PolicyMapping, policy_ids

    assert policy_ids(config) == ["main_0", "main_1", "main_exploiter_0"]
    assert PolicyMapping(config)("main_exploiter_0") == "main_exploiter_0"
    assert config.to_dict()["league"]["main_agents"] == 2
    assert "league" not in config_mod.resolve({k: v for k, v in _raw().items() if k != "league"}).to_dict()


# --- a league run -------------------------------------------------------------------------------
@needs_pettingzoo
def test_a_league_run_snapshots_resets_exploiters_reports_and_checkpoints(tmp_path):
    config = config_mod.resolve(_raw(training={"evaluation_interval": 2, "evaluation_episodes": 6}))
    trainer = registry.load_algorithm("ppo")(config, logdir=tmp_path / "run")
    try:
        initial = trainer.learner.get_weights(["main_exploiter_0"])["main_exploiter_0"]
        first = trainer.train()
        assert first["league/num_snapshots"] == 3.0  # snapshot_interval 1: every player, every iteration
        for player in ("main_0", "main_exploiter_0", "league_exploiter_0"):
            assert first[f"league/{player}/games_this_iter"] > 0
            assert f"league/{player}/elo" in first
        # the main exploiter restarted from its initial weights after its snapshot
        after = trainer.learner.get_weights(["main_exploiter_0"])["main_exploiter_0"]
        for name, value in initial.items():
            np.testing.assert_array_equal(after[name], value)
        snap = trainer.league.snapshot_weights["main_exploiter_0@1"]
        assert any(not np.array_equal(snap[name], initial[name]) for name in initial)  # it had learned
        second = trainer.train()
        assert second["league/num_snapshots"] == 6.0
        # an episode is one player's game: its summary has that player's return only (+1, 0 or -1)
        _, _, episodes = trainer.workers.local_worker.sample_with_episodes()
        assert episodes and all(len(e["policy_returns"]) == 1 for e in episodes)
        assert {v for e in episodes for v in e["policy_returns"].values()} <= {-1.0, 0.0, 1.0}
        for player in trainer.league.players:
            assert 0.0 <= second[f"league/{player}/win_rate_vs_random"] <= 1.0
        path = trainer.save(tmp_path / "checkpoint")
        saved_state, saved_arrays = trainer.league.get_state()
    finally:
        trainer.stop()
    resumed = registry.load_algorithm("ppo")(config, logdir=tmp_path / "resumed")
    try:
        resumed.restore(path)
        state, arrays = resumed.league.get_state()
        assert state["snapshots"] == saved_state["snapshots"] and state["payoff"] == saved_state["payoff"]
        assert state["elo"] == pytest.approx(saved_state["elo"])
        assert arrays.keys() == saved_arrays.keys() and len(arrays) > 0
        for name, value in saved_arrays.items():
            np.testing.assert_array_equal(arrays[name], value)
        third = resumed.train()
        assert third["league/num_snapshots"] == 9.0
    finally:
        resumed.stop()


@needs_pettingzoo
def test_rlgear_evaluate_plays_a_league_checkpoint_against_the_baseline(tmp_path, monkeypatch):
    from rlgear.run.agent import evaluate_checkpoint

    config = config_mod.resolve(_raw())
    trainer = registry.load_algorithm("ppo")(config, logdir=tmp_path / "run")
    try:
        trainer.train()
        path = trainer.save(tmp_path / "checkpoint")
    finally:
        trainer.stop()
    baseline_moves: list[int] = []
    act = RandomOpponent.act

    def counted(self, ts, explore=True, slots=None):
        baseline_moves.append(len(ts.step_type))
        return act(self, ts, explore, slots)

    monkeypatch.setattr(RandomOpponent, "act", counted)
    episodes = evaluate_checkpoint(path, 9, []).episodes
    assert len(episodes) == 9 and sum(baseline_moves) > 0  # the random player moved in the games
    assert all(len(e["policy_returns"]) == 1 for e in episodes)


@needs_pettingzoo
def test_a_league_runs_on_tf_with_snapshots_acting(tmp_path):
    pytest.importorskip("tensorflow")
    config = config_mod.resolve(_raw(backend="tf", league={"self_play": 0.0}))
    trainer = registry.load_algorithm("ppo")(config, logdir=tmp_path / "run")
    try:
        trainer.train()
        second = trainer.train()  # self_play 0: main_0's games are all against the first snapshots
        assert second["league/num_snapshots"] == 6.0
        played = {o for (p, o), v in trainer.league.payoff.results.items() if p == "main_0" and sum(v)}
        assert played & {"main_0@1", "main_exploiter_0@1", "league_exploiter_0@1"}
    finally:
        trainer.stop()


def test_a_remote_mirror_plays_only_the_snapshots_whose_weights_it_holds():
    """rlgear.league.remote: the driver sends each worker the snapshots it lacks; a mirror that got
    the state but not yet some weights (a replaced worker) never picks those snapshots."""
    from types import SimpleNamespace

    from rlgear.league import remote

    driver = _league()
    driver.add_snapshot("main_0", _weights(1.0), 1)
    driver.add_snapshot("main_0", _weights(2.0), 2)
    driver.record("main_0", "main_0@1", 1)
    sends = remote.payloads(driver, {1: {"main_0@1"}, 2: set()}, [1, 2])
    assert {k.split("/")[0] for k in sends[1][1]} == {"main_0@2"}  # worker 1 holds @1 already
    assert {k.split("/")[0] for k in sends[2][1]} == {"main_0@1", "main_0@2"}
    assert "rng" not in sends[1][0]  # each mirror keeps its own random stream

    mirror = SimpleNamespace(league=_league())
    remote.receive(mirror, *sends[1])  # as a fresh worker that the driver believed to hold @1
    assert list(mirror.league.snapshots) == ["main_0@2"]
    assert mirror.league.payoff.get_state() == driver.payoff.get_state()
    for _ in range(200):
        assert mirror.league.choose_opponent("league_exploiter_0") in ("main_0", "main_0@2")
    remote.receive(mirror, *sends[2])
    assert sorted(mirror.league.snapshots) == ["main_0@1", "main_0@2"]
    np.testing.assert_array_equal(mirror.league.snapshot_weights["main_0@1"]["policy/output/kernel"], 1.0)
    assert sorted(
        remote.report(SimpleNamespace(league=mirror.league, env=SimpleNamespace(pop_outcomes=list)))[
            "snapshots"
        ]
    ) == [
        "main_0@1",
        "main_0@2",
    ]
