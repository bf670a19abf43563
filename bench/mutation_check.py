"""Does the fast test suite catch known-bad edits? A mutation check over a list of planted bugs.

Each mutation in ``bench/mutations.py`` is one plausible bug (a sign, a
``min`` for a ``max``, an option ignored, a column dropped): a text edit of
one source file that must apply exactly once. For each, this script copies
the repository to a temporary folder, applies the edit there (the working
tree is never touched), and runs the fast tests (``-m "not slow"``) against
the copy with ``-x``: the test files that name the mutation's target run
first, so a caught mutation stops within seconds, and an uncaught one runs
the whole fast suite before it is reported as missed.

The copy imports as ``rlgear`` through ``PYTHONPATH`` (a folder whose
``rlgear`` entry links to the copy's ``core/``, which in turn links
``plugins``), ahead of the editable install's finder, so entry points found
in the installed metadata load the mutated modules. The unmutated copy runs
first: if it fails, nothing after it would mean anything, and the script
stops.

Usage:
  python bench/mutation_check.py                 # every mutation, the whole fast suite
  python bench/mutation_check.py --list
  python bench/mutation_check.py --only ppo_surrogate_without_min_torch dqn_drops_importance_weights
  python bench/mutation_check.py --targeted      # only the mutations' own test files (quicker, weaker)
  python bench/mutation_check.py --out bench/results/mutation_check.json

Exit status: 0 when every mutation was caught, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _run import source_revision
from mutations import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    """Files git tracks plus untracked ones it does not ignore (the working tree as it is)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line and (ROOT / line).is_file()]


def make_copy(dest: Path) -> Path:
    """Copy the working tree to ``dest/repo`` and lay out ``dest/site/rlgear`` for PYTHONPATH."""
    repo = dest / "repo"
    for name in tracked_files():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    (repo / "core" / "plugins").symlink_to(repo / "plugins", target_is_directory=True)
    site = dest / "site"
    site.mkdir()
    (site / "rlgear").symlink_to(repo / "core", target_is_directory=True)
    return repo


def apply(mutation: Mutation, repo: Path) -> None:
    path = repo / mutation.path
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise SystemExit(
            f"mutation {mutation.name}: the text to replace occurs {count} times in {mutation.path} "
            "(expected once); bench/mutations.py is out of date with the source"
        )
    path.write_text(text.replace(mutation.old, mutation.new))


def revert(mutation: Mutation, repo: Path) -> None:
    path = repo / mutation.path
    path.write_text(path.read_text().replace(mutation.new, mutation.old, 1))


def run_tests(repo: Path, site: Path, first: tuple[str, ...], targeted: bool) -> tuple[bool, str, float]:
    """Run the fast tests on the copy; returns (passed, the first failing test or '', seconds)."""
    first = tuple(path for path in first if (repo / path).exists())
    paths = [*first] if targeted else [*first, "tests"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(repo)]),
        "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd = [sys.executable, "-m", "pytest", *paths, "-m", "not slow", "-x", "-q", "-p", "no:cacheprovider"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    failed = ""
    for line in proc.stdout.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            failed = line.split(" ", 1)[1].split(" - ")[0]
            break
    if proc.returncode not in (0, 1):  # 2-5: interrupted, internal or usage error, nothing collected
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SystemExit(f"pytest exited with {proc.returncode}:\n{tail}")
    return proc.returncode == 0, failed, seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutations")
    parser.add_argument(
        "--targeted", action="store_true", help="run only each mutation's own test files, not the whole suite"
    )
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    mutations = MUTATIONS
    if args.only:
        known = {m.name for m in MUTATIONS}
        unknown = sorted(set(args.only) - known)
        if unknown:
            parser.error(f"unknown mutation(s) {unknown}; --list shows them")
        mutations = [m for m in MUTATIONS if m.name in args.only]
    if args.list:
        for m in mutations:
            print(f"{m.name:45s} {m.path}: {m.description}")
        return 0

    rows = []
    with tempfile.TemporaryDirectory(prefix="rlgear-mutation-") as tmp:
        repo = make_copy(Path(tmp))
        site = Path(tmp) / "site"
        for m in mutations:  # every edit must apply before anything runs
            apply(m, repo)
            revert(m, repo)
        all_first = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
        ok, failed, seconds = run_tests(repo, site, all_first, args.targeted)
        print(f"unmutated copy: {'passed' if ok else 'FAILED ' + failed} ({seconds:.0f} s)", flush=True)
        if not ok:
            print("the suite fails without any mutation; fix that first", file=sys.stderr)
            return 2
        for m in mutations:
            apply(m, repo)
            try:
                passed, failed, seconds = run_tests(repo, site, m.tests, args.targeted)
            finally:
                revert(m, repo)
            caught = not passed
            rows.append(
                {"mutation": m.name, "file": m.path, "description": m.description, "caught": caught,
                 "caught_by": failed, "seconds": round(seconds, 1)}
            )  # fmt: skip
            print(
                f"{'caught' if caught else 'MISSED':6s} {m.name:45s} {failed or '-'} ({seconds:.0f} s)",
                flush=True,
            )

    print()
    print("| mutation | file | caught by | s |")
    print("|---|---|---|---|")
    for row in rows:
        by = row["caught_by"] if row["caught"] else "**missed**"
        print(
            f"| {row['mutation']} ({row['description']}) | `{row['file']}` | `{by}` | {row['seconds']:.0f} |"
        )
    missed = [row["mutation"] for row in rows if not row["caught"]]
    print(
        f"\n{len(rows) - len(missed)} of {len(rows)} mutations caught"
        + (f"; missed: {missed}" if missed else "")
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "source": source_revision(),
            "mode": "targeted" if args.targeted else "fast suite",
            "mutations": rows,
        }
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
