"""``rlgear new algorithm|env|scheduler|hook|exploration NAME``: a pip-installable plugin package to start from.

The package ``rlgear-NAME`` (import name ``rlgear_NAME``) registers NAME in the
kind's entry-point group, holds a small working implementation written against
rlgear's public API, a test that runs ``rlgear.testing.assert_plugin_ok`` on it,
an example config where one makes sense, and a README saying how to install,
test and run it.

Templates are the files under ``rlgear/cli/templates/<kind>/`` ending ``.tmpl``,
rendered with :class:`string.Template` (``$name``, ``$package``, ``$dist``,
``$cls``, ``$rlgear_version``; ``$$`` is a literal ``$``). In their paths,
``__package__`` becomes the import name and ``__name__`` the plugin's name.
"""

from __future__ import annotations

import argparse
import keyword
import string
from dataclasses import dataclass
from pathlib import Path

import rlgear
from rlgear.errors import RLGearError

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: kind -> (entry-point group, one line for the help)
KINDS = {
    "algorithm": (
        "rlgear.algorithms",
        "a Trainer: policy gradient with a value baseline that trains CartPole",
    ),
    "env": ("rlgear.envs", "an EnvAdapter: a tiny numpy env emitting TimeSteps"),
    "scheduler": ("rlgear.schedulers", "a TrialScheduler: the median stopping rule"),
    "hook": ("rlgear.hooks", "@rlgear.hookimpl functions: a custom metric from on_episode_end"),
    "exploration": ("rlgear.exploration", "an Exploration: a count-based bonus on hashed observations"),
}


class ScaffoldError(RLGearError):
    """``rlgear new`` was given a name or a folder it cannot use."""


@dataclass(frozen=True)
class Scaffold:
    """What ``rlgear new`` wrote."""

    kind: str
    name: str
    directory: Path
    files: list[Path]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``rlgear new``'s command line."""
    new = sub.add_parser(
        "new",
        help="create a plugin package to start from: rlgear new algorithm|env|scheduler|hook|exploration NAME",
        description="Create the pip-installable package rlgear-NAME (import name rlgear_NAME) holding a "
        "working plugin of that kind, its tests and a README. "
        + "".join(f" {kind}: {what}." for kind, (_, what) in KINDS.items()),
    )
    new.add_argument(
        "kind", choices=list(KINDS), metavar="KIND", help="algorithm, env, scheduler, hook or exploration"
    )
    new.add_argument(
        "name", metavar="NAME", help="the plugin's name (a Python identifier): what configs write"
    )
    new.add_argument(
        "--dir",
        metavar="DIR",
        help="the package folder to create (default: ./rlgear-NAME); must be new or empty",
    )


def cmd_new(args: argparse.Namespace) -> int:
    scaffold = create(args.kind, args.name, args.dir)
    shown = _relative(scaffold.directory, Path.cwd())
    shown = shown if Path(shown).is_absolute() else f"./{shown}"
    print(f"created {shown} ({scaffold.kind} '{scaffold.name}', package rlgear-{scaffold.name}):")
    for path in scaffold.files:
        print(f"  {_relative(path, scaffold.directory)}")
    extras = "[torch,test]" if scaffold.kind == "algorithm" else "[test]"
    print("next:")
    print(f'  pip install -e "{shown}{extras}"   # registers it (again after changing the entry point)')
    print(f"  rlgear plugins --check {scaffold.name}")
    print(f"  pytest {shown}")
    return 0


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base)) or "."
    except ValueError:
        return str(path)


def check_name(name: str) -> None:
    """Refuse a name that can't be an entry point, a distribution suffix and a module name at once."""
    if not name.isidentifier() or keyword.iskeyword(name):
        hint = name.replace("-", "_").replace(" ", "_").replace(".", "_")
        suggestion = f"; e.g. '{hint}'" if hint.isidentifier() and not keyword.iskeyword(hint) else ""
        raise ScaffoldError(
            f"plugin name '{name}': expected a Python identifier (letters, digits and underscores, not "
            f"starting with a digit, not a keyword): it becomes the module rlgear_{name}{suggestion}"
        )
    if not name.isascii():
        raise ScaffoldError(f"plugin name '{name}': use ASCII letters, digits and underscores only")


def _check_not_taken(kind: str, name: str) -> None:
    """A name another installed package registers would clash in every config that uses it."""
    from rlgear.discovery import registry

    infos = registry.available_hooks() if kind == "hook" else registry.available(kind)
    own = {f"rlgear-{name}", f"rlgear_{name}"}
    taken = sorted({i.package for i in infos if i.name == name and i.package.lower() not in own})
    if taken:
        raise ScaffoldError(
            f"{kind} '{name}' is already registered by {', '.join(taken)} (group {KINDS[kind][0]}); "
            "pick another name"
        )


def class_name(name: str) -> str:
    """``my_algo`` -> ``MyAlgo`` (the prefix of the generated classes)."""
    out = "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
    return out if out.isidentifier() else f"Plugin{out}"


def create(kind: str, name: str, directory: str | Path | None = None) -> Scaffold:
    """Write the package for plugin ``name`` of ``kind`` into ``directory`` (default ``./rlgear-NAME``)."""
    if kind not in KINDS:
        raise ScaffoldError(f"unknown plugin kind '{kind}'; rlgear new makes: {', '.join(KINDS)}")
    check_name(name)
    _check_not_taken(kind, name)
    target = Path(directory) if directory is not None else Path.cwd() / f"rlgear-{name}"
    target = target.resolve()
    if target.exists() and not target.is_dir():
        raise ScaffoldError(f"--dir {target}: exists and is not a folder")
    if target.is_dir() and any(target.iterdir()):
        raise ScaffoldError(
            f"--dir {target}: the folder exists and is not empty; rlgear new never overwrites files "
            "(pick another --dir, or remove the folder)"
        )
    values = {
        "name": name,
        "package": f"rlgear_{name}",
        "dist": f"rlgear-{name}",
        "cls": class_name(name),
        "rlgear_version": rlgear.__version__,
    }
    rendered = render(kind, values)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for relative, text in rendered.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return Scaffold(kind, name, target, written)


def render(kind: str, values: dict[str, str]) -> dict[str, str]:
    """``{relative output path: text}`` for every template of ``kind``, rendered with ``values``."""
    root = TEMPLATES / kind
    templates = sorted(root.rglob("*.tmpl"))
    if not templates:
        raise ScaffoldError(f"no templates for '{kind}' in {root} (a broken rlgear install?)")
    out = {}
    for template in templates:
        parts = template.relative_to(root).with_suffix("").parts
        path = Path(
            *(p.replace("__package__", values["package"]).replace("__name__", values["name"]) for p in parts)
        )
        try:
            out[path.as_posix()] = string.Template(template.read_text(encoding="utf-8")).substitute(values)
        except (KeyError, ValueError) as err:  # a template bug, not the user's
            raise RuntimeError(f"template {template}: {type(err).__name__}: {err}") from err
    return out
