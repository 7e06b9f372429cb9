"""The interview drills as data (qalib/practice/drills/*.toml): every file matches its notebook, no answer sits in a
notebook's source, and the widgets show an answer only when asked."""

import random
import re

import nbformat
import pytest

from qalib.notebook.catalog import CATALOG
from qalib.practice import quiz as Q

DRILLS = Q.available()


def headings(stem: str) -> set[str]:
    nb = nbformat.read(f"notebooks/{stem}.ipynb", as_version=4)
    return {m.group(1).strip() for c in nb.cells if c.cell_type == "markdown"
            for m in re.finditer(r"^#{2,3} (.*)$", c.source, re.M)}


def test_every_topic_notebook_has_a_drill_file_and_every_file_a_notebook():
    topics = {e.file.removesuffix(".ipynb") for e in CATALOG if e.exists}
    assert topics == set(DRILLS)


@pytest.mark.parametrize("stem", DRILLS)
def test_drill_file_follows_the_schema_and_links_to_real_sections(stem):
    drill = Q.load(stem)
    assert drill.follow_ups and drill.questions
    known = headings(stem)
    for entry in [*drill.follow_ups, *drill.questions]:
        assert entry.section in known, f"{stem}: section {entry.section!r} is not a heading of the notebook"


@pytest.mark.parametrize("stem", DRILLS)
def test_no_answer_is_visible_in_the_notebook_source(stem):
    nb = nbformat.read(f"notebooks/{stem}.ipynb", as_version=4)
    source = "\n".join(c.source for c in nb.cells)
    # a folded box is for details of a run ("Limits of this run"), never for an answer the reader should try first
    assert "Question(" not in source and not re.search(r"<summary>[^<]*answer", source, re.I)
    drill = Q.load(stem)
    for text in [f.answer for f in drill.follow_ups] + [q.explanation for q in drill.questions]:
        first_line = text.strip().splitlines()[0][:60]
        assert first_line not in source, f"{stem}: an answer is in the notebook source: {first_line!r}"
    assert f"quiz({stem!r})" in source


def test_shuffling_keeps_the_answer_with_its_option():
    q = Q.Question("2 + 2?", ["3", "4", "5", "22"], 1, "Arithmetic.", "1 · Sums")
    orders = set()
    for seed in range(30):
        s = q.shuffled(random.Random(seed))
        assert sorted(s.options) == sorted(q.options) and s.options[s.answer] == "4"
        orders.add(tuple(s.options))
    assert len(orders) > 5  # the options really move


def test_quiz_feedback_is_empty_until_checked_then_grades_and_links():
    view = Q.quiz(DRILLS[0], seed=0)
    assert all(f.value == "" for f in view.quiz.feedback)
    q = view.quiz.questions[0]
    wrong = next(i for i in range(len(q.options)) if i != q.answer)
    view.quiz.choices[0].value = wrong
    assert view.quiz.check(0) is False and "Not quite" in view.quiz.feedback[0].value
    view.quiz.choices[0].value = q.answer
    assert view.quiz.check(0) is True and q.explanation in view.quiz.feedback[0].value
    assert Q.section_anchor(q.section) in view.quiz.feedback[0].value
    assert Q.grade(q, None) == (False, "Pick an answer first.")


def test_follow_up_answer_appears_only_when_revealed():
    view = Q.quiz(DRILLS[0], seed=0)
    assert all(not out.outputs for out in view.follow_ups.answers)
    text = view.follow_ups.reveal(0)
    f = view.drill.follow_ups[0]
    assert text.startswith(f"**{f.short}**") and Q.section_link(f.section) in text
    assert f"<details><summary>more</summary>\n\n{f.answer.strip()}\n\n</details>" in text  # the full one, folded


@pytest.mark.parametrize("stem", DRILLS)
def test_every_follow_up_has_a_short_answer_one_can_say_in_15_seconds(stem):
    for f in Q.load(stem).follow_ups:
        assert 3 <= Q.count_words(f.short) <= Q.SHORT_MAX_WORDS and "\n" not in f.short, f.question
        assert Q.count_words(f.short) < Q.count_words(f.answer) or Q.count_words(f.answer) <= Q.SHORT_MAX_WORDS, f.question


def write(tmp_path, monkeypatch, body: str) -> None:
    monkeypatch.setattr(Q, "DRILLS", tmp_path)
    (tmp_path / "nb.toml").write_text(body)


GOOD_DRILL = '[[drill]]\nquestion = "Q?"\nanswer = "A."\nsection = "S"\nshort = "A."\n'


@pytest.mark.parametrize("body, message", [
    (GOOD_DRILL + '[[quiz]]\nprompt = "P"\noptions = ["a", "b"]\nanswer = "c"\nexplanation = "E"\nsection = "S"\n',
     r"nb.toml: quiz 1: answer 'c' is not among the options"),
    (GOOD_DRILL + '[[quiz]]\nprompt = "P"\noptions = ["a"]\nanswer = "a"\nexplanation = "E"\nsection = "S"\n',
     "quiz 1: a question needs at least 2 options"),
    (GOOD_DRILL + '[[quiz]]\nprompt = "P"\noptions = ["a", "a"]\nanswer = "a"\nexplanation = "E"\nsection = "S"\n',
     "quiz 1: a question's options must differ"),
    ('[[drill]]\nquestion = "Q?"\nsection = "S"\n', "nb.toml: drill 1: 'answer' must be a non-empty string"),
    ('[[drill]]\nquestion = "Q?"\nanswer = "A."\nsection = "S"\n', "nb.toml: drill 1: 'short' must be a non-empty"),
    ('[[drill]]\nquestion = "Q?"\nanswer = "A."\nsection = "S"\nshort = "' + "word " * 41 + '"\n',
     "drill 1: 'short' must be one line of at most 40 words, got 41"),
    (GOOD_DRILL, "at least one \\[\\[drill\\]\\] and one \\[\\[quiz\\]\\]"),
    ('[[drill]\n', "nb.toml is not valid TOML"),
    ('[[quizz]]\nprompt = "P"\n', "unknown tables \\['quizz'\\]"),
])
def test_bad_drill_files_get_errors_naming_file_entry_and_field(tmp_path, monkeypatch, body, message):
    write(tmp_path, monkeypatch, body)
    with pytest.raises(ValueError, match=message):
        Q.load("nb")


def test_unknown_notebook_lists_the_available_ones():
    with pytest.raises(ValueError, match="no drill for notebook 'nope'.*01_scaled_attention"):
        Q.load("nope")
