"""The coherence modes are spelled as strings in one place: `cxlsim.coherence.Coherence`.

A string literal "hw" or "flush" may appear only in cxlsim/coherence.py, in
the input-parsing code (cxlsim/config.py, and the arguments of argparse
`add_argument(...)` calls, e.g. `choices=`), and nowhere else in cxlsim/,
fabric/ or models/. Everything else compares with and passes the enum.

.py files are read with `ast`; the Cython kernels (.pyx), which `ast` cannot
parse, with the Python tokenizer, which lexes their string literals the same way.
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = [ROOT / "cxlsim", ROOT / "fabric", ROOT / "models"]
MODE_WORDS = {"hw", "flush"}
ALLOWED_FILES = {ROOT / "cxlsim" / "coherence.py", ROOT / "cxlsim" / "config.py"}


def literals_outside_argparse(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, value) of every mode-word string constant that is not inside an `add_argument(...)` call."""
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODE_WORDS:
            found.append((node.lineno, node.value))
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return found


def literals_in_cython(text: str) -> list[tuple[int, str]]:
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, str) and value in MODE_WORDS:
                found.append((tok.start[0], value))
    return found


def offending_lines() -> list[str]:
    out = []
    for folder in SOURCE_DIRS:
        for path in sorted(folder.rglob("*")):
            if path in ALLOWED_FILES or "__pycache__" in path.parts or path.suffix not in (".py", ".pyx"):
                continue
            text = path.read_text(encoding="utf-8")
            hits = (literals_outside_argparse(ast.parse(text, filename=str(path))) if path.suffix == ".py"
                    else literals_in_cython(text))
            out += [f"{path.relative_to(ROOT)}:{line}: {value!r}" for line, value in hits]
    return out


def test_no_coherence_mode_literals_outside_the_enum_and_input_parsing():
    found = offending_lines()
    assert not found, (f"{len(found)} \"hw\"/\"flush\" literal(s) outside cxlsim/coherence.py and input parsing; "
                       "use cxlsim.coherence.Coherence:\n" + "\n".join(found))


def test_the_check_sees_literals_and_spares_argparse():
    source = (
        "def f(p, mode):\n"
        "    p.add_argument('--coherence', choices=['hw', 'flush'], default='hw')\n"
        "    return mode == 'flush'\n"
        "DOC = 'flushes the hw lines'\n"
    )
    assert literals_outside_argparse(ast.parse(source)) == [(3, "flush")]
    assert literals_in_cython("cdef str m = 'hw'\nif m == \"flush\":\n    pass\n") == [(1, "hw"), (2, "flush")]
