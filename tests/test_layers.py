"""The package's layers, read from the source with ``ast`` (nothing is imported):

- **No import cycle.** Among the modules of archzoo/, actors/, learners/, replay/ and
  paramserver/, the imports that run when a module is loaded form no cycle.
- **Lower layers do not reach up.** No chain of such imports leads from the components
  (actors/, learners/, replay/, paramserver/), the run harness (archzoo/harness/), the
  topologies or the transport (archzoo/topology/, archzoo/comm/) to archzoo.architectures
  (the registry or any architecture module) or to what starts a run (the CLI, the API,
  archzoo.resolve, the launcher, the worker); nor from the components to the harness.

An import "runs when the module is loaded" when it is at module level: in the module's body,
in a module-level ``if``/``try``/``with`` or in a class body, but not inside a function and
not under ``if TYPE_CHECKING:``. A script's ``if __name__ == "__main__":`` block counts: run
as ``python -m``, a cycle through it loads the module a second time.

``import a.b.c`` and ``from a.b import c`` load a, a.b and a.b.c (when c is a submodule),
so the graph has an edge to each of them, except to the packages that hold the importing
module itself (a submodule importing its own package is the usual idiom: the package is
already being loaded). Relative imports are resolved.

The same two checks hold with the imports inside functions counted as well (but for the
package's own lazy facade, archzoo/__init__.py): a lazy import does not hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("archzoo", "actors", "learners", "replay", "paramserver")  # folders
# the components' folders install as archzoo's subpackages (pyproject.toml's package-dir)
NAMES = {"actors": "archzoo.actors", "learners": "archzoo.learners",
         "replay": "archzoo.replay", "paramserver": "archzoo.paramserver"}
COMPONENTS = tuple(NAMES.values())
UPPER = "archzoo.architectures"
ENTRY = ("archzoo.cli", "archzoo.api", "archzoo.resolve", "archzoo.launcher", "archzoo.worker")
# (the modules under these, must not reach any module under those)
RULES = (
    ((*COMPONENTS, "archzoo.harness", "archzoo.topology", "archzoo.comm"), (UPPER, *ENTRY)),
    (COMPONENTS, ("archzoo.harness",)),
)
# archzoo/__init__.py: archzoo.run and archzoo.load_policy import the API on first use. Every
# module of the package loads archzoo/__init__.py, and none calls them, so their imports
# are no path out of any module.
FACADE = {"archzoo"}


def module_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES,
                 names: dict[str, str] | None = None) -> dict[str, Path]:
    """Every module of the folders ``packages`` by dotted name (a package by its own name),
    a folder named by ``names`` (default NAMES for the repository's own) under that name."""
    names = NAMES if names is None and root == ROOT else (names or {})
    found: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            parts[0] = names.get(parts[0], parts[0])
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt], lazy: bool = False):
    """The import statements among ``body`` that run when the module is loaded; with
    ``lazy``, those inside functions too."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if lazy:
                yield from _imports(node.body, lazy)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _imports(node.body, lazy)
            yield from _imports(node.orelse, lazy)
        elif isinstance(node, ast.ClassDef):
            yield from _imports(node.body, lazy)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, ()) or ():
                    inner = child.body if isinstance(child, (ast.ExceptHandler, ast.match_case)) \
                        else [child]
                    yield from _imports(inner, lazy)


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_graph(files: dict[str, Path] | None = None,
                 lazy: bool = False) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import that loads it}, among ``files``
    (by default every module of PACKAGES); with ``lazy``, the imports inside functions too,
    except in FACADE."""
    files = module_files() if files is None else files
    graph: dict[str, dict[str, int]] = {}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        targets: list[tuple[str, int]] = []
        for node in _imports(tree.body, lazy and mod not in FACADE):
            if isinstance(node, ast.Import):
                targets += [(alias.name, node.lineno) for alias in node.names]
                continue
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets.append((source, node.lineno))
            targets += [(f"{source}.{alias.name}", node.lineno) for alias in node.names
                        if f"{source}.{alias.name}" in files]
        own = set(_with_parents(mod))
        edges: dict[str, int] = {}
        for target, line in targets:
            for name in _with_parents(target):
                if name in files and name not in own:
                    edges.setdefault(name, line)
        graph[mod] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles: in each strongly connected component (Tarjan), the shortest cycle
    through each of its modules, each as a closed path ``[a, b, ..., a]`` from its least
    module, without repeats."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, {}):
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles: list[list[str]] = []
    for comp in components:
        members = set(comp)
        for start in sorted(comp):  # the shortest cycle through each member (breadth first)
            prev: dict[str, str] = {}
            frontier, cycle = [start], None
            while frontier and cycle is None:
                nxt = []
                for v in frontier:
                    for w in sorted(graph[v]):
                        if w == start and cycle is None:
                            chain = [v]
                            while chain[-1] != start:
                                chain.append(prev[chain[-1]])
                            cycle = [*reversed(chain), start]
                        elif w in members and w != start and w not in prev:
                            prev[w] = v
                            nxt.append(w)
                frontier = nxt
            assert cycle is not None
            ring = cycle[:-1]
            first = ring.index(min(ring))
            cycle = [*ring[first:], *ring[:first], ring[first]]
            if cycle not in cycles:
                cycles.append(cycle)
    return cycles


def _under(mod: str, packages: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in packages)


def path_to(graph: dict[str, dict[str, int]], start: str, goal: str | tuple[str, ...]
            ) -> list[str] | None:
    """The shortest import chain from ``start`` to a module under ``goal`` (a package or
    module, or several), or None."""
    goals = (goal,) if isinstance(goal, str) else goal
    prev: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, {})):
                if w in prev:
                    continue
                prev[w] = v
                if _under(w, goals):
                    chain = [w]
                    while prev[chain[-1]] is not None:
                        chain.append(prev[chain[-1]])
                    return chain[::-1]
                nxt.append(w)
        frontier = nxt
    return None


