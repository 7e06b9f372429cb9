"""The mock interview: questions drawn from every notebook's drill, asked in spaced-repetition order.

A follow-up is answered aloud (or typed), then revealed and rated by the student: Again, Hard, Good or Easy, FSRS's
four ratings. A quiz question is graded by its Check: right is rated Good, wrong Again. Every answer goes to the
progress file (qalib.practice.progress), and FSRS (qalib.practice.schedule) decides when each question comes back and
which comes next, across kernel restarts. Each answer folds in the notebook section that argues it, and in JupyterLab
links to it (Voila serves only the interview itself, so there the folded section stands alone).

    MockInterview()          # in notebooks/mock_interview.ipynb; `make interview` serves it with Voila
"""

from __future__ import annotations

import hashlib
import html
import io
import os
import random
from dataclasses import dataclass
from typing import Callable

import ipywidgets as W
from fsrs import Rating
from IPython.display import Markdown

from qalib.practice import quiz as Q
from qalib.practice.progress import ProgressStore
from qalib.practice.progress_chart import days_text, plot_progress, topic_summary
from qalib.practice.schedule import CardState, as_rating, interval_text, next_card, next_intervals, quiz_rating

SESSION_GOALS = (5, 10, 20, 30)  # questions per session the student can aim for
SPEAKING_SECONDS = (30, 60)      # the speaking timer's lengths: a short answer, then the longer one
CHART_HEIGHT = 420               # px: the progress chart never takes more of the screen than this


@dataclass(frozen=True)
class Card:
    id: str                 # stable across edits elsewhere in the file: a hash of notebook and prompt
    notebook: str
    prompt: str
    answer: str             # markdown: the follow-up's answer, or the quiz question's explanation
    section: str
    question: Q.Question | None = None  # set for a multiple-choice card
    short: str = ""         # a follow-up's short answer (said aloud first); empty for a quiz question
    core: bool = False      # one of the drills' core questions (the night-before set)

    @property
    def link(self) -> str:
        """Where the answer is argued, relative to notebooks/ (where the mock interview notebook lives)."""
        return f"{self.notebook}.ipynb{Q.section_anchor(self.section)}"


def card_id(notebook: str, prompt: str) -> str:
    return hashlib.sha1(f"{notebook}\0{prompt}".encode()).hexdigest()[:12]


def card_status(state: CardState) -> str:
    """The line above a question: what FSRS knows of it, and the student's tally."""
    if state.is_new:
        return "new question"
    memory = "in review" if state.phase == "review" else f"in {state.phase}"
    return f"{memory}, stability {days_text(state.stability)}, right {state.right} of {state.seen}"


def pool(notebooks: list[str] | None = None) -> list[Card]:
    """Every follow-up and quiz question of the given notebooks (default: all that have a drill file)."""
    names = Q.available() if notebooks is None else notebooks
    if not names:
        raise ValueError("notebooks must name at least one notebook with a drill, got an empty list")
    cards = []
    for name in names:
        drill = Q.load(name)
        cards += [Card(card_id(name, f.question), name, f.question, f.answer, f.section, short=f.short, core=f.core)
                  for f in drill.follow_ups]
        cards += [Card(card_id(name, q.prompt), name, q.prompt, q.explanation, q.section, q) for q in drill.questions]
    return cards


