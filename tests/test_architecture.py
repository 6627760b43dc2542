"""The package's shape: data flows one way through folders named for their stage.

inputs -> costmodel -> training, serving -> search -> outputs -> cli.  Every import counts,
including those inside functions, so a circle cannot hide in a deferred import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
# Rank of each stage: a module may import only from its own stage or an earlier one.
STAGES = {"errors": 0, "inputs": 1, "costmodel": 2, "training": 3, "serving": 3, "search": 4, "outputs": 5, "cli": 6}
# Training and serving are peers: neither imports the other.
PEERS = {("training", "serving"), ("serving", "training")}
MAX_TOP_LEVEL_MODULES = 8


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The autotune modules ``name`` imports (resolving relative imports and ``from pkg import module``)."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "autotune")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "autotune":
                base = node.module
            else:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert cycles(graph()) == []


def test_data_flows_one_way_through_the_stages():
    edges = graph()
    wrong = []
    for module, deps in edges.items():
        s = stage(module)
        if s not in STAGES:
            continue
        for dep in deps:
            d = stage(dep)
            if d not in STAGES:
                continue
            if STAGES[d] > STAGES[s] or (s, d) in PEERS:
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def test_every_module_lives_in_a_known_stage():
    top = [n for n in modules() if n.count(".") == 1 and n.split(".")[1] not in {*STAGES, "__main__"}]
    assert top == []
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(STAGES), packages - set(STAGES)


def test_top_level_stays_small():
    top = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_command_modules_import_only_the_app_module_of_the_cli():
    edges = graph()
    wrong = [f"{m} -> {d}" for m, ds in edges.items() if stage(m) == "cli"
             for d in ds if stage(d) == "cli" and d not in ("autotune.cli.app",) and m != "autotune.cli"
             and not (m == "autotune.cli.__main__" and d == "autotune.cli")]
    assert wrong == []


@pytest.mark.parametrize("module", sorted(modules()))
def test_only_the_search_adapter_imports_optuna(module):
    path = modules()[module]
    tree = ast.parse(path.read_text())
    uses = any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "optuna" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "optuna" and not n.level)
        for n in ast.walk(tree)
    )
    if uses:
        assert module.startswith("autotune.search.optuna_"), module


def test_the_checker_finds_a_circle():
    # The checker itself must be able to fail.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
