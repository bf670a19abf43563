"""The ``rlgear`` command (also ``python -m rlgear``).

Errors that are the user's to fix (:class:`~rlgear.errors.RLGearError`) print
one line and exit with status 2, without a traceback (``--debug`` shows it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import rlgear
from rlgear.errors import RLGearError

EXIT_USER_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlgear",
        description="rlgear: plugin-based reinforcement learning. Train from a YAML config, "
        "evaluate checkpoints, list plugins.",
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

    sub.add_parser("plugins", help="list installed plugins, their versions, capabilities and load errors")
    return parser


def cmd_train(args: argparse.Namespace) -> int:
    from rlgear import config as config_mod
    from rlgear.runner import run

    config = config_mod.load(args.config, args.overrides)
    run(config, resume=args.resume, progress=args.progress)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from rlgear import registry
    from rlgear.agent import checkpoint_config, load_weights
    from rlgear.evaluator import Evaluator

    if args.episodes <= 0:
        raise RLGearError(f"--episodes: expected a positive number, got {args.episodes}")
    folder, config = checkpoint_config(args.checkpoint, args.overrides)
    trainer_cls = registry.load_algorithm(config.algorithm)
    policy_cls = trainer_cls.policy_class(config.backend)
    backend = registry.load_backend(config.backend)()
    backend.setup(config.workers.num_cpus_for_driver, config.seed)
    adapter = registry.load_env_adapter(config.env.adapter)
    evaluator = Evaluator(config, policy_cls, adapter)
    try:
        try:
            evaluator.set_weights(load_weights(folder))
        except ValueError as err:
            raise RLGearError(f"{folder}: the checkpoint does not fit the config: {err}") from err
        episodes = evaluator.evaluate(args.episodes, explore=args.explore)
    finally:
        evaluator.stop()
    returns = np.array([e["episode_return"] for e in episodes])
    lengths = np.array([e["length"] for e in episodes])
    print(f"checkpoint: {folder}")
    print(
        f"episodes {len(episodes)} | return mean {returns.mean():.2f} std {returns.std():.2f} "
        f"min {returns.min():.2f} max {returns.max():.2f} | length mean {lengths.mean():.1f}"
    )
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rlgear import registry

    console = Console()
    reports = registry.inspect_all()
    table = Table(title="rlgear plugins", show_lines=False)
    for column in ("kind", "name", "package", "version", "status"):
        table.add_column(column)
    for kind, items in reports.items():
        for report in items:
            status = "[red]error[/red]" if report.error else "ok"
            table.add_row(kind, report.info.name, report.info.package, report.info.version, status)
    console.print(table)

    algorithms = [r for r in reports["algorithm"] if r.error is None]
    backends = [r.info.name for r in reports["backend"]]
    matrix = Table(title="algorithm support")
    for column in ("algorithm", "discrete", "continuous", *backends, "multi-agent", "recurrent"):
        matrix.add_column(column)
    for report in algorithms:
        caps = report.obj.capabilities()

        def mark(flag: bool) -> str:
            return "yes" if flag else "-"

        matrix.add_row(
            report.info.name,
            mark(caps["discrete"]),
            mark(caps["continuous"]),
            *[mark(b in caps["backends"]) for b in backends],
            mark(caps["multi_agent"]),
            mark(caps["recurrent"]),
        )
    console.print(matrix)
    failures = [r for items in reports.values() for r in items if r.error]
    for report in failures:
        console.print(f"[red]load error[/red] {escape(report.error)}", highlight=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    commands = {"train": cmd_train, "evaluate": cmd_evaluate, "plugins": cmd_plugins}
    try:
        return commands[args.command](args)
    except RLGearError as err:
        if args.debug:
            raise
        print(f"rlgear: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("rlgear: aborted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
