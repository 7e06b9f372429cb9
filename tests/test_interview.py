"""The mock interview: a pool from every drill, FSRS order and ratings, escaped typed text, kept progress, the chart."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import fsrs  # noqa: E402
from fsrs import Rating  # noqa: E402

from qalib.practice import quiz as Q  # noqa: E402
from qalib.practice.interview import MockInterview, card_status, pool  # noqa: E402
from qalib.practice.progress import ProgressStore  # noqa: E402
from qalib.practice.progress_chart import CATEGORIES, plot_progress, stability_label, topic_summary  # noqa: E402
from qalib.practice.schedule import CardState  # noqa: E402

NO_FUZZ = fsrs.Scheduler(enable_fuzzing=False)
MIN, DAY = 60.0, 86400.0


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


def answer(m: MockInterview, right: bool, rating: str | None = None) -> str:
    """Answer the card on screen as a student would (a follow-up: press `rating`, by default Good if right, else
    Again); return its id."""
    card = m.current.id
    if m.current.question is None:
        m.reveal()
        pressed = Rating[rating.capitalize()] if rating else Rating.Good if right else Rating.Again
        m.rating_buttons[pressed].click()
    else:
        q = m.current_question
        m.options.value = q.answer if right else (q.answer + 1) % len(q.options)
        assert m.check() is right
        m.ask()
    return card


def test_a_missed_question_comes_back_first_once_due_and_progress_survives_a_restart(tmp_path):
    clock = Clock()
    store = ProgressStore(tmp_path / "p.json", clock=clock, scheduler=NO_FUZZ)
    m = MockInterview(store, seed=1)
    missed = answer(m, right=False)
    known = answer(m, right=True)
    assert m.current.id not in (missed, known)          # not due yet: a new question
    clock.now += 1 * MIN + 1                              # past Again's first step (1 min), before Good's (10 min)
    m.ask()
    assert m.current.id == missed                        # due again, before any new question
    restarted = MockInterview(ProgressStore(tmp_path / "p.json", clock=clock, scheduler=NO_FUZZ), seed=2)
    assert restarted.current.id == missed                # the restart remembers
    states = restarted.store.states()
    assert (states[missed].right, states[known].right) == (0, 1)
    assert states[known].due == states[known].last_review + 10 * MIN
    assert "2 of" in restarted.status.value and "1 due now, 1 in learning" in restarted.status.value
    assert "in learning, stability" in restarted.header.value and "right 0 of 1" in restarted.header.value


def test_a_follow_up_offers_the_four_ratings_and_a_quiz_question_only_check(tmp_path):
    m = MockInterview(ProgressStore(tmp_path / "p.json", scheduler=NO_FUZZ), seed=0)
    while m.current.question is not None:
        answer(m, True)
    shown = lambda: [b.description for b in m.buttons.children if b.layout.display != "none"]  # noqa: E731
    assert shown() == ["Reveal answer"]
    m.reveal()
    # each rating names when the question would come back (a new card: FSRS's 1 and 10 minute steps, or 8 days)
    assert [d.split(" · ")[0] for d in shown()] == ["Again", "Hard", "Good", "Easy"]
    assert shown()[0] == "Again · 1 min" and shown()[3] == "Easy · 8 d"
    card = m.current.id
    m.rating_buttons[Rating.Easy].click()                # Easy: straight to review, 8 days with FSRS's defaults
    state = m.store.states()[card]
    assert (state.phase, round((state.due - state.last_review) / DAY)) == ("review", 8)
    while m.current.question is None:
        answer(m, True)
    assert shown() == ["Check"]
    with pytest.raises(ValueError, match="graded by check"):
        m.grade("good")


def test_a_quiz_answer_is_rated_good_when_right_and_again_when_wrong(tmp_path):
    m = MockInterview(ProgressStore(tmp_path / "p.json", scheduler=NO_FUZZ), seed=0)
    while m.current.question is None:
        answer(m, True)
    right = answer(m, True)
    while m.current.question is None:
        answer(m, True)
    wrong = answer(m, False)
    states = m.store.states()
    assert (states[right].step, states[right].right) == (1, 1)   # Good: the second learning step
    assert (states[wrong].step, states[wrong].right) == (0, 0)   # Again: back to the first


def test_a_follow_up_rating_by_name_is_checked(tmp_path):
    m = MockInterview(ProgressStore(tmp_path / "p.json", scheduler=NO_FUZZ), seed=0)
    while m.current.question is not None:
        answer(m, True)
    m.reveal()
    before, answered = m.store.states(), m.answered
    with pytest.raises(ValueError, match="unknown rating 'meh'"):
        m.grade("meh")
    assert m.store.states() == before and m.answered == answered
    answer_id = m.current.id
    m.grade("Hard")
    assert m.store.states()[answer_id].right == 1 and m.answered == answered + 1


def test_an_old_leitner_file_is_carried_over_and_said_so(tmp_path):
    import shutil
    from pathlib import Path

    path = tmp_path / "p.json"
    shutil.copy(Path(__file__).parent / "fixtures" / "progress_v1_leitner.json", path)
    m = MockInterview(ProgressStore(path, clock=lambda: 1_780_000_000.0 + 30 * DAY, scheduler=NO_FUZZ), seed=0)
    assert "carried over to FSRS" in m.notice.value and "18 answers in all; 7 due now" in m.status.value
    assert m.current.notebook in ("01_scaled_attention", "12_decoding")  # 30 days on: every old card is due


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
    assert m.check_button.disabled, "Check waits for an option to be picked"
    assert m.check() is None and m.store.states() == before
    m.options.value = 0
    assert not m.check_button.disabled
    m.check()
    m.next_button.click()
    while m.current.question is None:
        answer(m, True)
    assert m.check_button.disabled, "disabled again for the next quiz question"


def test_a_click_that_arrives_late_is_ignored_rather_than_recorded_twice(tmp_path):
    """A double click, or a click queued while the kernel was busy, reaches the kernel after its button is hidden:
    it must neither record the same question twice nor rate the next question unseen."""
    m = MockInterview(ProgressStore(tmp_path / "p.json", scheduler=NO_FUZZ), seed=0)
    while m.current.question is not None:
        answer(m, True)
    answered, rated = m.answered, m.current.id
    with pytest.raises(ValueError, match="reveal the answer before rating it"):
        m.grade("good")
    m.rating_buttons[Rating.Good].click()                # hidden, but a stale click arrives: nothing happens
    assert (m.answered, m.current.id, m.phase) == (answered, rated, "asked")
    m.reveal()
    m.rating_buttons[Rating.Good].click()
    m.rating_buttons[Rating.Good].click()                # the second click of a double click
    assert m.answered == answered + 1 and m.store.states()[rated].seen == 1
    assert m.current.id not in m.store.states()          # the next question is on screen, unrated
    while m.current.question is None:
        answer(m, True)
    quiz, answered = m.current.id, m.answered
    m.options.value = m.current_question.answer
    m.check_button.click()
    m.check_button.click()                               # double click on Check
    assert m.answered == answered + 1 and m.store.states()[quiz].seen == 1
    with pytest.raises(ValueError, match="already checked"):
        m.check()
    m.next_button.click()
    shown = m.current.id
    m.next_button.click()                                # a second Next skips nothing either
    assert m.phase == "asked" and m.current.id == shown != quiz


def test_a_corrupt_file_is_reported_in_the_interview(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{broken")
    m = MockInterview(ProgressStore(path), seed=0)
    assert "could not be read" in m.notice.value and "unreadable-" in m.notice.value


def test_card_status_says_what_fsrs_knows():
    assert card_status(CardState()) == "new question"
    review = CardState(seen=4, right=3, phase="review", stability=12.4, difficulty=5.0, due=0.0, last_review=0.0)
    assert card_status(review) == "in review, stability 12 days, right 3 of 4"


def test_topic_summary_sorts_cards_into_due_learning_and_review_by_stability():
    cards = pool(["01_scaled_attention"])
    now = 100 * DAY
    review = lambda s, due: CardState(seen=1, right=1, phase="review", stability=s, difficulty=5.0,  # noqa: E731
                                      due=due, last_review=now - DAY)
    states = {cards[0].id: review(2.0, now - 1),                                                 # due now
              cards[1].id: CardState(seen=1, phase="relearning", step=0, stability=0.2, difficulty=7.0,
                                     due=now + 5 * MIN, last_review=now),                       # learning
              cards[2].id: review(2.0, now + DAY), cards[3].id: review(10.0, now + 9 * DAY),
              cards[4].id: review(40.0, now + 39 * DAY)}
    got = topic_summary(cards, states, now)["01_scaled_attention"]
    assert dict(zip(CATEGORIES, got.counts)) == {
        "due now": 1, "learning": 1, "review, stability < 1 week": 1, "review, 1 week to 1 month": 1,
        "review, over a month": 1, "not yet asked": len(cards) - 5}
    assert sorted(got.review_stability) == [2.0, 2.0, 10.0, 40.0]  # the due review card's stability counts too
    assert stability_label(got.review_stability) == "median stability 6.0 days (4 in review)"


def test_topic_summary_and_its_plot_cover_every_notebook(tmp_path):
    cards = pool()
    summary = topic_summary(cards, {}, now=0.0)
    assert set(summary) == set(Q.available())
    assert all(k.counts[-1] == sum(k.counts) and len(k.counts) == len(CATEGORIES) for k in summary.values())
    fig, ax = plt.subplots()
    plot_progress(ax, summary)
    assert len(ax.patches) == len(summary) * len(CATEGORIES)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(CATEGORIES)
    plt.close(fig)


def test_interval_text_and_next_intervals():
    from qalib.practice.schedule import CardState, interval_text, next_intervals

    assert [interval_text(x) for x in (0, 59, 60, 600, 5 * 3600, 3 * DAY, 70 * DAY)] == [
        "< 1 min", "< 1 min", "1 min", "10 min", "5 h", "3 d", "2 mo"]
    with pytest.raises(ValueError, match="seconds"):
        interval_text(float("nan"))
    gaps = list(next_intervals(CardState(), 1_780_000_000.0, NO_FUZZ).values())
    assert gaps == sorted(gaps) and gaps[0] > 0  # Again comes back soonest, Easy latest


def test_the_topic_filter_asks_only_that_notebook_and_the_goal_ends_with_the_misses(tmp_path):
    m = MockInterview(ProgressStore(tmp_path / "p.json", scheduler=NO_FUZZ), seed=0, goal=5)
    m.topic.value = "07_multi_head"
    assert m.current is m.by_id[m.current.id]  # the question on screen stays; the topic applies from the next one
    m.ask()
    for _ in range(5):
        assert m.current.notebook == "07_multi_head"
        if m.current.question is None:
            m.reveal()
            m.grade("again")
        else:
            answer(m, False)  # a missed quiz question is listed too
    summary = m.summary.value
    assert "Session goal reached: 5 questions" in summary and "07_multi_head" in summary
    assert all(c.prompt in summary for c in m.missed) and m.missed
    with pytest.raises(ValueError, match="goal"):
        MockInterview(ProgressStore(tmp_path / "q.json"), seed=0, goal=7)


def test_the_progress_chart_is_sharp_and_capped_in_height(tmp_path):
    import struct

    from qalib.practice.interview import CHART_HEIGHT, MockInterview
    from qalib.practice.progress import ProgressStore

    interview = MockInterview(ProgressStore(tmp_path / "p.json"), seed=0)
    png = interview.chart.value
    width, height = struct.unpack(">II", png[16:24])  # the PNG header's size
    assert width == 2 * 72 * 10, "drawn at twice the pixels a 10-inch chart has at 72 dpi"
    assert interview.chart.layout.max_height == f"{CHART_HEIGHT}px" and interview.chart.layout.object_fit == "contain"


def test_every_card_can_show_the_section_that_answers_it(tmp_path):
    """Voila serves no notebook but the interview's own, so the answer area folds in the section's text itself."""
    from qalib.practice import quiz as Q
    from qalib.practice.interview import MockInterview, pool

    empty = [(c.notebook, c.section) for c in pool() if not Q.section_markdown(c.notebook, c.section)]
    assert not empty, f"sections with no text to show: {empty[:5]}"
    card = next(c for c in pool(["05_shared_qk"]) if c.question is None)
    in_lab = MockInterview(ProgressStore(tmp_path / "lab.json"), notebooks=["05_shared_qk"], seed=0, links=True)
    box = in_lab.section_box(card)
    assert box.startswith("<details><summary>Read the section: ") and f"]({card.link})" in box
    # under Voila a link would answer 403: the folded section stands alone, the notebook is named, not linked
    in_voila = MockInterview(ProgressStore(tmp_path / "voila.json"), notebooks=["05_shared_qk"], seed=0, links=False)
    box = in_voila.section_box(card)
    assert box.startswith("<details><summary>Read the section: ") and ".ipynb" not in box
    assert "<a " not in in_voila.header.value and "05_shared_qk" in in_voila.header.value
    assert "<a href='05_shared_qk.ipynb" in in_lab.header.value
    long = Q.section_markdown("05_shared_qk", "Myth check", max_chars=200)
    assert long.endswith("…") and len(long) < 1500
