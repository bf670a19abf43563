"""The ``rlgear`` command (also ``python -m rlgear``).

Errors that are the user's to fix (:class:`~rlgear.errors.RLGearError`) print
one line and exit with status 2, without a traceback (``--debug`` shows it). A
run that started and could not go on (:class:`~rlgear.errors.RunError`: workers
lost for good, training diverged) prints one line naming the cause and the
checkpoint to resume from, and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

import rlgear
from rlgear.cli import export_cmd, plugin_check, scaffold
from rlgear.errors import RLGearError, RunError

EXIT_USER_ERROR = 2
EXIT_RUN_FAILED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlgear",
        description="rlgear: plugin-based reinforcement learning. Train from a YAML config, "
        "evaluate checkpoints, list and check plugins, start a plugin package.",
    )
    parser.add_argument("--version", action="version", version=f"rlgear {rlgear.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for user errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="train an agent from a YAML config")
    train.add_argument("config", help="YAML config file (see configs/)")
    train.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a config value, e.g. --set training.lr=0.001 (repeatable; values are YAML)",
    )  # fmt: skip
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run folder from its newest checkpoint")
    train.add_argument(
        "--progress",
        choices=["auto", "rich", "plain", "none"],
        help="progress display (default: logging.progress)",
    )

    evaluate = sub.add_parser("evaluate", help="run a checkpoint's policy for some episodes")
    evaluate.add_argument("checkpoint", help="checkpoint folder, or a run folder (its newest checkpoint)")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    evaluate.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override the checkpoint's config, e.g. --set env.kwargs.render_mode=null",
    )  # fmt: skip
    evaluate.add_argument("--explore", action="store_true", help="sample actions instead of acting greedily")
    evaluate.add_argument(
        "--video", metavar="DIR",
        help="record each episode as an mp4 in DIR (one env; needs pip install 'rlgear[video]' and an env "
        "that renders rgb_array)",
    )  # fmt: skip

    tune = sub.add_parser(
        "tune", help="run an experiment: searchers (random, grid, optuna), schedulers (asha, pbt), resume"
    )
    tune.add_argument("config", help="YAML config with search spaces and a 'tune' section (docs/tune.md)")
    tune.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a config value, e.g. --set tune.num_samples=8 (repeatable; values are YAML)",
    )  # fmt: skip
    tune.add_argument(
        "--resume", metavar="EXPERIMENT_DIR",
        help="continue an experiment folder (or the newest experiment in a folder) from its trials' checkpoints",
    )  # fmt: skip
    tune.add_argument("--progress", choices=["auto", "rich", "plain", "none"], help="trial table display")

    plot = sub.add_parser("plot", help="write PNG learning curves of an experiment (or a run) folder")
    plot.add_argument("dir", help="experiment folder (one line per trial, PBT exploits marked) or run folder")
    plot.add_argument("--metric", help="result key on the y axis (default: the experiment's tune.metric)")
    plot.add_argument(
        "--x", default="timesteps_total", help="result key on the x axis (default timesteps_total)"
    )
    plot.add_argument("--out", help="PNG file to write (default: DIR/<metric>.png)")

    serve = sub.add_parser(
        "serve", help="train from environments that connect over TCP (env.adapter: external)"
    )
    serve.add_argument("config", help="YAML config with env.adapter: external (see docs/protocol.md)")
    serve.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a config value, e.g. --set env.kwargs.port=9901 (repeatable; values are YAML)",
    )  # fmt: skip
    serve.add_argument("--resume", metavar="RUN_DIR", help="continue a run folder from its newest checkpoint")
    serve.add_argument("--progress", choices=["auto", "rich", "plain", "none"], help="progress display")

    plugins = sub.add_parser(
        "plugins",
        help="list installed plugins, their versions, capabilities and load errors; "
        "--check NAME checks one against its contract",
    )
    plugin_check.add_arguments(plugins)
    reference = sub.add_parser(
        "config", help="print the config reference: every key with its type, default and help text"
    )
    reference.add_argument(
        "algorithm",
        nargs="?",
        help="an installed algorithm: its training section (default: every other section)",
    )
    scaffold.add_parser(sub)
    export_cmd.add_parser(sub)
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    from rlgear.external.serve import serve

    serve(args.config, args.overrides, resume=args.resume, progress=args.progress)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from rlgear import config as config_mod
    from rlgear.run.runner import run

    config = config_mod.load(args.config, args.overrides)
    run(config, resume=args.resume, progress=args.progress)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from rlgear.tune.experiment import run

    result = run(args.config, overrides=args.overrides, resume=args.resume, progress=args.progress)
    failed = [t.trial_id for t in result.trials if t.status.value == "ERROR"]
    if failed:
        print(f"rlgear: {len(failed)} trial(s) failed: {', '.join(failed)} (see {result.experiment_dir})")
        return 1
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from rlgear.tune.plot import plot

    summary = plot(args.dir, metric=args.metric, x=args.x, out=args.out)
    print(f"wrote {summary.path} ({summary.lines} lines, {summary.exploit_marks} exploits marked)")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from rlgear.run.agent import evaluate_checkpoint

    evaluation = evaluate_checkpoint(
        args.checkpoint, args.episodes, args.overrides, explore=args.explore, video_dir=args.video
    )
    episodes = evaluation.episodes
    returns = np.array([e["episode_return"] for e in episodes])
    lengths = np.array([e["length"] for e in episodes])
    print(f"checkpoint: {evaluation.checkpoint}")
    if evaluation.env_note:
        print(evaluation.env_note)
    for path in evaluation.videos:
        print(f"video: {path}")
    print(
        f"episodes {len(episodes)} | return mean {returns.mean():.2f} std {returns.std():.2f} "
        f"min {returns.min():.2f} max {returns.max():.2f} | length mean {lengths.mean():.1f}"
    )
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """The reference the docs site renders, from the help texts of the config classes (Markdown)."""
    from rlgear.config.reference import reference_markdown

    print(reference_markdown(args.algorithm))
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.check:
        return plugin_check.run(args)
    options = {
        "--kind": args.kind,
        "--json": args.json,
        "--env-name": args.env_name,
        "--backend": args.backend,
    }
    given = [option for option, value in options.items() if value]
    if given:
        raise RLGearError(
            f"{', '.join(given)}: only with --check NAME (rlgear plugins --check NAME {given[0]} ...)"
        )
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rlgear.discovery import registry

    console = Console()
    reports = registry.inspect_all()
    table = Table(title="rlgear plugins", show_lines=False)
    for column in ("kind", "name", "package", "version", "status"):
        table.add_column(column)
    for kind, items in reports.items():
        for report in items:
            if report.missing_extra:
                hint = escape(f"(pip install 'rlgear[{report.missing_extra}]')")  # [tf] is not markup
                status = f"[yellow]not installed[/yellow] {hint}"
            else:
                status = "[red]error[/red]" if report.error else "ok"
            table.add_row(kind, report.info.name, report.info.package, report.info.version, status)
    console.print(table)

    algorithms = [r for r in reports["algorithm"] if r.error is None]
    backends = [r.info.name for r in reports["backend"] if r.error is None]  # a broken one is no column
    # Two-line headers and no column rules: the matrix fits 80 columns.
    matrix = Table(
        title="algorithm support",
        box=None,
        padding=(0, 1, 0, 0),
        # both recurrent models ride on the same machinery, so one column covers them; the
        # relational encoder has no column (the matrix fits 80 columns): the caption names its algorithms
        caption="recurrent: model.lstm and model.attention (qmix, vdn: their own GRU agent network)\n"
        "model.relational: "
        + ", ".join(r.info.name for r in algorithms if r.obj.capabilities().get("relational")),
    )
    columns = ("algorithm", "discrete", "contin-\nuous", "multi-\ndiscrete", "tuple/\ndict", *backends)
    for column in (*columns, "multi-\nagent", "recur-\nrent", "league"):
        matrix.add_column(column, min_width=max(len(line) for line in column.split("\n")))
    for report in algorithms:
        caps = report.obj.capabilities()

        def mark(flag: bool) -> str:
            return "yes" if flag else "-"

        matrix.add_row(
            report.info.name,
            mark(caps["discrete"]),
            mark(caps["continuous"]),
            mark(caps.get("multi_discrete", False)),
            mark(caps.get("composite", False)),
            # a framework-free policy ("*") runs under every backend name, importing no framework
            *[
                "numpy"
                if "*" in caps["backends"] and b not in caps["backends"]
                else mark(b in caps["backends"])
                for b in backends
            ],
            mark(caps["multi_agent"]),
            mark(caps["recurrent"]),
            mark(caps.get("league", False)),
        )
    console.print(matrix)
    failures = [r for items in reports.values() for r in items if r.error and not r.missing_extra]
    for report in failures:
        console.print(f"[red]load error[/red] {escape(report.error)}", highlight=False)
    return 0


def _one_line_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> str:
    """Warnings read like the errors: one line, no file name or source line (``--debug`` keeps those)."""
    return f"rlgear: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.debug:
        warnings.formatwarning = _one_line_warning
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    commands = {
        "train": cmd_train, "tune": cmd_tune, "plot": cmd_plot, "evaluate": cmd_evaluate, "plugins": cmd_plugins,
        "serve": cmd_serve, "new": scaffold.cmd_new, "config": cmd_config, "export": export_cmd.cmd_export,
    }  # fmt: skip
    try:
        return commands[args.command](args)
    except RunError as err:  # the run started and could not go on: a checkpoint and stopped.json say where
        if args.debug:
            raise
        print(f"rlgear: error: {err}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except RLGearError as err:
        if args.debug:
            raise
        print(f"rlgear: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("rlgear: aborted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlgear config | head`: the reader left; no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
