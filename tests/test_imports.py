"""The package's import graph: no cycle among modules or subpackages, and no arrow pointing up the
declared layering (imports for type checkers alone, under `if TYPE_CHECKING:`, run never and are left
out; function-level imports count). `python tests/test_imports.py` prints the figures docs/measurements.md
quotes: cycles, upward arrows, the longest function and the largest file."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top; a module may import its own layer and the ones below it. Each entry is a module or a
# subpackage of finmbs ("finmbs" alone is the package's own __init__). Written down once more in
# docs/engine.md ("Layers").
LAYERS: list[set[str]] = [
    {"finmbs", "finmbs.errors", "finmbs.records", "finmbs.config", "finmbs.resources", "finmbs.ngrams", "finmbs.deps"},
    {"finmbs.llm", "finmbs.verify", "finmbs.executors", "finmbs.ingest", "finmbs.reward", "finmbs.seeds"},
    {"finmbs.mbs"},  # the engine: the paper's stages, MBS and the direct baseline
    {"finmbs.runs", "finmbs.testing"},  # the run layer: run folder, run loop, metrics, the run loader
    {"finmbs.export", "finmbs.report", "finmbs.evaluate", "finmbs.mine", "finmbs.convert"},
    {"finmbs.commands"},
    {"finmbs.cli"},
]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """finmbs module name -> its file."""
    files = {}
    for path in (root / "finmbs").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """finmbs module -> the finmbs modules it imports."""
    files = module_files(root)
    graph = {}
    for module, path in files.items():
        deps = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else (
                    [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                    else []
                )
            )
            for name in names:
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + "."):  # a package's own init aside
                    deps.add(name)
        graph[module] = deps
    return graph


def unit(module: str) -> str:
    """The layered unit a module belongs to: its top-level subpackage or module under finmbs."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Subpackage (top-level unit) -> the units it imports."""
    units: dict[str, set[str]] = {}
    for module, deps in graph.items():
        units.setdefault(unit(module), set()).update(unit(d) for d in deps if unit(d) != unit(module))
    return units


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int | None:
    for level, names in enumerate(LAYERS):
        if unit(module) in names:
            return level
    return None


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    arrows = []
    for module, deps in graph.items():
        for dep in deps:
            low, high = layer_of(module), layer_of(dep)
            if low is not None and high is not None and high > low:
                arrows.append((module, dep))
    return sorted(arrows)


def longest_function(root: Path = ROOT) -> tuple[int, str]:
    """(lines, module:function) of the longest function under finmbs/."""
    best = (0, "")
    for module, path in module_files(root).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                best = max(best, (node.end_lineno - node.lineno + 1, f"{module}:{node.name}"))  # type: ignore[operator]
    return best


def largest_file(root: Path = ROOT) -> tuple[int, str]:
    """(lines, path) of the largest Python file under finmbs/."""
    files = module_files(root).values()
    return max((len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(root))) for p in files)


def figures(root: Path = ROOT) -> dict[str, object]:
    graph = import_graph(root)
    return {
        "modules": len(graph),
        "module cycles": len(cycles(graph)),
        "subpackage cycles": len(cycles(package_graph(graph))),
        "upward arrows": len(upward_arrows(graph)),
        "longest function": longest_function(root),
        "largest file": largest_file(root),
    }


def test_every_unit_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_no_module_or_subpackage_cycle():
    graph = import_graph()
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == []


def test_no_arrow_points_up_the_layers():
    assert upward_arrows(import_graph()) == []


def test_executors_know_nothing_of_the_engine():
    executors = {m: d for m, d in import_graph().items() if m.startswith("finmbs.executors")}
    assert executors and not any(d.startswith(("finmbs.mbs", "finmbs.runs")) for ds in executors.values() for d in ds)


def test_the_checks_see_what_they_look_for():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert upward_arrows({"finmbs.mbs.pipeline": {"finmbs.runs.grow"}}) == [("finmbs.mbs.pipeline", "finmbs.runs.grow")]
    assert package_graph({"finmbs.mbs.a": {"finmbs.runs.b"}, "finmbs.runs.b": {"finmbs.mbs.c"}}) == {
        "finmbs.mbs": {"finmbs.runs"},
        "finmbs.runs": {"finmbs.mbs"},
    }


if __name__ == "__main__":
    import sys

    where = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    for name, value in figures(where).items():
        print(f"{name}: {value}")
    graph = import_graph(where)
    for cycle in cycles(package_graph(graph)):
        print("subpackage cycle:", " -> ".join(cycle))
    for importer, imported in upward_arrows(graph):
        print("upward:", importer, "->", imported)
