"""Catch the easy regressions of notebooks/REVIEWING.md without executing anything: a ✓ whose measured value is
computed from literals alone, or that compares an expression with itself, cannot fail, so it is no measurement.

This does not try to detect every tautology (that is what the reviewing checklist is for); it catches the shapes
that have crept in before. The measurement count itself is checked on the executed notebooks (test_notebooks.py).
"""

import ast

import nbformat
import pytest

from qalib.tools.nbtools import notebook_paths

PATHS = notebook_paths()
MEASUREMENTS = {"check", "check_close", "check_all"}  # qalib.notebook.claims' measurement calls (identity/quote are not)


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _constant(node: ast.expr) -> bool:
    """Literals and arithmetic on literals only (also math.sqrt(2), math.log(4) and the like): no measured input."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, complex, bool))
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant(node.left) and _constant(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _name(node.func.value) in {"math", "np"}:
        return bool(node.args) and all(_constant(a) for a in node.args) and not node.keywords
    return False


def _same(a: ast.expr, b: ast.expr) -> bool:
    return ast.dump(a) == ast.dump(b)


def tautologies(source: str) -> list[str]:
    """The measurement calls in a cell's source whose shape guarantees they pass, each with the reason."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: not our shapes
        return []
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) in MEASUREMENTS and len(node.args) >= 2):
            continue
        what = ast.unparse(node)[:120]
        kind = _name(node.func)
        if kind == "check_close" and len(node.args) >= 3:
            measured, expected = node.args[1], node.args[2]
            if _constant(measured):
                found.append(f"{what}: the measured value is computed from literals alone")
            elif _same(measured, expected):
                found.append(f"{what}: the measured value is compared with itself")
        if kind == "check":
            holds = node.args[1]
            if _constant(holds):
                found.append(f"{what}: the condition is a literal")
            elif isinstance(holds, ast.Compare) and len(holds.comparators) == 1:
                found += _same_or_literal(what, holds.left, holds.comparators[0])
        if kind in ("check", "check_all"):  # a Condition (above(x, t), between(x, lo, hi)), or several joined by &
            for cond in _conditions(node.args[1]):
                found += _same_or_literal(what, cond.args[0], cond.args[1])
                if _name(cond.func) == "between" and len(cond.args) == 3:
                    found += _same_or_literal(what, cond.args[0], cond.args[2])
    return found


CONDITIONS = {"above", "at_least", "below", "at_most", "between"}  # qalib.notebook.claims' threshold comparisons


def _conditions(node: ast.expr) -> list[ast.Call]:
    """The comparison calls in a condition argument: one, several joined with &, or a list of them."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        return _conditions(node.left) + _conditions(node.right)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [c for e in node.elts for c in _conditions(e)]
    if isinstance(node, ast.ListComp):
        return _conditions(node.elt)
    if isinstance(node, ast.Call) and _name(node.func) in CONDITIONS and len(node.args) >= 2:
        return [node]
    return []


def _same_or_literal(what: str, left: ast.expr, right: ast.expr) -> list[str]:
    if _same(left, right):
        return [f"{what}: both sides of the comparison are the same expression"]
    if _constant(left) and _constant(right):
        return [f"{what}: both sides of the comparison are literals"]
    return []


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_measurement_has_a_tautology_shape(path):
    nb = nbformat.read(path, as_version=4)
    found = [t for cell in nb.cells if cell.cell_type == "code" for t in tautologies(cell.source)]
    assert not found, (f"{path.name}: these ✓ cannot fail; make them qalib.identity(...) or measure something:\n  "
                       + "\n  ".join(found))


@pytest.mark.parametrize("source, reason", [
    ("qalib.check_close('wavelength', 10000 ** (510 / 512), 9646.6)", "literals alone"),
    ("check_close('var', v.var(), v.var(), rtol=1e-3)", "compared with itself"),
    ("qalib.check('x', x == x, x)", "same expression"),
    ("qalib.check('sqrt', math.sqrt(4) == 2, 2)", "both sides"),
    ("check('always', True)", "a literal"),
    ("qalib.check('x', qalib.above(x, x), x)", "same expression"),
    ("qalib.check('x', qalib.below(acc.min(), 2) & qalib.at_least(2, 1), acc)", "both sides"),
    ("qalib.check_all('x', [qalib.between(v, v, 1) for v in vs], vs)", "same expression"),
])
def test_the_shapes_are_caught(source, reason):
    assert any(reason in t for t in tautologies(source)), tautologies(source)


@pytest.mark.parametrize("source", [
    "qalib.check_close('variance', q_dot_k.var(), 32.0, rtol=0.05)",
    "qalib.check('loss falls', final < 0.5 * math.log(4), final)",
    "qalib.identity_close('10000^(510/512)', 10000 ** (510 / 512), 9646.6, rtol=1e-4)",
    "qalib.identity('a == a', a == a)",
    "qalib.check('every seed learns', qalib.above(acc, 0.9) & qalib.between(loss.mean(), 0, 1), acc)",
])
def test_real_measurements_and_declared_identities_pass(source):
    assert tautologies(source) == []
