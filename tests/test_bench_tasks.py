"""The benchmark suite's task table (bench/suite_tasks.py) matches the configs it runs.

Each task trains rlgear from a file in ``configs/``; a task whose file names another algorithm or env,
or a file that no longer validates, would make the suite compare the wrong things for hours before
anyone noticed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlgear.config.loading import load

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from suite_tasks import TASKS, lin  # noqa: E402


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_each_suite_task_runs_a_config_of_its_algorithm_and_env(task):
    config = load(ROOT / "configs" / task.rlgear_config)
    assert config.algorithm == task.algorithm
    assert config.env.name == task.env
    assert 0 < task.quick_budget <= task.budget


def test_task_names_are_unique():
    names = [task.name for task in TASKS]
    assert len(names) == len(set(names))


def test_a_schedule_over_the_zoos_budget_falls_over_that_budget():
    sys.path.insert(0, str(ROOT / "bench"))
    from _suite_child import _sb3_kwargs
    from suite_tasks import Task

    task = Task(
        "Pendulum-v1", "tqc", 100, 10, 0.0, "tqc-pendulum.yaml", {"kwargs": {"learning_rate": lin(1.0, 500)}}
    )
    schedule = _sb3_kwargs(task, budget=100)["learning_rate"]
    assert schedule(1.0) == pytest.approx(1.0)  # SB3's progress_remaining: 1 at the start
    assert schedule(0.0) == pytest.approx(0.8)  # 100 of the 500 steps the rate falls over
    plain = _sb3_kwargs(
        Task("Pendulum-v1", "tqc", 100, 10, 0.0, "x", {"kwargs": {"lr": lin(2.0)}}), budget=100
    )
    assert plain["lr"](0.5) == pytest.approx(1.0)


def test_a_runs_evaluations_are_printed_as_they_come_and_its_result_returned(tmp_path, capsys):
    """bench/suite.py's runs take up to hours: each evaluation a child reports shows on the live line
    (env steps, return, wall clock so far), and the run's result is its last result line's JSON."""
    from suite import run_process

    child = tmp_path / "child.py"
    child.write_text(
        "import json\n"
        "print('noise')\n"
        "for steps, ret in [(5000, -114.42), (10000, 12.0)]:\n"
        "    print('SUITE_EVAL ' + json.dumps({'env_steps': steps, 'wall_s': steps / 1000, 'return_mean': ret}))\n"
        "print('SUITE_RESULT ' + json.dumps({'wall_s': 10.0}))\n"
    )
    result = run_process([str(child)], "SUITE_RESULT ", "child")
    assert capsys.readouterr().out == "5k -114.4 (5 s); 10k 12.0 (10 s); "
    assert result["wall_s"] == 10.0 and result["process_s"] > 0


def test_the_verdict_waits_for_equal_seed_counts_then_judges_return_and_time():
    from suite import judge

    def lib(iqm, low, seeds=5):
        return {"iqm": iqm, "ci": (low, iqm + 10), "seeds": seeds}

    assert judge(lib(100, 90), lib(150, 140, seeds=1), 0.2, 0.5) == "no verdict yet (5/1 seeds)"
    assert judge(lib(145, 130), lib(150, 140), 0.2, 0.5) == "return ok, time ok"  # inside SB3's interval
    assert judge(lib(100, 90), lib(150, 140), 0.6, 0.5) == "**return below**, **time above 0.5x**"


def _results_with_one_task_run_by_both_and_one_by_rlgear_only(tmp_path):
    """A results file as the suite writes it: ppo CartPole run by both libraries, tqc
    LunarLanderContinuous by rlgear alone (one seed each, so no bootstrap is needed)."""
    import json

    from suite import TASKS_BY_NAME, settings_digest

    def row(task_name, lib):
        task = TASKS_BY_NAME[task_name]
        curve = [{"env_steps": 5000, "wall_s": 5.0, "return_mean": 100.0}]
        return {"task": task_name, "lib": lib, "seed": 0, "budget": task.budget,
                "settings": settings_digest(task, lib), "curve": curve, "wall_s": 10.0, "peak_rss_mb": 100.0}  # fmt: skip

    path = tmp_path / "runs.jsonl"
    rows = [
        row("ppo-CartPole-v1", "rlgear"),
        row("ppo-CartPole-v1", "sb3"),
        row("tqc-LunarLanderContinuous-v3", "rlgear"),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_report_names_the_tasks_a_library_has_not_run_yet(tmp_path):
    """A task with one library's runs is left out of the table (nothing to compare) but listed under it
    with each library's seed count, so a missing row reads as "not run yet" rather than vanishing."""
    from suite import TASKS, report

    doc = tmp_path / "bench.md"
    doc.write_text("intro\n<!-- suite-table:begin -->\nstale table\n<!-- suite-table:end -->\noutro\n")
    body = report(_results_with_one_task_run_by_both_and_one_by_rlgear_only(tmp_path), doc, None)
    table, pending = body.split("Not in the table until both libraries have run", 1)
    assert "| ppo-CartPole-v1 (>= 475) |" in table and "tqc-LunarLanderContinuous-v3" not in table
    assert "- tqc-LunarLanderContinuous-v3: seeds run so far: rlgear 1, sb3 0" in pending
    assert "- crossq-LunarLanderContinuous-v3: seeds run so far: rlgear 0, sb3 0" in pending
    assert (
        sum(line.startswith("- ") and "seeds run so far" in line for line in pending.splitlines())
        == len(TASKS) - 1
    )
    text = doc.read_text()
    assert text.startswith("intro\n<!-- suite-table:begin -->\n| task |") and text.endswith("-->\noutro\n")
    assert "stale table" not in text and "Not in the table until" in text


def test_the_report_plots_only_the_tasks_in_its_table(tmp_path):
    pytest.importorskip("matplotlib")
    from suite import report

    plots = tmp_path / "plots"
    report(_results_with_one_task_run_by_both_and_one_by_rlgear_only(tmp_path), None, plots)
    assert sorted(p.name for p in plots.iterdir()) == ["ppo-CartPole-v1.png"]


def test_a_report_narrowed_by_tasks_prints_only_those_but_a_doc_keeps_every_task(
    tmp_path, monkeypatch, capsys
):
    """`--tasks X` after a run prints X alone (no list of every other task at 0 seeds); with `--doc` the
    table written is the whole suite's, so the doc keeps the rows of tasks not named."""
    import suite

    results = _results_with_one_task_run_by_both_and_one_by_rlgear_only(tmp_path)
    argv = ["suite.py", "--report", "--results", str(results), "--tasks", "tqc-LunarLanderContinuous-v3"]
    monkeypatch.setattr(sys, "argv", argv)
    suite.main()
    printed = capsys.readouterr().out
    assert "- tqc-LunarLanderContinuous-v3: seeds run so far: rlgear 1, sb3 0" in printed
    assert "ppo-CartPole-v1" not in printed and "crossq-LunarLanderContinuous-v3" not in printed

    doc = tmp_path / "bench.md"
    monkeypatch.setattr(sys, "argv", [*argv, "--doc", str(doc)])
    suite.main()
    text = doc.read_text()
    assert "| ppo-CartPole-v1 (>= 475) |" in text and "crossq-LunarLanderContinuous-v3" in text
