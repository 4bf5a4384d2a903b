"""The import graph of cxlsim, cxlsim.fabric and cxlsim.models has no circle and no private import.

The graph is computed from the source with `ast`, not by importing it, so an
import inside a function (or under `if TYPE_CHECKING:`, or a literal
`importlib.import_module("cxlsim....")`) is an edge like any other: a circle
broken only by a late import is still a circle.

Module names follow setup.py's package_dir: `cxlsim/x.py` is `cxlsim.x`,
`fabric/x.py` is `cxlsim.fabric.x`, `models/a/x.py` is `cxlsim.models.a.x`.
The Cython modules (`.pyx`) are nodes too; their Python-level imports (not their
`cimport`s) are read with a regular expression, since `ast` cannot parse Cython.
An edge goes to the module that an import statement names: `import a.b`,
`from a import b` (the submodule `a.b` when it exists, else the package `a`)
and `from . import b` (relative names resolved against the importer).

A private name is one that starts with `_` and is not a dunder. Importing one
from another module (`from m import _x`), or reading one off an imported module
(`import m; m._x`), is a private import. A private submodule (such as the
compiled `cxlsim.emulator._kernels`) may be imported by modules of its own
package only.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"cxlsim": ROOT / "cxlsim", "cxlsim.fabric": ROOT / "fabric", "cxlsim.models": ROOT / "models"}
PROJECT = tuple(SOURCE_DIRS)


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def where(self) -> str:
        return str(self.path.relative_to(ROOT))


def discover() -> dict[str, Module]:
    """Every .py module of the three source trees, by its importable name."""
    modules: dict[str, Module] = {}
    for package, folder in SOURCE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join([package, *parts])
            modules[name] = Module(name, path, is_package)
    # Compiled extensions (.pyx) are importable modules too.
    for path in sorted((ROOT / "cxlsim").rglob("*.pyx")):
        parts = list(path.relative_to(ROOT / "cxlsim").with_suffix("").parts)
        name = ".".join(["cxlsim", *parts])
        modules.setdefault(name, Module(name, path, False))
    return modules


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def in_project(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PROJECT)


def parent_package(module: Module) -> str:
    return module.name if module.is_package else module.name.rpartition(".")[0]


def resolve_relative(module: Module, level: int, target: str | None) -> str:
    base = parent_package(module).split(".")
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


@dataclass(frozen=True)
class PrivateUse:
    module: Module
    line: int
    what: str


class Scanner(ast.NodeVisitor):
    """Collects one module's project imports (edges) and private uses, at every nesting depth."""

    def __init__(self, module: Module, modules: dict[str, Module]):
        self.module = module
        self.modules = modules
        self.edges: list[Edge] = []
        self.private: list[PrivateUse] = []
        self.module_aliases: dict[str, str] = {}  # local name -> project module it is bound to

    def edge(self, target: str, line: int) -> None:
        if in_project(target) and target != self.module.name:
            self.edges.append(Edge(self.module.name, target, line))

    def check_private_module(self, target: str, line: int) -> None:
        """A private component of a module path, used from outside that component's package."""
        parts = target.split(".")
        for i, part in enumerate(parts):
            if is_private(part):
                owner = ".".join(parts[:i])
                mine = parent_package(self.module)
                if not (mine == owner or mine.startswith(owner + ".")):
                    self.private.append(PrivateUse(self.module, line, f"module {target}"))
                return

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not in_project(alias.name):
                continue
            self.edge(alias.name, node.lineno)
            self.check_private_module(alias.name, node.lineno)
            if alias.asname:
                self.module_aliases[alias.asname] = alias.name
            # `import a.b.c` binds `a`; attribute chains are resolved in visit_Attribute.
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = resolve_relative(self.module, node.level, node.module) if node.level else (node.module or "")
        if in_project(source):
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if alias.name != "*" and submodule in self.modules:
                    self.edge(submodule, node.lineno)
                    self.check_private_module(submodule, node.lineno)
                    self.module_aliases[alias.asname or alias.name] = submodule
                else:
                    self.edge(source, node.lineno)
                    self.check_private_module(source, node.lineno)
                    if is_private(alias.name):
                        self.private.append(PrivateUse(self.module, node.lineno, f"{source}.{alias.name}"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and in_project(first.value):
                self.edge(first.value, node.lineno)
                self.check_private_module(first.value, node.lineno)
        self.generic_visit(node)

    def dotted(self, node: ast.expr) -> str | None:
        """`a.b.c` as a string when it is a plain chain of names, else None."""
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            head = self.dotted(node.value)
            return f"{head}.{node.attr}" if head else None
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_private(node.attr):
            chain = self.dotted(node.value)
            if chain:
                head, _, rest = chain.partition(".")
                target = self.module_aliases.get(head)
                if target is None and in_project(chain):
                    target, rest = chain, ""
                if target is not None:
                    full = f"{target}.{rest}" if rest else target
                    if full in self.modules and full != self.module.name:
                        self.private.append(PrivateUse(self.module, node.lineno, f"{full}.{node.attr}"))
        self.generic_visit(node)


CYTHON_IMPORT = re.compile(r"^[ \t]*(from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)",
                           re.MULTILINE)


def cython_imports(text: str) -> ast.Module:
    """The Python-level imports of a .pyx file (not its `cimport`s) as an ast, each on its own line."""
    lines = [""] * (text.count("\n") + 1)
    for match in CYTHON_IMPORT.finditer(text):
        statement = " ".join(match.group(1).split()).split("#")[0]
        if "cimport" not in statement:
            lines[text.count("\n", 0, match.start())] = statement
    return ast.parse("\n".join(lines))


def scan() -> tuple[dict[str, Module], list[Edge], list[PrivateUse]]:
    modules = discover()
    edges: list[Edge] = []
    private: list[PrivateUse] = []
    for module in modules.values():
        text = module.path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(module.path)) if module.path.suffix == ".py" else cython_imports(text)
        scanner = Scanner(module, modules)
        scanner.visit(tree)
        edges += scanner.edges
        private += scanner.private
    return modules, edges, private


def graph() -> tuple[dict[str, Module], nx.DiGraph]:
    modules, edges, _ = scan()
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for e in edges:
        target = e.target
        # `import cxlsim.x.y` of a name that is not a module file (an attribute path) points at its module.
        while target not in modules and "." in target:
            target = target.rpartition(".")[0]
        if target == e.source or target not in modules:
            continue
        if g.has_edge(e.source, target):
            g.edges[e.source, target]["lines"].append(e.line)
        else:
            g.add_edge(e.source, target, lines=[e.line])
    return modules, g


def describe_cycle(modules: dict[str, Module], g: nx.DiGraph, cycle: list[str]) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        lines = ",".join(str(n) for n in sorted(set(g.edges[a, b]["lines"])))
        steps.append(f"{a} ({modules[a].where}:{lines})")
    return " -> ".join(steps) + f" -> {cycle[0]}"


def test_the_scanner_sees_the_package():
    modules, g = graph()
    assert "cxlsim.simulate" in modules and "cxlsim.fabric.network" in modules
    assert "cxlsim.models.collectives.base" in modules and "cxlsim.emulator._kernels" in modules
    assert g.number_of_edges() > len(modules)  # the graph is not empty: a broken scanner would pass vacuously


def test_no_import_circles():
    modules, g = graph()
    cycles = sorted(nx.simple_cycles(g), key=lambda c: (len(c), c))
    lines = []
    for cycle in cycles[:60]:
        start = cycle.index(min(cycle))
        lines.append(describe_cycle(modules, g, cycle[start:] + cycle[:start]))
    if len(cycles) > 60:
        lines.append(f"... and {len(cycles) - 60} more")
    assert not cycles, f"{len(cycles)} import circle(s) (module (file:line of its import) -> ...):\n" + "\n".join(lines)


def test_no_private_names_across_modules():
    _, _, private = scan()
    found = sorted({f"{p.module.where}:{p.line}: {p.module.name} uses {p.what}" for p in private})
    assert not found, f"{len(found)} private import(s) across modules:\n" + "\n".join(found)


# The checks themselves, on small synthetic packages, so that the test above cannot pass by seeing nothing.

def _scan_source(name: str, source: str, modules: dict[str, Module], is_package: bool = False) -> Scanner:
    module = Module(name, ROOT / "cxlsim" / "x.py", is_package)
    scanner = Scanner(module, {**modules, name: module})
    scanner.visit(ast.parse(source))
    return scanner


def test_scanner_counts_late_relative_and_module_imports():
    known = {n: Module(n, ROOT / "cxlsim" / "x.py", False)
             for n in ("cxlsim.models.collectives.rooted", "cxlsim.models.collectives.base", "cxlsim.units")}
    source = (
        "import os\n"
        "from . import rooted\n"
        "def f():\n"
        "    from ..collectives.base import lookup\n"
        "    import cxlsim.units as u\n"
        "    return u._secret\n"
        "from cxlsim.models.collectives.rooted import _helper\n"
    )
    s = _scan_source("cxlsim.models.collectives.allgather", source, known)
    assert {e.target for e in s.edges} == {"cxlsim.models.collectives.rooted", "cxlsim.models.collectives.base",
                                          "cxlsim.units"}
    assert sorted(p.what for p in s.private) == ["cxlsim.models.collectives.rooted._helper", "cxlsim.units._secret"]


def test_cython_imports_are_read_without_their_cimports():
    text = ("from libc.stdint cimport uint64_t\n"
            "from cpython.buffer cimport (PyObject_GetBuffer,\n    PyBUF_WRITABLE)\n"
            "import numpy as np\n"
            "from cxlsim.errors import (InputError,\n    RunError)  # why\n"
            "cdef int x = 1\n")
    tree = cython_imports(text)
    assert [(n.lineno, ast.unparse(n)) for n in tree.body] == [
        (4, "import numpy as np"), (5, "from cxlsim.errors import InputError, RunError")]


def test_private_submodule_is_allowed_inside_its_package_only():
    known = {"cxlsim.emulator._kernels": Module("cxlsim.emulator._kernels", ROOT / "k.pyx", False)}
    inside = _scan_source("cxlsim.emulator.bench", "from cxlsim.emulator import _kernels\n", known)
    outside = _scan_source("cxlsim.simulate", "from cxlsim.emulator._kernels import PoolKernel\n", known)
    assert not inside.private
    assert [p.what for p in outside.private] == ["module cxlsim.emulator._kernels"]
