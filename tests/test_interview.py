"""The mock interview: a pool from every drill, spaced-repetition order, escaped typed text, kept progress."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from qalib.practice import quiz as Q  # noqa: E402
from qalib.practice.interview import MockInterview, plot_progress, pool, topic_summary  # noqa: E402
from qalib.practice.progress import BOX_WAIT, N_BOXES, ProgressStore  # noqa: E402


def test_the_pool_draws_every_entry_of_every_drill_with_unique_ids():
    cards = pool()
    expected = sum(len(d.follow_ups) + len(d.questions) for d in map(Q.load, Q.available()))
    assert len(cards) == expected and len({c.id for c in cards}) == len(cards)
    assert {c.notebook for c in cards} == set(Q.available())
    assert all(c.link.startswith(f"{c.notebook}.ipynb#") for c in cards)
    with pytest.raises(ValueError, match="notebooks must name at least one"):
        pool([])


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def answer(m: MockInterview, right: bool) -> str:
    """Answer the card on screen as a student would; return its id."""
    card = m.current.id
    if m.current.question is None:
        m.reveal()
        m.grade(right)
    else:
        q = m.current_question
        m.options.value = q.answer if right else (q.answer + 1) % len(q.options)
        assert m.check() is right
        m.ask()
    return card


def test_a_missed_question_comes_back_first_once_due_and_progress_survives_a_restart(tmp_path):
    clock = Clock()
    store = ProgressStore(tmp_path / "p.json", clock=clock)
    m = MockInterview(store, seed=1)
    missed = answer(m, right=False)
    known = answer(m, right=True)
    assert m.current.id not in (missed, known)          # not due yet: a new question
    clock.now += BOX_WAIT[1] + 1
    m.ask()
    assert m.current.id == missed                        # due again, before any new question
    restarted = MockInterview(ProgressStore(tmp_path / "p.json", clock=clock), seed=2)
    assert restarted.current.id == missed                # the restart remembers
    states = restarted.store.states()
    assert states[missed].box == 1 and states[known].box == 2
    assert "2 of" in restarted.status.value and "1 to revisit soon" in restarted.status.value


def test_typed_text_is_escaped_where_it_is_shown(tmp_path):
    m = MockInterview(ProgressStore(tmp_path / "p.json"), seed=0)
    while m.current.question is not None:
        answer(m, True)
    m.typed.value = "<script>alert(1)</script> softmax & co"
    text = m.reveal()
    assert "<script>" not in text and "&lt;script&gt;" in text and "&amp; co" in text


def test_check_without_a_choice_asks_for_one_and_records_nothing(tmp_path):
    m = MockInterview(ProgressStore(tmp_path / "p.json"), seed=0)
    while m.current.question is None:
        answer(m, True)
    before = m.store.states()
    assert m.check() is None and m.store.states() == before


def test_a_corrupt_file_is_reported_in_the_interview(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{broken")
    m = MockInterview(ProgressStore(path), seed=0)
    assert "could not be read" in m.notice.value and "unreadable-" in m.notice.value


def test_topic_summary_and_its_plot_cover_every_notebook(tmp_path):
    cards = pool()
    summary = topic_summary(cards, {})
    assert set(summary) == set(Q.available())
    assert all(counts[0] == sum(counts) and len(counts) == N_BOXES + 1 for counts in summary.values())
    fig, ax = plt.subplots()
    plot_progress(ax, summary)
    assert len(ax.patches) == len(summary) * (N_BOXES + 1)
    plt.close(fig)