class MockInterview:
    """One question at a time. Buttons: Reveal, then Again / Hard / Good / Easy (follow-ups), or Check (quiz)."""

    def __init__(self, store: ProgressStore | None = None, notebooks: list[str] | None = None,
                 seed: int | None = None, clock: Callable[[], float] | None = None, goal: int = 10,
                 links: bool | None = None) -> None:
        # Links to the notebooks work in JupyterLab; Voila (`make interview`) answers them 403, serving no other file,
        # so under Voila (which sets VOILA_BASE_URL in its kernels) a card names its notebook without a link.
        self.links = "VOILA_BASE_URL" not in os.environ if links is None else links
        self.store = store if store is not None else ProgressStore()
        if clock is not None:
            self.store.clock = clock
        self.cards = pool(notebooks)
        self.by_id = {c.id: c for c in self.cards}
        self.rng = random.Random(seed)
        self.current: Card | None = None
        self.answered = 0  # answers given in this view
        self.missed: list[Card] = []  # this session's answers rated Again (or a wrong quiz answer), in order
        self.current_question: Q.Question | None = None  # the shuffled copy on screen
        # Where the card on screen stands: "asked", "revealed" (a follow-up's answer is shown, a rating is due) or
        # "checked" (a quiz answer is graded). A click reaches the kernel after the front end has hidden its button
        # (a double click, a click queued behind a slow answer): it is ignored unless it belongs to this phase, so
        # one question is never recorded twice, nor the next one rated unseen.
        self.phase = "asked"
        names = sorted({c.notebook for c in self.cards})
        labels = {"description_width": "initial"}  # the whole label, never cut to "session g..."
        self.topic = W.Dropdown(options=[("all topics", "")] + [(n, n) for n in names], value="",
                                description="next topic", style=labels, layout=W.Layout(width="22em"))
        if goal not in SESSION_GOALS:
            raise ValueError(f"goal must be one of {SESSION_GOALS} questions, got {goal!r}")
        self.goal = W.Dropdown(options=list(SESSION_GOALS), value=goal, description="session goal", style=labels,
                               layout=W.Layout(width="12em"))
        self.core_only = W.Checkbox(value=False, description="core questions only", indent=False,
                                    tooltip="the drills' core set: the questions to know cold the night before")
        # The speaking timer runs in the browser (Play ticks once a second, linked to the bar there), so it keeps
        # time while the kernel is idle; the kernel only resets it for each new question.
        self.timer_length = W.ToggleButtons(options=[(f"{t} s", t) for t in SPEAKING_SECONDS], value=SPEAKING_SECONDS[0],
                                            description="speaking timer", style={"button_width": "4em"})
        self.timer = W.Play(value=0, min=0, max=SPEAKING_SECONDS[0], step=1, interval=1000, repeat=False,
                            show_repeat=False, description="start the timer")
        self.timer_bar = W.IntProgress(value=0, min=0, max=SPEAKING_SECONDS[0], layout=W.Layout(width="16em"))
        W.jslink((self.timer, "value"), (self.timer_bar, "value"))
        self.timer_length.observe(lambda change: self._set_timer(change["new"]), names="value")
        self.summary = W.HTMLMath()

        self.notice = W.HTML()
        self.header = W.HTML()
        self.prompt = W.HTMLMath()
        self.typed = W.Textarea(placeholder="Say your answer out loud, or type it here (optional)",
                                layout=W.Layout(width="100%", height="5em"))
        self.options = W.RadioButtons(layout=W.Layout(width="auto"))
        self.reveal_button = W.Button(description="Reveal answer", button_style="info")
        self.check_button = W.Button(description="Check", button_style="info")
        # The four ratings, coloured as Anki colours them; each tooltip says what the rating means.
        self.rating_buttons = {
            Rating.Again: W.Button(description="Again", button_style="danger", tooltip="I did not know it"),
            Rating.Hard: W.Button(description="Hard", button_style="warning", tooltip="I knew it, with effort"),
            Rating.Good: W.Button(description="Good", button_style="success", tooltip="I knew it"),
            Rating.Easy: W.Button(description="Easy", button_style="info", tooltip="I knew it at once"),
        }
        self.next_button = W.Button(description="Next question")
        self.answer = W.Output()
        self.status = W.HTML()
        # drawn at twice the pixels it is shown at (sharp on any screen), shown at most CHART_HEIGHT high
        self.chart = W.Image(format="png", layout=W.Layout(max_width="100%", max_height=f"{CHART_HEIGHT}px",
                                                           object_fit="contain"))
        self.reveal_button.on_click(lambda _b: self._if_phase("asked", self.reveal))
        self.check_button.on_click(lambda _b: self._if_phase("asked", self.check))
        for rating, button in self.rating_buttons.items():
            button.on_click(lambda _b, rating=rating: self._if_phase("revealed", self.grade, rating))
        self.next_button.on_click(lambda _b: self._if_phase("checked", self.ask))
        # Check stays disabled until an option is picked: the options reach the browser after the button can show,
        # and a click in between would only be told to pick one
        self.options.observe(lambda _change: self._enable_check(), names="value")
        # a new topic applies from the next question: asking at once would replace a question the student may be
        # answering, and a front end that echoes the value back on render would do so unasked
        self.buttons = W.HBox([self.reveal_button, self.check_button, *self.rating_buttons.values(),
                               self.next_button])
        self.widget = W.VBox([self.notice, W.HBox([self.topic, self.goal, self.core_only]), self.header, self.prompt,
                              self.options, self.typed, W.HBox([self.timer_length, self.timer, self.timer_bar]),
                              self.buttons, self.answer, self.summary, self.status, self.chart])
        self.widget.add_class("qalib-interview")
        self.ask()

    # -- the flow --------------------------------------------------------------------------------------------
    def _enable_check(self) -> None:
        self.check_button.disabled = self.options.value is None

    def _if_phase(self, phase: str, action: Callable, *args) -> None:
        """A button's click: act only if the card on screen is in `phase` (see `self.phase`), else ignore it."""
        if self.phase == phase:
            action(*args)

    def _show(self, *buttons: W.Button) -> None:
        for b in (self.reveal_button, self.check_button, *self.rating_buttons.values(), self.next_button):
            b.layout.display = None if b in buttons else "none"

    def ask(self) -> Card:
        """Put the next card on screen, in the order FSRS gives (schedule.next_card: due cards first)."""
        states = self.store.states()
        asked = self.askable()
        self.current = self.by_id[next_card(asked, states, self.store.clock(),
                                            lambda ids: self.rng.sample(ids, len(ids)), self.store.scheduler)]
        c = self.current
        self.header.value = (f"<span style='color:#555'>from {self._notebook_html(c)} · "
                             f"{html.escape(card_status(states.get(c.id, CardState())))}</span>")
        self.prompt.value = f"<b>{c.prompt}</b>"
        self.typed.value = ""
        self.answer.outputs = ()
        self._set_timer(self.timer_length.value)
        if c.question is not None:
            q = self.current_question = c.question.shuffled(self.rng)
            self.options.options = [(o, j) for j, o in enumerate(q.options)]
            self.options.value = None
            self._enable_check()
            self.options.layout.display = None
            self.typed.layout.display = "none"
            self._show(self.check_button)
        else:
            self.current_question = None
            self.options.layout.display = "none"
            self.typed.layout.display = None
            self._show(self.reveal_button)
        self.phase = "asked"
        self._refresh(states)
        return c

    def askable(self) -> list[str]:
        """The ids the next question is drawn from: the chosen topic (or all), the core set only if ticked. A topic
        without a core question is asked in full, and says so."""
        topic = [c for c in self.cards if self.topic.value in ("", c.notebook)]
        core = [c for c in topic if c.core]
        if self.core_only.value and not core:
            self.notice.value = "<div style='color:#b35806'>This topic has no core question: asking all of it.</div>"
        return [c.id for c in (core if self.core_only.value and core else topic)]

    def _set_timer(self, seconds: int) -> None:
        """Stop the speaking timer and set it to `seconds`, back at 0."""
        self.timer.playing = False
        self.timer.value = 0
        self.timer.max = self.timer_bar.max = int(seconds)

    def reveal(self) -> str:
        """Show our answer (and what the student typed, escaped) for a follow-up; then ask for a rating."""
        c = self.current
        typed = self.typed.value.strip()
        mine = f"**Your answer:** {html.escape(typed)}\n\n" if typed else ""
        ours = Q.revealed_answer(c.short, c.answer) if c.short else c.answer.strip()
        text = f"{mine}**Our answer:** {ours}\n\n{self.section_box(c)}"
        self._markdown(text)
        state = self.store.states().get(c.id, CardState())
        for rating, seconds in next_intervals(state, self.store.clock(), self.store.scheduler).items():
            self.rating_buttons[rating].description = f"{rating.name} · {interval_text(seconds)}"
        self.phase = "revealed"
        self._show(*self.rating_buttons.values())
        return text

    def _notebook_html(self, c: Card) -> str:
        """The card's notebook: a link to its section where links work (JupyterLab), else its name."""
        if not self.links:
            return html.escape(c.notebook)
        return f"<a href='{html.escape(c.link)}' target='_blank'>{html.escape(c.notebook)}</a>"

    def section_box(self, c: Card) -> str:
        """The section that answers a card, readable in place (folded), and, where links work, its link."""
        text = Q.section_markdown(c.notebook, c.section)
        link = f"[→ {c.section} in {c.notebook}]({c.link})" if self.links else ""
        if not text:
            return link or f"(section {html.escape(c.section)} of {html.escape(c.notebook)})"
        return (f"<details><summary>Read the section: {html.escape(c.section)} ({html.escape(c.notebook)})</summary>"
                f"\n\n{text}\n\n</details>\n\n{link}")

    def check(self) -> bool | None:
        """Grade a multiple-choice card from the chosen option and record it (right: Good, wrong: Again)."""
        q = self.current_question
        if self.phase == "checked":
            raise ValueError("this question is already checked: ask the next one")
        if self.options.value is None:
            self._markdown("Pick an answer first.")
            return None
        correct, feedback = Q.grade(q, self.options.value)
        self._markdown(f"{feedback}\n\n{self.section_box(self.current)}")
        self._record(quiz_rating(correct))
        self.phase = "checked"
        self._show(self.next_button)
        return correct

    def grade(self, rating: Rating | str) -> None:
        """The student's own rating of a follow-up (Again, Hard, Good, Easy); recorded, then the next question."""
        if self.current.question is not None:
            raise ValueError("a multiple-choice question is graded by check(), not rated by the student")
        if self.phase != "revealed":
            raise ValueError("reveal the answer before rating it")
        self._record(as_rating(rating))
        self.ask()

    def _record(self, rating: Rating) -> None:
        self.store.record(self.current.id, rating)
        self.answered += 1
        if rating == Rating.Again:
            self.missed.append(self.current)
        if self.answered == self.goal.value:
            self.summary.value = self.session_summary()
        self._refresh(self.store.states())

    def session_summary(self) -> str:
        """HTML: the goal reached, and the questions missed in this session with the section that answers each."""
        once = {c.id: c for c in self.missed}.values()  # each missed card once, in order (a quiz card does not hash)
        missed = "".join(f"<li>{c.prompt} ({self._notebook_html(c)}: {html.escape(c.section)})</li>" for c in once)
        return (f"<div style='border-left: 3px solid #1b9e77; padding-left: 0.6em'><b>Session goal reached: "
                f"{self.answered} questions.</b> "
                + (f"Missed, and coming back first next time:<ol>{missed}</ol>" if missed else "Nothing missed.")
                + " Keep going, or come back tomorrow.</div>")

    # -- drawing ---------------------------------------------------------------------------------------------
    def _markdown(self, text: str) -> None:
        """Replace what the answer area shows. Setting the Output's `outputs` (rather than clear_output and a
        `with` block) works the same in JupyterLab, Voila and a headless run."""
        self.answer.outputs = ()
        self.answer.append_display_data(Markdown(text))

    def _refresh(self, states: dict[str, CardState]) -> None:
        if self.store.notice:
            self.notice.value = f"<div style='color:#b35806'>\u26a0 {html.escape(self.store.notice)}</div>"
        now = self.store.clock()
        ours = [states[c.id] for c in self.cards if c.id in states]
        due = sum(not s.is_new and s.due <= now for s in ours)
        learning = sum(s.phase in ("learning", "relearning") and s.due > now for s in ours)
        self.status.value = (f"{sum(s.seen > 0 for s in ours)} of {len(self.cards)} questions answered at least once "
                             f"({sum(s.seen for s in ours)} answers in all; {due} due now, {learning} in learning); "
                             f"{self.answered} in this session. Progress file: {html.escape(str(self.store.path))}")
        self.chart.value = self._chart_png(topic_summary(self.cards, states, now))

    @staticmethod
    def _chart_png(summary) -> bytes:
        from matplotlib.figure import Figure

        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = Figure(figsize=(10, 0.3 * len(summary) + 1.6), dpi=2 * 72, layout="constrained")
        plot_progress(fig.add_subplot(), summary)
        buf = io.BytesIO()
        # the whole figure at its own dpi: savefig would follow a style's savefig.bbox = "tight" or savefig.dpi
        FigureCanvasAgg(fig).print_png(buf)
        return buf.getvalue()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
