"""Write-it-yourself exercises: implement a piece of a Transformer, and a checker says whether it is right and, if
not, what the likely mistake is.

    from qalib.practice import exercises
    exercises.list_exercises()                 # the names
    exercises.show_stub("attention")           # the signature and contract, to copy
    result = exercises.check("attention", my_attention)
    result.hint(1); result.hint(2)             # a first hint, then a more specific one
    exercises.show_solution("attention")       # a readable solution, folded until clicked

    attempt = exercises.start("rope", minutes=15)   # interview practice: the clock runs from here
    attempt.check(my_rope)                           # the result says how long it took

Modules: stubs (the exercises), references (qalib's own functions as the references), cases (the inputs),
diagnose (known mistakes and their graded hints), mlm (mlm_mask's property checks), runner (a time-limited call
that cannot hang the kernel), checker (check and its result), solutions (shown only on request), timed (the clock).
"""

from __future__ import annotations

import html
import inspect

from qalib.nn.validate import choice
from qalib.practice.exercises import solutions, stubs
from qalib.practice.exercises.checker import NAMES, CheckResult, Failure, case_inputs, check
from qalib.practice.exercises.timed import Attempt, start


def list_exercises() -> list[str]:
    return list(NAMES)


class Source(str):
    """Source code: plain text in a console, a block in a notebook (a folded one opens with a click)."""

    def __new__(cls, text: str, title: str, folded: bool = True):
        obj = super().__new__(cls, text)
        obj.title, obj.folded = title, folded
        return obj

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        state = "" if self.folded else " open"
        return (f"<details class='qalib-solution'{state}><summary>{html.escape(self.title)}</summary>"
                f"<pre>{html.escape(str(self))}</pre></details>")


def show_stub(name: str) -> Source:
    """The exercise's signature and contract, to copy into a cell."""
    return Source(inspect.getsource(getattr(stubs, choice("name", name, NAMES))), f"The exercise: {name}", folded=False)


def show_solution(name: str) -> Source:
    """A readable solution, only when asked for: in a notebook it stays folded until clicked."""
    return Source(inspect.getsource(getattr(solutions, choice("name", name, NAMES))), f"A solution: {name} (click to open)")


__all__ = ["list_exercises", "show_stub", "show_solution", "check", "case_inputs", "CheckResult", "Failure",
           "start", "Attempt"]
