"""Answer first: a topic notebook opens with its question, the one-line legend of the three kinds of statement, the
answer in 30 seconds (at most 60 words) and the longer answer (at most 180), and the catalog carries the same answers:
its short_answer as a 30-second answer, its longer_answer word for word. Read from the notebooks' sources: nothing
is executed."""

import json
import re
from pathlib import Path

import pytest

from qalib.notebook.catalog import CATALOG
from qalib.tools.nbtools import collection_paths, is_topic

LEGEND = ("✓ a measurement that would fail if the claim were false · ≡ a derivation checked numerically · "
          "❝ a quoted figure (paper and section)")
QUESTION, SHORT, LONGER = "**The question.**", "**The answer in 30 seconds.**", "**The longer answer.**"
SHORT_MAX, LONGER_MAX = 60, 180

TOPICS = {p.stem: p for p in collection_paths() if is_topic(p)}
ENTRIES = {e.file.removesuffix(".ipynb"): e for e in CATALOG}
ANSWER_FIRST = tuple(sorted(TOPICS))  # every topic notebook
FORMULA = re.compile(r"\$[^$]+\$")


def count_words(text: str) -> int:
    """Whitespace-separated tokens, an inline formula $...$ counting as one word however many spaces it holds."""
    return len(FORMULA.sub("F", text).split())


def normalise(text: str) -> str:
    return " ".join(text.split())


def first_cell(stem: str) -> str:
    cell = json.loads(Path(TOPICS[stem]).read_text(encoding="utf-8"))["cells"][0]
    assert cell["cell_type"] == "markdown", f"{stem}: cell 0 is not markdown"
    return "".join(cell["source"])


def paragraphs(source: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", source) if p.strip()]


def answers(stem: str) -> dict[str, str]:
    """The question, the 30-second answer and the longer answer of a notebook's first cell, labels removed,
    whitespace normalised; the longer answer runs to the end of the cell."""
    paras = paragraphs(first_cell(stem))
    found = {}
    for i, para in enumerate(paras):
        for key, label in (("question", QUESTION), ("short", SHORT), ("longer", LONGER)):
            if para.startswith(label):
                text = para if key != "longer" else "\n\n".join(paras[i:])
                found[key] = normalise(text.removeprefix(label))
    return found


def test_count_words_counts_a_formula_as_one_word():
    assert count_words("Dividing by $\\sqrt{d_k}$ restores variance 1.") == 6
    assert count_words("the scores $S = XWW^\\top X^\\top$ are symmetric") == 5
    assert count_words("$a$, $b + c$ and ($d$).") == 4
    assert count_words("no formula here,\n  just  words") == 5


def test_every_topic_notebook_answers_first():
    missing = sorted(stem for stem in TOPICS if SHORT not in first_cell(stem))
    assert len(TOPICS) == 20 and not missing, f"no 30-second answer in the first cell of {missing}"


@pytest.mark.parametrize("stem", ANSWER_FIRST)
def test_the_first_cell_opens_with_question_legend_and_answers(stem):
    paras = paragraphs(first_cell(stem))
    assert re.match(rf"# {stem[:2]} · \S", paras[0]), f"{stem}: the first line is not '# {stem[:2]} · title'"
    assert paras[1].startswith(QUESTION), f"{stem}: the question does not follow the title"
    assert paras[2] == LEGEND, f"{stem}: the legend line does not follow the question"
    assert paras[3].startswith(SHORT) and paras[4].startswith(LONGER), \
        f"{stem}: the answer in 30 seconds and the longer answer do not follow the legend"


@pytest.mark.parametrize("stem", ANSWER_FIRST)
def test_the_answers_are_short_enough_to_say_aloud(stem):
    found = answers(stem)
    short, longer = count_words(found["short"]), count_words(found["longer"])
    assert 0 < short <= SHORT_MAX, f"{stem}: the answer in 30 seconds has {short} words (at most {SHORT_MAX})"
    assert 0 < longer <= LONGER_MAX, f"{stem}: the longer answer has {longer} words (at most {LONGER_MAX})"


@pytest.mark.parametrize("stem", ANSWER_FIRST)
def test_the_catalog_carries_the_same_answers(stem):
    entry = ENTRIES[stem]
    words = count_words(entry.short_answer)
    assert 0 < words <= SHORT_MAX, f"{stem}: the catalog's short_answer has {words} words (at most {SHORT_MAX})"
    assert normalise(entry.longer_answer) == answers(stem)["longer"], \
        f"{stem}: the catalog's longer_answer differs from the notebook's longer answer"


@pytest.mark.parametrize("stem", ANSWER_FIRST)
def test_the_set_up_imports_are_folded(stem):
    """A reader meets the answer, not a screen of imports: the set-up's code cell opens with its source hidden."""
    nb = json.loads(TOPICS[stem].read_text())
    heading = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"
                   and re.match(r"## (\d+\s*[·.]\s*)?Set-up", "".join(c["source"]).strip()))
    cell = nb["cells"][heading + 1]
    assert cell["cell_type"] == "code" and cell["metadata"].get("jupyter", {}).get("source_hidden") is True


SHOWED = re.compile(r"^\*\*What [^*]*showed\.?\*\*")
SHOWED_MAX = 120
LIMITS = "<details><summary>Limits of this run</summary>"


def markdown_sources(stem: str) -> list[str]:
    cells = json.loads(Path(TOPICS[stem]).read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("stem", ANSWER_FIRST)
def test_what_an_experiment_showed_is_short_and_its_caveats_are_one_click_away(stem):
    """Each "What it showed" (or "What the reference showed") paragraph states the result in at most ~120 words; a
    notebook with such a paragraph keeps its caveats in a collapsed "Limits of this run" box."""
    showed = [p for src in markdown_sources(stem) for p in paragraphs(src) if SHOWED.match(p)]
    long = {p[:60]: count_words(p) for p in showed if count_words(p) > SHOWED_MAX}
    assert not long, f"{stem}: 'What ... showed' paragraphs over {SHOWED_MAX} words: {long}"
    if showed:
        assert any(LIMITS in src for src in markdown_sources(stem)), f"{stem}: no '{LIMITS}' box"
