"""``rlgear plugins --check NAME``: one installed plugin against its contract (:mod:`rlgear.discovery.check`).

Prints one line per check (ok or FAIL, and for a failure its fix), or with
``--json`` the report as JSON only. Exit status 0 when every check passed, 1
when one failed; a name that is unknown or belongs to several kinds (without
``--kind``) is a user error (status 2, one line), as everywhere in the CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from rlgear.discovery import registry

if TYPE_CHECKING:
    from rlgear.discovery.check import CheckReport

# The checker is imported only when --check is given: every other command starts without it.
KINDS = (*registry.GROUPS, "hook")

EXIT_CHECK_FAILED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlgear plugins`` that run the contract checks."""
    parser.add_argument(
        "--check", metavar="NAME",
        help="check one installed plugin against its contract (NAME@PACKAGE picks a package's); exit 1 on failure",
    )  # fmt: skip
    parser.add_argument("--kind", choices=KINDS, help="the plugin's kind, when several kinds have NAME")
    parser.add_argument("--json", action="store_true", help="with --check: print the report as JSON only")
    parser.add_argument(
        "--env-name", metavar="ENV",
        help="with --check on an env adapter: the env to build (default: the adapter's default_env)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", metavar="BACKEND",
        help="with --check on an algorithm: check only this backend (default: every backend it declares)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Check ``args.check``; print the table (or JSON) and return the exit status."""
    # Plugin code may print while it is exercised: with --json, stdout must hold the JSON alone.
    redirect = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with redirect:
        from rlgear.discovery.check import check_plugin

        report = check_plugin(args.check, args.kind, env_name=args.env_name, backend=args.backend)
    if args.json:
        print(report.to_json())
    else:
        print_report(report)
    return 0 if report.ok else EXIT_CHECK_FAILED


def print_report(report: CheckReport) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    title = f"rlgear plugins --check: {report.kind} '{report.name}' ({report.package} {report.version})"
    table = Table(title=escape(title), show_lines=False)
    table.add_column("check")
    table.add_column("result")
    table.add_column("details / fix")
    for finding in report.findings:
        if finding.ok:
            table.add_row(escape(finding.check), "[green]ok[/green]", escape(finding.message))
        else:
            detail = escape(finding.message) + (
                f"\n[bold]fix:[/bold] {escape(finding.fix)}" if finding.fix else ""
            )
            table.add_row(escape(finding.check), "[red]FAIL[/red]", detail)
    console.print(table)
    failed = len(report.failures)
    if failed:
        console.print(f"[red]{failed} of {len(report.findings)} checks failed[/red]", highlight=False)
    else:
        console.print(f"[green]all {len(report.findings)} checks passed[/green]", highlight=False)
