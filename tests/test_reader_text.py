"""What a student reads carries no process notes: no issue numbers of this project, no sweeps, reviews, sessions or
dates of its making, no pointers to files a reader does not have (FACTS.md, REVIEW.md). A reader should meet what
they can see and check, or nothing. Upstream issues are fine when they name their repository
("huggingface/tokenizers issue #1794")."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READ_BY_STUDENTS = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("qalib/practice/drills/*.toml"),
                           ROOT / "qalib/notebook/catalog.py", ROOT / "qalib/practice/exercises/cases.py"])

PROCESS_NOTES = {
    "an issue of this project": re.compile(r"(?P<repo>[\w-]+/[\w.-]+ )?\bissues? ?#\d+", re.I),
    "the robustness sweep": re.compile(r"\brobustness sweep|\bthe sweep'?s? (offsets|seeds)|\b(in|of|over) the sweep\b", re.I),
    "a review of this project": re.compile(r"\b(a|the|fourth|expert|fresh) review(er)?'?s?\b"
                                           r"(?! (paper|article|of the literature))"
                                           r"|\b(fourth|expert|fresh|truth) read\b", re.I),
    "a file the reader does not have": re.compile(r"\b(FACTS|REVIEW|NOTEBOOK|STYLE)\.md\b"),
    "the date of a session": re.compile(r"\b(December|Dec\.?) 2026\b|\b2026-\d\d-\d\d\b|\bsession \d+\b", re.I),
    "runs the reader cannot see": re.compile(r"\b(runs?|trials?) outside (this|the) notebook\b", re.I),
}


def process_notes(text: str) -> list[tuple[str, re.Match]]:
    """(what, match) for every process note in `text`; an issue that names its repository is an upstream one."""
    return [(what, m) for what, pattern in PROCESS_NOTES.items() for m in pattern.finditer(text)
            if not m.groupdict().get("repo")]


def _reader_text(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    return path.read_text()


@pytest.mark.parametrize("path", READ_BY_STUDENTS, ids=lambda p: p.name)
def test_no_process_notes_reach_the_reader(path):
    text = _reader_text(path)
    found = [f"{what}: ...{text[max(0, m.start() - 40):m.end() + 40]!r}..." for what, m in process_notes(text)]
    assert not found, f"{path.relative_to(ROOT)} tells the reader about how it was made:\n" + "\n".join(found)


@pytest.mark.parametrize("text, caught", [
    ("as issue #38 found", True), ("see issues #12", True), ("huggingface/tokenizers issue #1794", False),
    ("the robustness sweep", True), ("over the sweep's offsets", True), ("a sweep over widths", False),
    ("sweep = run_variants(...)", False),
    ("as the fourth read found", True), ("a review's runs", True), ("a review paper", False), ("FACTS.md records", True),
    ("December 2026", True), ("in runs outside this notebook", True), ("the read-out", False),
])
def test_the_patterns_catch_process_notes_and_nothing_else(text, caught):
    assert bool(process_notes(text)) == caught
