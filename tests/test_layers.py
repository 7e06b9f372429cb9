"""The layers of ARCHITECTURE.md, checked on the import statements: the model core never imports drawing,
widgets, topics or tools; live drawing imports no other qalib module. (The rule between topic modules is in
test_topic_imports.py; that no notebook imports qalib.tools is in test_project_files.py.)"""

import ast
from pathlib import Path

import pytest

QALIB = Path(__file__).resolve().parent.parent / "qalib"
CORE = ["config", "validate", "attention", "positions", "norms", "model", "decoder", "kv_cache", "generate", "gpt2",
        "pretrained", "data", "train", "train_batched", "presets",
        "probes", "parallel", "device", "seeding", "claims", "progress", "fits", "stats"]
ABOVE_CORE = ("qalib.drawing", "qalib.widgets", "qalib.topics", "qalib.tools", "qalib.catalog", "qalib.testing",
              "qalib.style", "qalib.quiz", "qalib.interview")
ALLOWED = {name: ABOVE_CORE for name in CORE} | {"drawing": ("qalib",)}


def qalib_imports(path: Path) -> set[str]:
    """Every qalib module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "qalib":
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "qalib"}
    return found


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_a_lower_layer_does_not_import_a_higher_one(module):
    forbidden = ALLOWED[module]
    bad = [m for m in qalib_imports(QALIB / f"{module}.py") if m == "qalib" or m.startswith(tuple(f + "." for f in forbidden)) or m in forbidden]
    assert not bad, f"qalib/{module}.py imports {bad}; see ARCHITECTURE.md for what each layer may import"


def test_every_core_module_is_named():
    """A new module at the top of qalib/ is placed in a layer on purpose (here and in ARCHITECTURE.md)."""
    placed = set(CORE) | {"drawing", "widgets", "testing", "style", "quiz", "interview", "catalog", "__init__"}
    assert {p.stem for p in QALIB.glob("*.py")} == placed
