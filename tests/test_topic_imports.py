"""The import rule of qalib/topics (its __init__ docstring): an experiment module may import its own topic module,
never the reverse; no module there imports an experiment module, or another topic's private (_-prefixed) names."""

import ast
from pathlib import Path

import pytest

from qalib.catalog import CATALOG

TOPICS = Path(__file__).resolve().parent.parent / "qalib" / "topics"
EXPERIMENTS = {entry.experiment for entry in CATALOG}
OWN_PAIR = {m: {entry.topic, entry.experiment} for entry in CATALOG for m in (entry.topic, entry.experiment)}


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
        if imported in EXPERIMENTS:
            what = f"{name} from " if name else ""
            breaks.append(f"{module} imports {what}the experiment module {imported}")
        elif imported not in OWN_PAIR[module] and name is not None and name.startswith("_"):
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
