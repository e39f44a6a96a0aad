"""Counts that say how tidy the house is (issue 29): run before and after a refactor.

    python benchmarks/house_counts.py            # a table
    python benchmarks/house_counts.py --json
    python benchmarks/house_counts.py --root /tmp/old   # another checkout (its src/chute)

What it counts, over ``src/chute``:

- ``getattr_recipe_probes``: ``getattr(<something named *recipe*>, "<attr>", ...)`` calls: behaviour
  decided by probing a recipe instead of reading its contract.
- ``mixture_is_none``: ``mixture is None`` / ``mixture is not None`` tests (one dataset and many
  taking separate paths), with the files they sit in.
- ``selection_is_none``: ``selection is None`` tests: where one dataset read alone (a mixture of
  one, ``MixturePlanner(inner)`` without a selection) still differs from a mixture. Since issue 29
  point 3 they sit in the mixture planner and its binding, not in the Loader's paths.
- ``option_declarations``: for a few recipe options, the places in ``recipe/``, ``cache/config.py``
  and ``cli/_options.py`` that declare them (a keyword of
  ``Recipe.__init__``, a field of ``RecipeConfig``, an entry of its type table, a CLI flag, a field
  of the CLI's ``RecipeArgs``, a line of its ``keywords()``).
- ``option_sites``: for the same options, the sites one edits to add such an option: a keyword
  of ``Recipe.__init__``, an entry of its docstring's ``Args:``, a field of a class in
  ``recipe/config.py`` or ``recipe/options.py`` (``RecipeConfig``, ``RecipeOptions``), a CLI
  ``_Flag(...)``. Read from the syntax tree, so plumbing (a helper's parameter) is not counted.
- ``upward_imports``: imports of ``chute._internal`` from ``chute/errors.py`` (the one module
  below ``_internal``).
- ``init_logic_lines``: non-blank, non-import lines of ``__init__.py`` files of ``lengths``,
  ``formats`` and ``tokenize`` beyond their docstring and ``__all__``.
- ``root_test_files``: ``tests/test_*.py`` at the root of ``tests/``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "chute"
OPTIONS = ("max_length", "audio_token", "stride", "max_turns", "min_length")  # min_length: new
# where a recipe option meets its users: the Recipe, its config section, the command line
SURFACES = ("recipe/", "cache/config", "cli/_options")


def _files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def getattr_recipe_probes() -> list[str]:
    out = []
    for path in _files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and "recipe" in ast.unparse(node.args[0]).lower()
                and isinstance(node.args[1], ast.Constant)
            ):
                rel = path.relative_to(SRC)
                out.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    return out


def mixture_is_none() -> list[str]:
    pattern = re.compile(r"\bmixture is (not )?None")
    return [
        f"{path.relative_to(SRC)}:{n}"
        for path in _files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def selection_is_none() -> list[str]:
    pattern = re.compile(r"\bselection is (not )?None")
    return [
        f"{path.relative_to(SRC)}:{n}"
        for path in _files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def option_declarations() -> dict[str, list[str]]:
    texts = {
        p.relative_to(SRC).as_posix(): p.read_text()
        for p in _files()
        if p.relative_to(SRC).as_posix().startswith(SURFACES)
    }
    out: dict[str, list[str]] = {}
    for option in OPTIONS:
        places = []
        for rel, text in texts.items():
            lines = text.splitlines()
            for n, line in enumerate(lines, 1):
                s = line.strip()
                declares = (
                    re.match(rf"{option}\s*:\s*[^=]+(=|$)", s)  # a keyword or a field
                    or re.match(rf'"{option}"\s*:', s)  # a table entry ("max_length": ...)
                    or re.match(rf'_Flag\(\s*"{option}"', s)  # a CLI flag on one line
                    or (s == f'"{option}",' and "_Flag(" in lines[n - 2])  # on several
                )
                if declares:
                    places.append(f"{rel}:{n}")
        out[option] = places
    return out


def option_sites() -> dict[str, list[str]]:
    recipe = ast.parse((SRC / "recipe" / "recipe.py").read_text())
    init = next(
        node
        for node in ast.walk(recipe)
        if isinstance(node, ast.FunctionDef)
        and node.name == "__init__"
        and any(isinstance(c, ast.ClassDef) and c.name == "Recipe" for c in recipe.body)
    )
    keywords = {a.arg for a in [*init.args.args, *init.args.kwonlyargs]}
    recipe_class = next(
        c for c in recipe.body if isinstance(c, ast.ClassDef) and c.name == "Recipe"
    )
    doc = (ast.get_docstring(recipe_class) or "").partition("Args:")[2]
    documented = set(re.findall(r"^    (\w+)(?: / (\w+))?:", doc, re.M))
    documented_names = {n for pair in documented for n in pair if n}
    fields: dict[str, set[str]] = {}
    for rel in ("recipe/config.py", "recipe/options.py"):
        if not (SRC / rel).exists():
            continue
        for node in ast.walk(ast.parse((SRC / rel).read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields.setdefault(item.target.id, set()).add(f"{node.name} field")
    flags = set(re.findall(r'_Flag\(\s*"(\w+)"', (SRC / "cli" / "_options.py").read_text()))
    out: dict[str, list[str]] = {}
    for option in OPTIONS:
        sites = []
        if option in keywords:
            sites.append("Recipe.__init__ keyword")
        if option in documented_names:
            sites.append("Recipe docstring Args")
        sites += sorted(fields.get(option, ()))
        if option in flags:
            sites.append("CLI _Flag")
        out[option] = sites
    return out


def upward_imports() -> list[str]:
    text = (SRC / "errors.py").read_text()
    return [line.strip() for line in text.splitlines() if "chute._internal" in line]


def init_logic_lines() -> dict[str, int]:
    out = {}
    for package in ("lengths", "formats", "tokenize"):
        tree = ast.parse((SRC / package / "__init__.py").read_text())
        logic = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        ]
        out[package] = sum((n.end_lineno or n.lineno) - n.lineno + 1 for n in logic)
    return out


def root_test_files() -> list[str]:
    return sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every place")
    parser.add_argument("--root", type=Path, help="count another checkout (default: this one)")
    args = parser.parse_args()
    if args.root is not None:
        global ROOT, SRC
        ROOT, SRC = args.root.resolve(), args.root.resolve() / "src" / "chute"
    probes, branches, sole = getattr_recipe_probes(), mixture_is_none(), selection_is_none()
    declared, sites = option_declarations(), option_sites()
    report = {
        "getattr_recipe_probes": len(probes),
        "mixture_is_none": len(branches),
        "mixture_is_none_files": len({b.split(":")[0] for b in branches}),
        "selection_is_none": len(sole),
        "selection_is_none_files": len({b.split(":")[0] for b in sole}),
        "option_declarations": {k: len(v) for k, v in declared.items()},
        "option_sites": {k: len(v) for k, v in sites.items()},
        "upward_imports": len(upward_imports()),
        "init_logic_lines": init_logic_lines(),
        "root_test_files": len(root_test_files()),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        print(f"{key:24} {value}")
    if args.verbose:
        print("\n".join(["", *probes, "", *branches, "", *sole]))
        for option, places in declared.items():
            print(f"\n{option}: " + ", ".join(places))
            print("  sites to edit: " + ", ".join(sites[option]))


if __name__ == "__main__":
    main()
