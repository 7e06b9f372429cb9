"""The import rule of qalib/topics (stated once, in its __init__ docstring): inside a notebook's package, experiment
may import compute, and demos may import compute and experiment; nothing imports demos, and compute imports neither.
No package imports another topic's package; no module imports a `_`-prefixed name from another module. Only demos.py
imports ipywidgets, and no module steps an optimizer itself (qalib.lab.train.fit does)."""

import ast
from pathlib import Path

import pytest

from qalib.notebook.catalog import CATALOG

TOPICS = Path(__file__).resolve().parent.parent / "qalib" / "topics"
MODULES = sorted(p for p in TOPICS.glob("nb*/*.py") if p.stem != "__init__")
# what each module of a package may import from its own package
ALLOWED = {"compute": set(), "experiment": {"compute"}, "demos": {"compute", "experiment"}}


def module_name(path: Path) -> str:
    return f"qalib.topics.{path.parent.name}.{path.stem}"


def imports(source: str) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import at any depth of the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "qalib imports by absolute names"
            found += [(node.module, a.name) for a in node.names]
    return found


def rule_breaks(module: str, source: str) -> list[str]:
    """What in `source`, the text of `module` (qalib.topics.<package>.<kind>), breaks the import rule."""
    package, kind = module.rsplit(".", 1)
    breaks = []
    for imported, name in imports(source):
        what = f"{name} from " if name else ""
        if imported == package and name is not None:   # from qalib.topics.nbNN import compute
            imported, name, what = f"{package}.{name}", None, ""
        if name is not None and name.startswith("_"):
            breaks.append(f"{module} imports {name} from {imported}, a private name")
        if not imported.startswith("qalib.topics."):
            continue
        if not imported.startswith(package + "."):
            breaks.append(f"{module} imports {what}{imported}, another topic's code")
        elif imported.rsplit(".", 1)[1] not in ALLOWED[kind]:
            breaks.append(f"{module} imports {what}{imported}")
    return breaks


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_topic_modules_keep_the_import_rule(path):
    assert rule_breaks(module_name(path), path.read_text()) == []


def test_the_check_sees_each_kind_of_break():
    src = ("from qalib.topics.nb07_multi_head.experiment import HeadsResult\n"
           "def f():\n    from qalib.topics.nb10_residuals_ffn_masks.compute import band\n"
           "import qalib.topics.nb07_multi_head.demos\n"
           "from qalib.topics.nb07_multi_head import experiment as E\n"
           "from qalib.lab.validate import _int_at_least\n")
    assert sorted(rule_breaks("qalib.topics.nb07_multi_head.compute", src)) == [
        "qalib.topics.nb07_multi_head.compute imports HeadsResult from qalib.topics.nb07_multi_head.experiment",
        "qalib.topics.nb07_multi_head.compute imports _int_at_least from qalib.lab.validate, a private name",
        "qalib.topics.nb07_multi_head.compute imports band from qalib.topics.nb10_residuals_ffn_masks.compute, another topic's code",
        "qalib.topics.nb07_multi_head.compute imports qalib.topics.nb07_multi_head.demos",
        "qalib.topics.nb07_multi_head.compute imports qalib.topics.nb07_multi_head.experiment",
    ]
    own = "from qalib.topics.nb07_multi_head.experiment import small_result\nfrom qalib.topics.nb07_multi_head.compute import y\n"
    assert rule_breaks("qalib.topics.nb07_multi_head.demos", own) == []
    assert rule_breaks("qalib.topics.nb07_multi_head.experiment", "from qalib.topics.nb07_multi_head.compute import x\n") == []
    assert rule_breaks("qalib.topics.nb07_multi_head.experiment", "import qalib.topics.nb07_multi_head.demos\n") == [
        "qalib.topics.nb07_multi_head.experiment imports qalib.topics.nb07_multi_head.demos"]
    assert rule_breaks("qalib.topics.nb07_multi_head.demos", "from qalib.lab.train import _fit\n") == [
        "qalib.topics.nb07_multi_head.demos imports _fit from qalib.lab.train, a private name"]


def test_every_topic_notebook_has_its_package():
    """ls qalib/topics: one package per topic notebook, named after it, and nothing else."""
    packages = sorted(p.name for p in TOPICS.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert packages == sorted("nb" + e.file.removesuffix(".ipynb") for e in CATALOG)
    assert sorted(p.name for p in TOPICS.glob("*.py")) == ["__init__.py"]
    for name in packages:
        assert sorted(p.name for p in (TOPICS / name).glob("*.py")) == [
            "__init__.py", "compute.py", "demos.py", "experiment.py"], name


def optimizer_steps(source: str) -> list[int]:
    """Lines that call .step() on anything (an optimizer's or a scheduler's step)."""
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == "step" and not n.args]


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_no_topic_module_steps_an_optimizer(path):
    """Every training run goes through qalib.lab.train.fit (or train_seeds): one loop, one warm-up, one clipping."""
    assert optimizer_steps(path.read_text()) == [], f"{path}: train through qalib.lab.train.fit"


def test_the_step_check_sees_a_step():
    assert optimizer_steps("opt.zero_grad()\nloss.backward()\nopt.step()\nsched.step()\n") == [3, 4]


def widget_imports(source: str) -> list[str]:
    """The ipywidgets and qalib.notebook.widgets imports of a file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) else [])
        found += [n for n in names if n and (n.split(".")[0] == "ipywidgets" or n == "qalib.notebook.widgets")]
    return found


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_only_the_demos_modules_import_the_widget_shell(path):
    """One place per topic builds its demos; its compute and plot code stays importable and testable without
    ipywidgets (test_drawing.py imports every other topic module with ipywidgets blocked)."""
    used = widget_imports(path.read_text())
    if path.stem == "demos":
        assert "ipywidgets" in used and "qalib.notebook.widgets" in used
        tree = ast.parse(path.read_text())
        local = [n for f in tree.body if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
                 if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not local, f"{path.name}: imports inside a function; the demos module imports once, at the top"
    else:
        assert used == [], f"{path.name} imports {used}: a demo factory belongs in its package's demos module"


def test_every_notebook_has_a_demos_module_whose_demos_build_a_demo():
    import importlib

    for entry in CATALOG:
        module = importlib.import_module(entry.demos)
        assert module.DEMOS and all(callable(f) and f.__module__ == entry.demos for f in module.DEMOS), entry.demos
