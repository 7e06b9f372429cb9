"""The interview drill of each notebook: follow-up questions whose answers stay hidden until revealed, and a
self-check quiz that tells the reader whether they were right.

The questions and answers are data, one TOML file per notebook in qalib/practice/drills/, so that no answer is visible in a
notebook's source and the mock interview can draw on every notebook. A notebook shows its drill with one call:

    quiz("01_scaled_attention")

Each entry names the notebook section that answers it (its heading, exactly as written); the answer links there.
"""

from __future__ import annotations

import html
import random
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import ipywidgets as W

DRILLS = Path(__file__).parent / "drills"
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"  # the collection (qalib.notebook is a layer above us)


@dataclass(frozen=True)
class Question:
    """One multiple-choice question; `answer` is the index of the right option."""
    prompt: str
    options: list[str]
    answer: int
    explanation: str   # why the answer is right (shown only after checking)
    section: str = ""  # the heading of the notebook section that answers it

    def __post_init__(self):
        if len(self.options) < 2:
            raise ValueError(f"a question needs at least 2 options, got {len(self.options)}")
        if len(set(self.options)) != len(self.options):
            raise ValueError(f"a question's options must differ, got {self.options}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer index {self.answer} is outside options 0..{len(self.options) - 1}")

    def shuffled(self, rng: random.Random) -> "Question":
        """The same question with its options in a new order (the answer index follows its option)."""
        order = list(range(len(self.options)))
        rng.shuffle(order)
        return replace(self, options=[self.options[i] for i in order], answer=order.index(self.answer))


SHORT_MAX_WORDS = 40  # a follow-up's short answer: what one says aloud in about 15 seconds
CORE_RANGE = (20, 30)  # how many follow-ups, over all drills, are marked core: a night's revision, one printed page
_FORMULA = re.compile(r"\$[^$]+\$")


def count_words(text: str) -> int:
    """Whitespace-separated tokens, an inline formula $...$ counting as one word however many spaces it holds."""
    return len(_FORMULA.sub("F", text).split())


@dataclass(frozen=True)
class FollowUp:
    """A follow-up an interviewer asks next, with the answer we would give: short (one line, at most
    SHORT_MAX_WORDS words, said aloud) and in full (markdown, LaTeX allowed)."""
    question: str
    answer: str        # markdown, LaTeX allowed
    section: str       # the heading of the notebook section it builds on
    short: str         # the answer in at most SHORT_MAX_WORDS words, one line
    core: bool = False # one of the few questions to know cold the night before an interview (CORE_RANGE in all)


@dataclass(frozen=True)
class Drill:
    notebook: str                  # the notebook's file name without .ipynb
    follow_ups: list[FollowUp]
    questions: list[Question]


def drill_path(notebook: str) -> Path:
    return DRILLS / f"{notebook}.toml"


def available() -> list[str]:
    """The notebooks that have a drill file, in order."""
    return sorted(p.stem for p in DRILLS.glob("*.toml"))


