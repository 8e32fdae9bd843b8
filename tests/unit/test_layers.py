"""The layers of Kray's code, read from its own imports (issue 34).

`protocol/` is at the bottom, `actors/` above it, `cluster/` on top: a layer imports only from
itself and the layers below. And no file reaches itself again through a chain of imports (an
import circle), also not through an import made inside a function, which Python does not see at
load time but a reader does.

The graph is built with `ast` from every non-test module of the three packages; every `import`
statement counts, wherever it stands (module level, inside functions, under `if TYPE_CHECKING`).
An edge goes to the imported module's file (a package's `__init__.py` when the name is a
package or a name defined in it); the parent packages a dotted import also loads are left out.

When this test was written the graph had 2 circles (22 files through cluster/composition.py, and
3 in the gateway's security package) and 15 upward imports; they were allow-listed below and removed
step by step. The lists are empty now and stay so: a new circle or upward import is broken, not
listed. (A listed one that is gone fails the test too, so that a list only ever shrinks.)
Run `python tests/unit/test_layers.py` for the figures.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "actors", "cluster")
LAYER = {"protocol": 0, "actors": 1, "cluster": 2}

# Import circles, each the set of files of one strongly connected component of the graph.
ALLOWED_CIRCLES: list[set[str]] = [
]

# Imports that point up a layer: (importing file, imported file).
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    """Every non-test module: dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if any(part.startswith("test") for part in rel.parts) or "__pycache__" in rel.parts:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names a module's import statements refer to, with `from a import b` giving
    `a.b` (resolved to `a` later when `b` is not a module, so `from a import b` of a module `b`
    is not an import of `a/__init__.py`)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.extend(prefix if alias.name == "*" else f"{prefix}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """File -> the files it imports (paths relative to the repository, with '/')."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        rel = path.relative_to(ROOT).as_posix()
        targets = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in _imported_names(tree, module, path.name == "__init__.py"):
            # the longest prefix of the name that is one of our modules
            parts = name.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts:
                target = modules[".".join(parts)].relative_to(ROOT).as_posix()
                if target != rel:
                    targets.add(target)
        graph[rel] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one file (Tarjan, iteratively)."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        result.append(component)
    return result


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports from a lower layer of a higher one (actors -> cluster, protocol -> actors/cluster)."""
    return {(source, target) for source, targets in graph.items() for target in targets
            if LAYER[target.split("/")[0]] > LAYER[source.split("/")[0]]}


def figures(graph: dict[str, set[str]]) -> str:
    found = circles(graph)
    return (f"{len(graph)} files, {sum(len(t) for t in graph.values())} file-to-file imports, "
            f"{len(found)} circles ({sum(len(c) for c in found)} files), "
            f"{len(upward_imports(graph))} upward imports")


def test_the_graph_sees_deferred_and_relative_imports():
    graph = import_graph()
    assert len(graph) > 100
    # a module-level import and one made inside a function both count
    tree = ast.parse("import protocol.codec\ndef f():\n    from protocol import errors\n")
    names = _imported_names(tree, "actors.x", False)
    assert "protocol.codec" in names and "protocol.errors" in names
    tree = ast.parse("from .core import X\nfrom .. import y\n")
    assert _imported_names(tree, "actors.a.b", False) == ["actors.a.core.X", "actors.y"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_new_import_circle():
    found = circles(import_graph())
    new = [sorted(c) for c in found if not any(c == allowed for allowed in ALLOWED_CIRCLES)]
    gone = [sorted(c) for c in ALLOWED_CIRCLES if c not in found]
    assert not new, f"import circles not in the allow-list (break them; do not list them): {new}"
    assert not gone, f"allow-listed circles that changed or are gone: shrink ALLOWED_CIRCLES: {gone}"


def test_layers_point_down():
    found = upward_imports(import_graph())
    assert not sorted(found - ALLOWED_UPWARD), (
        f"imports up a layer (protocol < actors < cluster): {sorted(found - ALLOWED_UPWARD)}")
    assert not sorted(ALLOWED_UPWARD - found), (
        f"allow-listed upward imports that are gone: remove them from ALLOWED_UPWARD: {sorted(ALLOWED_UPWARD - found)}")


if __name__ == "__main__":  # print the figures and the current violations
    g = import_graph()
    print(figures(g))
    for c in sorted(circles(g), key=len, reverse=True):
        print(f"circle of {len(c)}: {sorted(c)}")
    for edge in sorted(upward_imports(g)):
        print("upward:", edge)