def _show(graph: dict[str, dict[str, int]], chain: list[str]) -> str:
    files = module_files()
    steps = [f"{a} ({files[a].relative_to(ROOT)}:{graph[a][b]})"
             for a, b in zip(chain, chain[1:], strict=False)]
    return " -> ".join([*steps, chain[-1]])


def test_the_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert len(graph) > 80
    # from a submodule: its parent packages too; from a package, a submodule by name
    assert {"archzoo.comm", "archzoo.comm.factory", "archzoo.harness.placement"} <= \
        set(graph["archzoo.harness.protocol"])
    assert "archzoo.architectures.impala" not in graph["archzoo.architectures"]  # lazy
    assert "archzoo.harness" in graph["archzoo.architectures.impala"]
    # a component's folder is read under its installed name
    assert "archzoo.actors.unroll" in graph["archzoo.learners.vtrace_learner"]


def test_one_namespace_archzoo() -> None:
    """Every folder's modules install under ``archzoo`` (pyproject.toml lists each package,
    the components through package-dir), and no module, test or benchmark imports a
    component by a top-level name: ``import actors`` works only from a checkout."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(ROOT).parts)
               for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py")}
    assert set(conf["packages"]) == {NAMES.get(f.split(".")[0], f.split(".")[0]) +
                                     f[len(f.split(".")[0]):] for f in folders}
    assert conf["package-dir"] == {v: k for k, v in NAMES.items()}
    bad = []
    for folder in (*PACKAGES, "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and \
                    not node.level else []
                bad += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in mods
                        if m.split(".")[0] in NAMES]
    assert not bad, "top-level component imports:\n" + "\n".join(bad)


def test_a_checkout_imports_its_own_components(tmp_path: Path) -> None:
    """A copy of the sources (another worktree, on PYTHONPATH or as the current directory)
    imports archzoo.actors etc. from its own folders, not from the checkout pip installed
    (archzoo/__init__.py's finder)."""
    import shutil
    import subprocess
    import sys

    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import archzoo, archzoo.actors.base, archzoo.learners.vtrace, archzoo.replay, "
            "archzoo.paramserver; print(archzoo.__file__); "
            "print(archzoo.actors.base.__file__); print(archzoo.learners.vtrace.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    files = out.stdout.split()
    assert len(files) == 3 and all(f.startswith(str(tmp_path)) for f in files), files


def test_the_graph_of_a_made_up_package(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "import pkg.sub.b\nfrom typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from pkg import c\n"
                    "def f():\n    from pkg import d\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "from ..c import X\nfrom . import e\n"
                        "class K:\n    from pkg import d\n",
        "pkg/sub/e.py": "try:\n    from pkg.d import Y\nexcept ImportError:\n    pass\n",
        "pkg/c.py": "X = 1\nif __name__ == '__main__':\n    from pkg import a\n",
        "pkg/d.py": "Y = 2\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(module_files(tmp_path, ("pkg",)))
    assert import_graph(module_files(tmp_path, ("pkg",)), lazy=True)["pkg.a"] == \
        {"pkg.sub": 1, "pkg.sub.b": 1, "pkg.d": 6}
    assert graph == {
        "pkg": {"pkg.a": 1},
        "pkg.a": {"pkg.sub": 1, "pkg.sub.b": 1},  # not under TYPE_CHECKING, not in f
        "pkg.sub": {},
        "pkg.sub.b": {"pkg.c": 1, "pkg.sub.e": 2, "pkg.d": 4},  # relative; a class body
        "pkg.sub.e": {"pkg.d": 2},
        "pkg.c": {"pkg.a": 3},  # a script's imports count
        "pkg.d": {},
    }
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_show(graph, c) for c in cycles)


def upward_paths(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every chain that breaks a rule of RULES (the shortest from each module)."""
    chains = [path_to(graph, mod, above) for below, above in RULES
              for mod in sorted(graph) if _under(mod, below)]
    return [c for c in chains if c]


def test_lower_layers_do_not_import_the_architectures_or_the_entry_points() -> None:
    graph = import_graph()
    chains = upward_paths(graph)
    assert not chains, "imports from a lower layer up:\n" + \
        "\n".join(_show(graph, c) for c in chains)


def test_lazy_imports_close_no_cycle_and_reach_no_architecture_either() -> None:
    """Counting the imports inside functions as well (they run when the function is first
    called), there is still no cycle and no path up into the architectures: no function
    imports lazily only to dodge one."""
    graph = import_graph(lazy=True)
    assert graph != import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_show(graph, c) for c in cycles)
    chains = upward_paths(graph)
    assert not chains, "imports from a lower layer up:\n" + \
        "\n".join(_show(graph, c) for c in chains)


def test_the_checks_catch_a_cycle_and_an_upward_path() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []
    up = {"archzoo.actors.x": {"archzoo.y": 1}, "archzoo.y": {"archzoo.architectures.z": 1},
          "archzoo.architectures.z": {}}
    chain = ["archzoo.actors.x", "archzoo.y", "archzoo.architectures.z"]
    assert path_to(up, "archzoo.actors.x", UPPER) == chain
    assert upward_paths(up) == [chain]
    assert upward_paths({"archzoo.learners.x": {"archzoo.harness.y": 1},
                         "archzoo.harness.y": {}}) == [["archzoo.learners.x", "archzoo.harness.y"]]
