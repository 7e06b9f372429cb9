"""Self-check quizzes for the interview drills: pick an answer, press Check, get told whether you were right.

    Quiz([Question("Var(q.k) for unit-variance q, k in d_k dims?", ["1", "d_k", "sqrt(d_k)"], 1,
                   "a sum of d_k independent products, each with variance 1")])
"""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as W


@dataclass(frozen=True)
class Question:
    prompt: str
    options: list[str]
    answer: int        # index into options
    explanation: str   # why the answer is right (shown after checking)

    def __post_init__(self):
        if len(self.options) < 2:
            raise ValueError(f"a question needs at least 2 options, got {len(self.options)}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer index {self.answer} is outside options 0..{len(self.options) - 1}")


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
    """One block of questions, each with its own Check button and feedback line."""

    def __init__(self, questions: list[Question]) -> None:
        if not questions:
            raise ValueError("a quiz needs at least one question")
        self.questions = questions
        self.choices: list[W.RadioButtons] = []
        self.feedback: list[W.HTML] = []
        rows = []
        for i, q in enumerate(questions):
            choice = W.RadioButtons(options=[(o, j) for j, o in enumerate(q.options)], value=None,
                                    layout=W.Layout(width="auto"))
            button = W.Button(description="Check", button_style="info")
            feedback = W.HTML()
            button.on_click(lambda _b, i=i: self.check(i))
            self.choices.append(choice)
            self.feedback.append(feedback)
            rows.append(W.VBox([W.HTML(f"<b>Q{i + 1}.</b> {q.prompt}"), choice, button, feedback]))
        self.widget = W.VBox(rows)
        self.widget.add_class("qalib-quiz")

    def check(self, i: int) -> bool:
        correct, text = grade(self.questions[i], self.choices[i].value)
        colour = "#1a9850" if correct else "#b35806"
        self.feedback[i].value = f"<span style='color:{colour}'>{text}</span>"
        return correct

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
