"""``rlgear export``: write a checkpoint's policy as ONNX, TorchScript or a SavedModel, or check one."""

from __future__ import annotations

import argparse

from rlgear.errors import RLGearError

FORMATS = ("onnx", "torchscript", "savedmodel")


def add_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser(
        "export",
        help="write a checkpoint's policy as ONNX, TorchScript or a SavedModel (or --check one)",
        description="Write a checkpoint's policy as a file other programs run, preprocessing included, "
        "with a sidecar PATH.json describing its inputs and outputs. Any checkpoint exports to any "
        "format, whichever backend trained it.",
    )
    export.add_argument(
        "checkpoint", nargs="?", help="checkpoint folder, or a run folder (its newest checkpoint)"
    )
    export.add_argument("--format", dest="fmt", choices=FORMATS, help="onnx, torchscript or savedmodel")
    export.add_argument("--out", metavar="PATH", help="the file to write (a folder for savedmodel)")
    export.add_argument(
        "--explore", action="store_true", help="the graph samples its action instead of acting greedily"
    )
    export.add_argument("--policy-id", help="which policy of a multi-agent checkpoint")
    export.add_argument(
        "--check", metavar="PATH",
        help="verify an exported file against its checkpoint (its sidecar names it; --checkpoint overrides)",
    )  # fmt: skip
    export.add_argument("--observations", type=int, default=1000, help="observations --check compares (1000)")


def cmd_export(args: argparse.Namespace) -> int:
    if args.check is not None:
        return _check(args)
    if args.checkpoint is None:
        raise RLGearError("export: give a checkpoint (or run folder), or --check PATH")
    if args.fmt is None:
        raise RLGearError(f"--format: expected one of {', '.join(FORMATS)}")
    if args.out is None:
        raise RLGearError("--out: expected the path to write (e.g. --out policy.onnx)")
    from rlgear.export import export

    result = export(args.checkpoint, args.fmt, args.out, explore=args.explore, policy_id=args.policy_id)
    data = result.sidecar
    print(f"wrote {result.path} ({data['format']}, from {data['checkpoint']}) and {result.sidecar_path}")
    print("inputs:  " + _specs(data["inputs"]))
    print("outputs: " + _specs(data["outputs"]))
    print(f"check it: rlgear export --check {result.path}")
    return 0


def _specs(specs: list[dict]) -> str:
    def shape(spec: dict) -> str:
        return (
            "["
            + ", ".join("B" if d is None and i == 0 else str(d) for i, d in enumerate(spec["shape"]))
            + "]"
        )

    return ", ".join(f"{s['name']} {s['dtype']} {shape(s)}" for s in specs)


def _check(args: argparse.Namespace) -> int:
    if args.observations < 1:
        raise RLGearError(f"--observations: expected a positive number, got {args.observations}")
    from rlgear.export import check

    report = check(args.check, checkpoint=args.checkpoint, n=args.observations)
    for problem in report.problems:
        print(f"rlgear: check failed: {problem}")
    status = "ok" if report.ok else "FAILED"
    print(
        f"{report.path}: {status}: {report.actions_equal} of {report.observations} actions agree with "
        f"{report.compared_with} (checkpoint {report.checkpoint}); largest continuous difference "
        f"{report.max_action_diff:.3g}"
    )
    return 0 if report.ok else 1
