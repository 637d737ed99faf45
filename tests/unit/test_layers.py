"""The house as docs/design.md draws it: layers import only downwards, and nothing imports in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "lakesink"

# A module may import modules of its own layer and of the layers listed.
ALLOWED = {
    "errors": set(),
    "storage": {"errors"},
    "filters": {"errors"},
    "options": {"errors", "storage"},
    "protocol": {"errors", "storage"},
    "paimon": {"errors", "storage", "options", "filters", "protocol"},
    "jdbc": {"errors", "storage", "options", "protocol"},
    "spark": {"errors", "storage", "options", "filters", "protocol", "paimon", "jdbc", "_java"},
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
