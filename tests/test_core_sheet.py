"""The core set: 20-30 drill follow-ups marked core, at least one per topic, asked alone by the mock interview and
printed on one page in readable type."""

import os
import re
from pathlib import Path

import pytest

from qalib.practice import quiz
from qalib.practice.interview import MockInterview
from qalib.practice.progress import ProgressStore
from qalib.tools import cheatsheet, core_sheet


def test_the_core_set_is_a_night_of_revision_and_covers_every_topic():
    items = core_sheet.core_follow_ups()
    low, high = quiz.CORE_RANGE
    assert low <= len(items) <= high, f"{len(items)} core follow-ups"
    topics = {name for name, _ in items}
    assert topics == set(quiz.available()), f"topics without a core question: {set(quiz.available()) - topics}"


def test_core_must_be_a_boolean(tmp_path, monkeypatch):
    (tmp_path / "x.toml").write_text(
        "[[drill]]\nquestion = 'q'\ncore = 'yes'\nsection = 's'\nshort = 'a'\nanswer = 'b'\n"
        "[[quiz]]\nprompt = 'p'\noptions = ['a', 'b']\nanswer = 'a'\nexplanation = 'e'\nsection = 's'\n")
    monkeypatch.setattr(quiz, "DRILLS", tmp_path)
    with pytest.raises(ValueError, match="'core' must be true or false"):
        quiz.load("x")


def test_the_page_lists_every_core_question_escaped(tmp_path):
    (html_path,) = core_sheet.build(tmp_path, pdf=False)
    text = html_path.read_text(encoding="utf-8")
    items = core_sheet.core_follow_ups()
    assert text.count("<li>") == len(items)
    assert "<script" not in text and not re.findall(r"(?:src|href)=['\"]https?://", text)
    page = core_sheet.page([("99_x", quiz.FollowUp("<b>q</b>", "a", "s", "short & <i>", True))])
    assert "&lt;b&gt;q&lt;/b&gt;" in page and "short &amp; &lt;i&gt;" in page


def test_core_questions_only_asks_only_core_questions(tmp_path):
    interview = MockInterview(ProgressStore(tmp_path / "p.json"), seed=0)
    interview.core_only.value = True
    asked = {interview.ask().id for _ in range(12)}
    assert all(interview.by_id[i].core for i in asked)
    interview.topic.value = "05_shared_qk"
    assert all(interview.by_id[i].notebook == "05_shared_qk" and interview.by_id[i].core for i in interview.askable())


def test_the_speaking_timer_resets_for_each_question(tmp_path):
    interview = MockInterview(ProgressStore(tmp_path / "p.json"), seed=0)
    interview.timer_length.value = 60
    interview.timer.value = 17
    interview.ask()
    assert (interview.timer.value, interview.timer.max, interview.timer_bar.max) == (0, 60, 60)
    assert not interview.timer.playing


@pytest.mark.skipif(not Path(cheatsheet.CHROMIUM).exists() and not os.environ.get("CI"),
                    reason="Chromium is not installed (make setup installs it as root); on CI this test runs")
def test_the_core_list_prints_on_one_page_in_readable_type(tmp_path):
    html_path, pdf = core_sheet.build(tmp_path)
    size = cheatsheet.font_size(html_path)
    assert cheatsheet.pdf_pages(pdf) == 1 and size >= 6.6, f"{cheatsheet.pdf_pages(pdf)} pages at {size} pt"
