"""The house as docs/design.md draws it: layers import only downwards, and nothing imports in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "lakesink"

# A module may import modules of its own layer and of the layers listed.
ALLOWED = {
    "errors": set(),
    "dbapi": set(),
    "storage": {"errors"},
    "filters": {"errors"},
    "options": {"errors", "storage"},
    "protocol": {"errors", "storage"},
    "paimon": {"errors", "dbapi", "storage", "options", "filters", "protocol"},
    "jdbc": {"errors", "dbapi", "storage", "options", "protocol"},
    "spark": {"errors", "dbapi", "storage", "options", "filters", "protocol", "paimon", "jdbc", "_java"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """lakesink modules `path` imports, anywhere in it (function-local imports too)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("lakesink"):
                # `from pkg import module` depends on the module, `from module import name` on the module
                for alias in node.names:
                    out.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("lakesink"))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in _imports(path, set(modules)) if m in modules and m != name}
    return graph


def _layer(module: str) -> str:
    if module in ("lakesink", "lakesink.jdbc"):  # the public API: lakesink.*, lakesink.jdbc.*
        return "__init__"
    return module.split(".")[1]


def test_layers_import_only_downwards():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        if layer not in ALLOWED:
            continue  # the top: __init__, cli, demo
        for other in imported:
            if _layer(other) != layer and _layer(other) not in ALLOWED[layer] and _layer(other) != "__init__":
                wrong.append(f"{module} -> {other}")
            if _layer(other) == "__init__" and layer != "__init__":
                wrong.append(f"{module} -> {other} (the top-level API)")
    assert wrong == []


def test_no_import_circles():
    graph = _graph()
    edges = graph
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif state.get(nxt) is None:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if state.get(node) is None:
            visit(node, [node])
    assert circles == []


DESIGN = Path(__file__).parents[2] / "docs" / "design.md"
LOWER = {"errors", "dbapi", "storage", "options", "filters", "protocol"}  # the shared layers a row may name


def _room(module: str) -> str | None:
    """The package of paimon/ (`commit`, `table`, ...) or the shared layer a module belongs to."""
    parts = module.split(".")
    if parts[1] == "paimon":
        return parts[2] if len(parts) > 2 else None  # lakesink.paimon itself: the connector's API
    return parts[1]


def _design_rooms() -> dict[str, set[str]]:
    """docs/design.md's rows for paimon's packages: package -> the packages and layers it may import."""
    rooms = {}
    for line in DESIGN.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`paimon/") and cells[0].endswith("/`"):
            rooms[cells[0].strip("`").split("/")[1]] = {t.strip() for t in cells[2].split(",")}
    return rooms


def test_each_paimon_package_imports_only_what_the_design_map_lists():
    rooms = _design_rooms()
    packages = {p.name for p in (SRC / "paimon").iterdir() if (p / "__init__.py").exists()}
    assert set(rooms) == packages  # every package of paimon/ has its row, and no row names a package gone
    wrong = []
    for module, imported in _graph().items():
        room = _room(module) if module.startswith("lakesink.paimon.") else None
        if room is None:
            continue
        for other in imported:
            there = _room(other)
            if there is not None and there != room and there not in rooms[room]:
                wrong.append(f"{module} -> {other} ({there} is not in the row of paimon/{room}/)")
    assert wrong == []


def test_commits_never_import_maintenance():
    """Maintenance is a layer over commits (it may import them), never under: anywhere in a module, function-local
    imports too."""
    graph = _graph()
    wrong = [f"{m} -> {o}" for m, imported in graph.items() if m.startswith("lakesink.paimon.commit")
             for o in imported if o.startswith("lakesink.paimon.maintenance")]
    assert wrong == []
    assert "maintenance" not in _design_rooms()["commit"]


def test_the_packages_of_paimon_import_each_other_in_no_circle():
    edges: dict[str, set[str]] = {}
    for module, imported in _graph().items():
        room = _room(module) if module.startswith("lakesink.paimon.") else None
        if room is not None:
            edges.setdefault(room, set()).update(
                r for o in imported if o.startswith("lakesink.paimon.") and (r := _room(o)) not in (None, room))
    order: list[str] = []
    left = dict(edges)
    while left:  # peel off the packages that import none still left: a circle leaves some behind
        free = sorted(r for r, deps in left.items() if not deps & set(left))
        assert free, f"circle among {sorted(left)}"
        order += free
        for r in free:
            del left[r]


def test_the_jdbc_connector_never_imports_the_spark_binding():
    """The Spark binding (spark/jdbc.py, spark/jdbc_datasource.py) imports the connector, never the reverse. Only
    the public functions of `lakesink.jdbc` reach the binding, inside their bodies, as lakesink's own API does."""
    graph = _graph()
    wrong = [f"{m} -> {o}" for m, imported in graph.items() if m.startswith("lakesink.jdbc.")
             for o in imported if o.startswith("lakesink.spark")]
    assert wrong == []
    tree = ast.parse((SRC / "jdbc" / "__init__.py").read_text())
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all("spark" not in (getattr(n, "module", None) or "") and
               all("spark" not in a.name for a in n.names) for n in top_level)
