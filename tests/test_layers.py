"""The layers of ARCHITECTURE.md, one per package of qalib/, checked on the import statements (at the top of a
file or inside a function). The rule between topic modules is in test_topic_imports.py; that no notebook imports
qalib.tools is in test_project_files.py; that drawing and every topic module import with ipywidgets blocked is in
test_drawing.py."""

import ast
from pathlib import Path

import pytest

QALIB = Path(__file__).resolve().parent.parent / "qalib"
PACKAGES = ("nn", "lab", "notebook", "practice", "topics", "tools")

# Which qalib packages each package may import, besides its own modules.
MAY_IMPORT = {
    "nn": set(),
    "lab": {"nn"},
    "notebook": {"nn", "lab"},
    "practice": {"nn", "lab"},
    "topics": {"nn", "lab", "notebook"},
    "tools": set(PACKAGES),
}
# Third-party imports a package may not make: the model and the laboratory draw nothing and show no widget.
NO_THIRD_PARTY = {
    "nn": ("matplotlib", "ipywidgets", "IPython"),
    "lab": ("matplotlib", "ipywidgets", "IPython"),
}


def imports(path: Path) -> set[str]:
    """Every module a file imports (absolute imports: the project uses no relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import; write qalib.<package>.<module>"
            found.add(node.module)
            if node.module == "qalib":  # from qalib import x: x may be a package
                found |= {f"qalib.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def package_files(package: str) -> list[Path]:
    return sorted((QALIB / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_layers_below_it(package):
    allowed = MAY_IMPORT[package] | {package}
    bad = {}
    for path in package_files(package):
        for module in imports(path):
            parts = module.split(".")
            if parts[0] == "qalib" and len(parts) > 1 and parts[1] in PACKAGES and parts[1] not in allowed:
                bad.setdefault(str(path.relative_to(QALIB)), []).append(module)
            if parts[0] == "qalib" and len(parts) == 1 and package != "tools":
                bad.setdefault(str(path.relative_to(QALIB)), []).append("qalib (the top level imports every layer)")
    assert not bad, f"imports against ARCHITECTURE.md's layers: {bad}"


@pytest.mark.parametrize("package", sorted(NO_THIRD_PARTY))
def test_the_model_and_the_lab_draw_nothing(package):
    bad = {str(p.relative_to(QALIB)): m for p in package_files(package) for m in imports(p)
           if m.split(".")[0] in NO_THIRD_PARTY[package]}
    assert not bad, f"qalib/{package} imports plotting or widgets: {bad}"


def test_drawing_imports_no_other_qalib_module():
    """A plot helper can be unit-tested and benchmarked without a model or a notebook."""
    bad = [m for m in imports(QALIB / "notebook" / "drawing.py") if m.split(".")[0] == "qalib"]
    assert not bad, f"qalib/notebook/drawing.py imports {bad}"


def test_the_top_of_qalib_holds_only_packages():
    """A new module goes into the package of its layer (here and in ARCHITECTURE.md), not beside them."""
    assert [p.name for p in QALIB.glob("*.py")] == ["__init__.py"]
    assert {p.name for p in QALIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_what_it_is_for_and_what_it_may_import(package):
    doc = ast.get_docstring(ast.parse((QALIB / package / "__init__.py").read_text())) or ""
    modules = {p.stem for p in (QALIB / package).glob("*.py")} - {"__init__"}
    if package in MAY_IMPORT and package not in ("topics", "tools"):
        assert "May import" in doc, f"qalib/{package}/__init__.py does not say what it may import"
        missing = sorted(m for m in modules if m not in doc)
        assert not missing, f"qalib/{package}/__init__.py's map does not name {missing}"
