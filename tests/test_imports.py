"""Imports point one way: no module of the engine, the processors or the web UI imports, however indirectly, one
that imports it back. Every import counts, the ones inside functions and under TYPE_CHECKING too (read from the
source)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "engine", "processors", "webui")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports (`from a import b` counts as a.b when that is a module, else a)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {known(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found |= {known(f"{base}.{alias.name}") or known(base) for alias in node.names}
    # A module's own package (its __init__) is not a dependency of interest unless it imports the module back,
    # which the package's own entry catches.
    return {m for m in found if m is not None and m != name and not name.startswith(f"{m}.")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_engine_the_processors_and_the_ui_have_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_imports_neither_the_ui_nor_the_processors_but_for_ray_workers() -> None:
    modules = _modules()
    engine = {name for name in modules if name.startswith("engine")}
    outward = {
        (name, dep) for name in engine for dep in _imports(name, modules[name], modules) if not dep.startswith("engine")
    }
    # The one exception: a Ray worker (engine.serve.cluster) builds the job's chain from the registry itself, since only
    # the raw job travels to it.
    assert outward == {("engine.serve.cluster", "processors")}
    sources = (path.read_text(encoding="utf-8") for name, path in modules.items() if name in engine)
    assert not any("import webui" in text or "from webui" in text for text in sources)


def test_the_front_ends_reach_the_engine_through_its_service() -> None:
    """The UI calls the engine service and the settings it presents, not the model, face and runtime internals the
    service hides (the runtime, the fetcher, the catalogue's files, the face stage and analysers)."""
    modules = _modules()
    internals = ("engine.models.runtime", "engine.models.fetch", "engine.models.manifest", "engine.run.face_stage",
                 "engine.faces.buffalo", "engine.faces.embedded")  # fmt: skip
    reaching = {
        (name, dep)
        for name in modules
        if name.startswith("webui")
        for dep in _imports(name, modules[name], modules)
        if dep.startswith(internals)
    }
    assert reaching == set()


# The engine's floors, lowest first: a module imports from its own floor or the ones below, never from above.
# docs/ARCHITECTURE.md §1 draws the same plan (test_the_architecture_lists_the_engine_s_packages below).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("engine.core",),
    ("engine.backends", "engine.models", "engine.media", "engine.faces"),
    ("engine.job",),
    ("engine.provenance",),
    ("engine.run",),
    ("engine.serve",),
    ("engine.live",),
    ("engine.tools",),
)


def _floor(module: str) -> int | None:
    for level, packages in enumerate(FLOORS):
        if any(module == p or module.startswith(f"{p}.") for p in packages):
            return level
    return None


def test_the_engine_has_no_loose_module_and_every_package_has_a_floor() -> None:
    modules = _modules()
    engine = sorted(name for name in modules if name.startswith("engine.") and name != "engine")
    assert [name for name in engine if name.count(".") == 1 and modules[name].name != "__init__.py"] == []
    assert [name for name in engine if _floor(name) is None] == []


def test_the_engine_s_imports_go_down_its_floors() -> None:
    modules = _modules()
    upward = sorted(
        (name, dep)
        for name in modules
        if name.startswith("engine.")
        for dep in _imports(name, modules[name], modules)
        if dep.startswith("engine.") and (_floor(dep) or 0) > (_floor(name) or 0)
    )
    assert upward == []


def test_the_architecture_lists_the_engine_s_packages() -> None:
    """ARCHITECTURE.md's floor plan names every package of engine/, in the floors' order, and nothing else."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    plan = text.split("<!-- floors -->")[1].split("<!-- /floors -->")[0]
    heads = [line for line in plan.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    listed = [line.split()[0].rstrip("/") for line in heads]
    tree = sorted(p.name for p in (ROOT / "engine").iterdir() if (p / "__init__.py").exists())
    assert sorted(listed) == tree
    assert listed == [p.removeprefix("engine.") for floor in FLOORS for p in floor]
