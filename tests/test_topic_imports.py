"""The import rule of qalib/topics (its __init__ docstring): an experiment module may import its own topic module,
never the reverse; a demos module may import its own topic and experiment modules, and nothing imports a demos
module; no module there imports another topic's experiment module, or another topic's private (_-prefixed) names.
Only the demos modules import ipywidgets."""

import ast
from pathlib import Path

import pytest

from qalib.notebook.catalog import CATALOG

TOPICS = Path(__file__).resolve().parent.parent / "qalib" / "topics"
EXPERIMENTS = {entry.experiment for entry in CATALOG}
DEMOS = {entry.demos for entry in CATALOG}
OWN = {m: {entry.topic, entry.experiment, entry.demos} for entry in CATALOG
       for m in (entry.topic, entry.experiment, entry.demos)}
OWN_EXPERIMENT = {entry.demos: entry.experiment for entry in CATALOG}


def topic_imports(source: str) -> list[tuple[str, str | None]]:
    """(qalib.topics module, imported name or None) for every import of a topics module, at any depth of the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("qalib.topics.")]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "qalib/topics imports by absolute names"
            if node.module == "qalib.topics":   # from qalib.topics import shared_qk
                found += [(f"qalib.topics.{a.name}", None) for a in node.names]
            elif node.module and node.module.startswith("qalib.topics."):
                found += [(node.module, a.name) for a in node.names]
    return found


def rule_breaks(module: str, source: str) -> list[str]:
    breaks = []
    for imported, name in topic_imports(source):
        what = f"{name} from " if name else ""
        if imported in DEMOS:
            breaks.append(f"{module} imports {what}the demos module {imported}")
        elif imported in EXPERIMENTS and OWN_EXPERIMENT.get(module) != imported:
            breaks.append(f"{module} imports {what}the experiment module {imported}")
        elif imported not in OWN[module] and name is not None and name.startswith("_"):
            breaks.append(f"{module} imports {name} from {imported}, another topic's private name")
    return breaks


@pytest.mark.parametrize("path", sorted(p for p in TOPICS.glob("*.py") if p.stem != "__init__"), ids=lambda p: p.stem)
def test_topic_modules_keep_the_import_rule(path):
    assert rule_breaks(f"qalib.topics.{path.stem}", path.read_text()) == []


def test_the_check_sees_each_kind_of_break():
    src = ("from qalib.topics.multi_head_experiment import HeadsResult\n"
           "def f():\n    from qalib.topics.block_parts import _band\n"
           "import qalib.topics.shared_qk_experiment\n"
           "from qalib.topics import random_walk_experiment as E\n"
           "from qalib.topics.multi_head import _int_at_least\n")
    assert sorted(rule_breaks("qalib.topics.multi_head", src)) == [
        "qalib.topics.multi_head imports HeadsResult from the experiment module qalib.topics.multi_head_experiment",
        "qalib.topics.multi_head imports _band from qalib.topics.block_parts, another topic's private name",
        "qalib.topics.multi_head imports the experiment module qalib.topics.random_walk_experiment",
        "qalib.topics.multi_head imports the experiment module qalib.topics.shared_qk_experiment",
    ]
    assert rule_breaks("qalib.topics.multi_head_experiment", "from qalib.topics.multi_head import _x\n") == []
    own = "from qalib.topics.multi_head_experiment import _small_result\nfrom qalib.topics.multi_head import _y\n"
    assert rule_breaks("qalib.topics.multi_head_demos", own) == []
    assert sorted(rule_breaks("qalib.topics.multi_head_demos", "from qalib.topics.decoding_experiment import f\n"
                                                               "from qalib.topics.decoding_demos import g\n")) == [
        "qalib.topics.multi_head_demos imports f from the experiment module qalib.topics.decoding_experiment",
        "qalib.topics.multi_head_demos imports g from the demos module qalib.topics.decoding_demos",
    ]
    assert rule_breaks("qalib.topics.multi_head_experiment", "import qalib.topics.multi_head_demos\n") == [
        "qalib.topics.multi_head_experiment imports the demos module qalib.topics.multi_head_demos"]


def widget_imports(source: str) -> list[str]:
    """The ipywidgets and qalib.notebook.widgets imports of a file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) else [])
        found += [n for n in names if n and (n.split(".")[0] == "ipywidgets" or n == "qalib.notebook.widgets")]
    return found


@pytest.mark.parametrize("path", sorted(p for p in TOPICS.glob("*.py") if p.stem != "__init__"), ids=lambda p: p.stem)
def test_only_the_demos_modules_import_the_widget_shell(path):
    """One place per topic builds its demos; its compute and plot code stays importable and testable without
    ipywidgets (test_drawing.py imports every other topic module with ipywidgets blocked)."""
    used = widget_imports(path.read_text())
    if f"qalib.topics.{path.stem}" in DEMOS:
        assert "ipywidgets" in used and "qalib.notebook.widgets" in used
        tree = ast.parse(path.read_text())
        local = [n for f in tree.body if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
                 if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not local, f"{path.name}: imports inside a function; the demos module imports once, at the top"
    else:
        assert used == [], f"{path.name} imports {used}: a demo factory belongs in its topic's _demos module"


def test_every_notebook_has_a_demos_module_whose_demos_build_a_demo():
    import importlib

    for entry in CATALOG:
        module = importlib.import_module(entry.demos)
        assert module.DEMOS and all(callable(f) and f.__module__ == entry.demos for f in module.DEMOS), entry.demos
