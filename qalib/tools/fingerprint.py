"""A fingerprint of the code a run executed, so that a stored result can tell when it has gone stale.

    with CallRecorder() as calls:          # records every qalib function that runs in this process
        result = experiment(...)
    prints = fingerprint(calls.functions)  # {"qalib/lab/train.py": sha256, ...}
    stale = changed(prints)                # the files whose executed code differs now ([] when fresh)

Per file, the fingerprint hashes the code that can change a result: the functions that ran, the classes one of whose
methods ran (with their fields and defaults), and the module-level constants that code reads, without comments and
docstrings. What never ran (a plot, a demo, a label) can be added or changed freely. It is computed from tokens, not bytecode or ast.dump,
so it is the same on every Python version.

Why not DVC or a hash of whole files: DVC's stages hash the files a stage names, so every edit of a large module (a
docstring, a plot) would make every result depending on it stale, and the list of files is kept by hand; recording
what actually ran needs no list, and ignores what did not run.
"""

from __future__ import annotations

import ast
import hashlib
import io
import sys
import threading
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
PACKAGE = ROOT / "qalib"


class CallRecorder:
    """Records (file relative to the checkout, qualified name) of every Python function under qalib/ that starts
    running in this thread while active (sys.settrace's call events; no per-line tracing)."""

    def __init__(self) -> None:
        self.functions: set[tuple[str, str]] = set()
        self._prefix = str(PACKAGE) + "/"
        self._codes: set = set()

    def _trace(self, frame, event, arg):
        code = frame.f_code
        if code not in self._codes:
            self._codes.add(code)
            if (code.co_filename.startswith(self._prefix) and code.co_filename != __file__
                    and not code.co_name.startswith("<")):  # not the recorder's own __exit__
                rel = str(Path(code.co_filename).resolve().relative_to(ROOT))
                self.functions.add((rel, code.co_qualname if hasattr(code, "co_qualname") else code.co_name))
        return None  # no line events: a call costs one look-up

    def __enter__(self) -> "CallRecorder":
        self._previous = sys.gettrace()
        sys.settrace(self._trace)
        threading.settrace(self._trace)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self._previous)
        threading.settrace(None)


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The source lines of every docstring in the tree."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _kept_lines(tree: ast.Module, executed: set[str]) -> set[int]:
    """Lines whose code counts: the functions in `executed` (qualified names) with their decorators and signatures,
    the classes with a method that ran (header and class-level statements: dataclass fields and their defaults), and
    the module-level statements that define a name this code reads (constants), and what those read in turn.
    Imports count through the code they bring, which is recorded where it runs. What did not run does not count, so
    adding or editing a plot, a demo, a label or a spec leaves a stored result fresh."""
    keep: set[int] = set()
    read: set[str] = set()   # names the counted code reads

    def count(node: ast.AST, start: int, end: int) -> None:
        keep.update(range(start, end + 1))
        read.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))

    def ran(qual: str) -> bool:
        return qual in executed or any(q.startswith(qual + ".") for q in executed)

    def visit(body, prefix: str) -> None:
        for node in body:
            start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if prefix + node.name in executed:
                    count(node, start, node.end_lineno)
            elif isinstance(node, ast.ClassDef):
                if ran(prefix + node.name):
                    keep.update(range(start, node.body[0].lineno))
                    for d in node.decorator_list + node.bases + node.keywords:
                        read.update(n.id for n in ast.walk(d) if isinstance(n, ast.Name))
                    visit(node.body, prefix + node.name + ".")
            elif prefix and not isinstance(node, (ast.Import, ast.ImportFrom)):
                count(node, node.lineno, node.end_lineno)  # a class-level statement of a class that ran

    visit(tree.body, "")
    # module-level statements that define a name the counted code reads, until nothing new is read
    pending = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                          ast.Import, ast.ImportFrom))]
    changed = True
    while changed:
        changed = False
        for node in list(pending):
            targets = {n.id for t in _targets(node) for n in ast.walk(t) if isinstance(n, ast.Name)}
            if targets & read:
                count(node, node.lineno, node.end_lineno)
                pending.remove(node)
                changed = True
    return keep


def _targets(node: ast.stmt) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def file_fingerprint(path: Path, executed: set[str]) -> str:
    """sha256 of the tokens of the counted lines of `path` (see _kept_lines), comments and docstrings left out."""
    source = path.read_text()
    tree = ast.parse(source)
    keep = _kept_lines(tree, executed) - _docstring_lines(tree)
    h = hashlib.sha256()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.start[0] not in keep or tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                                                    tokenize.NEWLINE, tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        h.update(f"{tok.type}:{tok.string}\n".encode())
    return h.hexdigest()


def fingerprint(functions: set[tuple[str, str]] | list) -> dict[str, dict]:
    """{file: {"functions": [qualified names that ran], "sha256": file_fingerprint}} for every file with a function
    that ran."""
    by_file: dict[str, set[str]] = {}
    for rel, qual in functions:
        by_file.setdefault(rel, set()).add(qual)
    return {rel: {"functions": sorted(quals), "sha256": file_fingerprint(ROOT / rel, quals)}
            for rel, quals in sorted(by_file.items())}


def changed(prints: dict[str, dict]) -> list[str]:
    """The files of a stored fingerprint whose counted code differs now, or that are gone, or whose recorded
    functions no longer exist there."""
    out = []
    for rel, entry in prints.items():
        path = ROOT / rel
        if not path.is_file():
            out.append(f"{rel} (gone)")
            continue
        defined = _qualnames(ast.parse(path.read_text()))
        missing = [q for q in entry["functions"] if q not in defined]
        if missing:
            out.append(f"{rel} (no longer defines {', '.join(missing)})")
        elif file_fingerprint(path, set(entry["functions"])) != entry["sha256"]:
            out.append(f"{rel} (changed: {', '.join(entry['functions'][:6])}{' ...' if len(entry['functions']) > 6 else ''})")
    return out


def _qualnames(tree: ast.Module) -> set[str]:
    names: set[str] = set()

    def visit(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(prefix + node.name)
                visit(node.body, prefix + node.name + ".<locals>.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    return names
