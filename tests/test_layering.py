"""The house rules, enforced: no module imports from a layer above it, and no import cycles.

The layers follow the flow of one record (docs/architecture.md): a record is read by a Source,
checked against the sample contract, shaped by formats/templates/tokenizer/media, turned into a
sample by the Recipe, measured (lengths), cached, planned, collated and loaded; diagnosis, the
demo, integrations and the CLI sit on top. Every import counts, also one inside a function (a
lazy import is still a dependency) and one under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "chute"

# Bottom to top. A module may import from its own layer and the layers below it.
LAYERS: list[tuple[str, ...]] = [
    # how a parameter is written in messages: below errors, so errors (and with it the bottom
    # layer) reaches nothing of chute above it and errors, world, _internal form no loop
    ("_spelling",),
    ("errors", "world", "remote_options", "_internal"),  # what every layer may use
    ("sources",),  # records with provenance
    ("sample",),  # the sample contract: conversation, checks, rejects, error budget
    ("tokenize",),  # tokenizer backends
    ("formats", "templates", "media"),  # record shapes, chat templates, media rules
    ("recipe",),  # record -> sample, and passes that run a recipe over a source
    ("lengths",),  # per-sample lengths, computed once
    ("cache",),  # the offline token cache
    ("plan",),  # pure planners over lengths
    ("mixture",),  # several datasets: definitions, per-dataset recipes and caches, splits
    ("collate",),  # samples -> batch tensors
    ("loader",),  # plans executed in DataLoader workers
    ("stats", "testing"),  # padding statistics; resume/exact-once helpers for users' tests
    ("bench", "integrations", "demo"),  # diagnosis, Trainer glue, the demo
    ("cli",),  # the command line
    # the public facade, deprecated aliases, and `python -m chute` (the command line's)
    ("__init__", "__main__", "demo_data", "collate_packed"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(target: str) -> str:
    """The deepest existing module of a dotted ``chute...`` name (a name may be an attribute)."""
    parts = target.split(".")
    while parts:
        candidate = SRC.joinpath(*parts)
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    raise AssertionError(f"cannot resolve {target}")


def import_graph() -> dict[str, set[str]]:
    """module -> the chute modules it imports (any import statement, at any depth)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        is_package = path.name == "__init__.py"
        package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base_name = ".".join(base + ([node.module] if node.module else []))
                else:
                    base_name = node.module or ""
                targets = [f"{base_name}.{alias.name}" for alias in node.names]
            for target in targets:
                if target == "chute" or target.startswith("chute."):
                    resolved = _resolve(target)
                    if resolved != module:
                        graph[module].add(resolved)
        graph.setdefault(module, set())
    return dict(graph)


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    if top not in RANK:
        pytest.fail(
            f"{module} is in no layer: add {top!r} to LAYERS in tests/test_layering.py and to "
            "docs/architecture.md"
        )
    return RANK[top]


def test_no_module_imports_from_a_layer_above_it():
    upward = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative enough here)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_package_root_holds_only_entry_points():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == [
        "__init__.py",  # the public API
        "__main__.py",  # python -m chute: the chute program
        "_spelling.py",  # parameter names in each front end's syntax, used by errors.py
        "collate_packed.py",  # deprecated alias of chute.collate.packed (docs showed it)
        "demo_data.py",  # deprecated alias of chute.demo.data (docs showed it)
        "errors.py",  # every error chute raises, imported by every layer
        "remote_options.py",  # RemoteOptions: public, and read by _internal/remote.py
        "testing.py",  # helpers for users' own loader tests, like numpy.testing
        "world.py",  # World: where a process is, the value every layer takes
    ]


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The rule can fail: a planted import from the CLI into sources is reported."""
    fake = tmp_path / "chute"
    for path in PACKAGE.rglob("*.py"):
        target = fake / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    (fake / "sources" / "planted.py").write_text("from chute.cli import main\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(
        AssertionError, match=r"chute.sources.planted \(layer 2\) imports chute.cli"
    ):
        test_no_module_imports_from_a_layer_above_it()


def test_errors_imports_nothing_of_chute_but_the_spelling_of_parameters():
    assert import_graph()["chute.errors"] <= {"chute._spelling"}
    assert not import_graph()["chute._spelling"]