def _text(entry: dict, key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def load(notebook: str) -> Drill:
    """Read and check qalib/practice/drills/<notebook>.toml. Errors name the file, the entry and the field."""
    path = drill_path(notebook)
    if not path.is_file():
        raise ValueError(f"no drill for notebook {notebook!r}: {path} does not exist (available: {available()})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path.name} is not valid TOML: {err}") from None
    unknown = set(data) - {"drill", "quiz"}
    if unknown:
        raise ValueError(f"{path.name}: unknown tables {sorted(unknown)} (expected 'drill' and 'quiz')")
    follow_ups = []
    for i, entry in enumerate(data.get("drill", []), 1):
        where = f"{path.name}: drill {i}"
        question, answer, section = (_text(entry, key, where) for key in ("question", "answer", "section"))
        short = _text(entry, "short", where).strip()
        if "\n" in short or count_words(short) > SHORT_MAX_WORDS:
            raise ValueError(f"{where}: 'short' must be one line of at most {SHORT_MAX_WORDS} words, got "
                             f"{count_words(short)} words: {short[:60]!r}...")
        core = entry.get("core", False)
        if not isinstance(core, bool):
            raise ValueError(f"{where}: 'core' must be true or false, got {core!r}")
        follow_ups.append(FollowUp(question, answer, section, short, core))
    questions = []
    for i, entry in enumerate(data.get("quiz", []), 1):
        where = f"{path.name}: quiz {i}"
        options = entry.get("options")
        if not isinstance(options, list) or not all(isinstance(o, str) and o.strip() for o in options):
            raise ValueError(f"{where}: 'options' must be a list of non-empty strings, got {options!r}")
        answer = _text(entry, "answer", where)
        if answer not in options:
            raise ValueError(f"{where}: answer {answer!r} is not among the options {options}")
        try:
            questions.append(Question(_text(entry, "prompt", where), options, options.index(answer),
                                      _text(entry, "explanation", where), _text(entry, "section", where)))
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    if not follow_ups or not questions:
        raise ValueError(f"{path.name}: a drill needs at least one [[drill]] and one [[quiz]] entry")
    return Drill(notebook, follow_ups, questions)


def section_anchor(heading: str) -> str:
    """The link target JupyterLab and nbconvert give a markdown heading: its text with spaces as hyphens."""
    return "#" + heading.strip().replace(" ", "-")


SECTION_CHARS = 2500  # how much of a section the mock interview shows inline (whole paragraphs, then "…")


def section_markdown(notebook: str, heading: str, max_chars: int = SECTION_CHARS) -> str | None:
    """The markdown of a notebook's section: from the heading (## or ###, matched exactly) up to the next heading
    of the same or a higher level, markdown cells only (no code, no outputs), cut at a paragraph boundary after
    max_chars. None if the notebook has no such heading. Read from the file: nothing is executed."""
    import json

    path = NOTEBOOKS / f"{notebook}.ipynb"
    if not path.is_file():
        return None
    lines = [line for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "markdown"
             for line in ("".join(cell["source"]) + "\n").splitlines()]
    level, kept = None, []
    for line in lines:
        m = re.match(r"^(#{1,6}) (.*)$", line)
        if level is None:
            if m and m.group(2).strip() == heading.strip() and len(m.group(1)) in (2, 3):
                level = len(m.group(1))
            continue
        if m and len(m.group(1)) <= level:
            break
        kept.append(line)
    if level is None:
        return None
    paras, text = [p.strip() for p in re.split(r"\n\s*\n", "\n".join(kept)) if p.strip()], ""
    for p in paras:
        if text and len(text) + len(p) > max_chars:
            return text + "\n\n…"
        text = f"{text}\n\n{p}" if text else p
    return text


def section_link(heading: str) -> str:
    """A markdown link back to the section that answers an entry."""
    return f"[→ {heading}]({section_anchor(heading)})"


def revealed_answer(short: str, full: str) -> str:
    """Markdown of a revealed follow-up: the short answer in bold, the full one in a folded <details> ("more")."""
    return f"**{short.strip()}**\n\n<details><summary>more</summary>\n\n{full.strip()}\n\n</details>"


def grade(question: Question, choice: int | None) -> tuple[bool, str]:
    """(correct?, feedback) for a chosen option index; None means nothing was chosen yet."""
    if choice is None:
        return False, "Pick an answer first."
    if not 0 <= choice < len(question.options):
        raise ValueError(f"choice {choice} is outside options 0..{len(question.options) - 1}")
    if choice == question.answer:
        return True, f"\u2714 Right. {question.explanation}"
    return False, f"\u2718 Not quite: the answer is \u201c{question.options[question.answer]}\u201d. {question.explanation}"


class Quiz:
    """One block of questions, each with its own Check button and feedback line. The answer and its explanation
    exist only in the feedback, which is empty until Check is pressed."""

    def __init__(self, questions: list[Question]) -> None:
        if not questions:
            raise ValueError("a quiz needs at least one question")
        self.questions = questions
        self.choices: list[W.RadioButtons] = []
        self.feedback: list[W.HTMLMath] = []
        rows = []
        for i, q in enumerate(questions):
            choice = W.RadioButtons(options=[(o, j) for j, o in enumerate(q.options)], value=None,
                                    layout=W.Layout(width="auto"))
            button = W.Button(description="Check", button_style="info")
            feedback = W.HTMLMath()
            button.on_click(lambda _b, i=i: self.check(i))
            self.choices.append(choice)
            self.feedback.append(feedback)
            rows.append(W.VBox([W.HTMLMath(f"<b>Q{i + 1}.</b> {q.prompt}"), choice, button, feedback]))
        self.widget = W.VBox(rows)
        self.widget.add_class("qalib-quiz")

    def check(self, i: int) -> bool:
        question = self.questions[i]
        correct, text = grade(question, self.choices[i].value)
        colour = "#1a9850" if correct else "#b35806"
        where = ""
        if question.section and self.choices[i].value is not None:
            where = f" <a href='{html.escape(section_anchor(question.section))}'>→ {question.section}</a>"
        self.feedback[i].value = f"<span style='color:{colour}'>{text}</span>{where}"
        return correct

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


class FollowUps:
    """The drill's follow-up questions, each with a Reveal button that shows our answer and its section."""

    def __init__(self, follow_ups: list[FollowUp]) -> None:
        self.follow_ups = follow_ups
        self.answers: list[W.Output] = []
        rows = []
        for i, f in enumerate(follow_ups):
            button = W.Button(description="Reveal answer", button_style="")
            answer = W.Output()
            button.on_click(lambda _b, i=i: self.reveal(i))
            self.answers.append(answer)
            rows.append(W.VBox([W.HTMLMath(f"<b>{i + 1}.</b> {f.question}"), button, answer]))
        self.widget = W.VBox(rows)
        self.widget.add_class("qalib-drill")

    def reveal(self, i: int) -> str:
        """Show follow-up i's answer (once): the short one, the full one folded under it; return the markdown."""
        from IPython.display import Markdown

        f = self.follow_ups[i]
        text = f"{revealed_answer(f.short, f.answer)}\n\n{section_link(f.section)}"
        self.answers[i].outputs = ()  # not clear_output(): setting the trait works in every front end
        self.answers[i].append_display_data(Markdown(text))
        return text


class DrillView:
    """What quiz() shows: the follow-ups, then the self-check quiz (both kept, so that tests can press buttons)."""

    def __init__(self, drill: Drill, rng: random.Random) -> None:
        self.drill = drill
        self.follow_ups = FollowUps(drill.follow_ups)
        self.quiz = Quiz([q.shuffled(rng) for q in drill.questions])
        self.widget = W.VBox([W.HTML("<b>Follow-ups an interviewer asks next</b>"), self.follow_ups.widget,
                              W.HTML("<b>Self-check</b>"), self.quiz.widget])

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def quiz(notebook: str, seed: int | None = None) -> DrillView:
    """The notebook's drill: its follow-ups (answers hidden until revealed), then its self-check quiz with the
    options shuffled for this view (`seed` fixes the order, e.g. in tests)."""
    return DrillView(load(notebook), random.Random(seed))
