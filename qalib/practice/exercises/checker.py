"""check(name, fn): run a student's function on every case of an exercise and say plainly what went wrong.

    result = check("attention", my_attention)
    result.passed, result.failures, result.hint(1), result.hint(2)

The reference runs on float64 copies of each case's inputs and is cast back to the inputs' dtype. A failure is one
of: the function raised, did not return in time, returned something that is not a tensor, the wrong shape or dtype,
NaN or inf, or wrong values. Wrong values are diagnosed against the exercise's known mistakes (diagnose.py).
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from qalib.nn.validate import choice, float_in, int_in
from qalib.practice.exercises import mlm, references
from qalib.practice.exercises.cases import CASES, Case
from qalib.practice.exercises.diagnose import MISTAKES
from qalib.practice.exercises.runner import run_limited

NAMES = tuple(CASES)
OUTPUT_NAMES = {"kv_cache_step": ("out", "new cache_k", "new cache_v")}
SHAPE_HINTS = {
    "attention": "The output has q's leading dims and T_q, and v's last dim: (..., T_q, d_v).",
    "causal_mask": "The mask is (T, T): one row per query, one column per key.",
    "layer_norm": "LayerNorm keeps the shape of x; the mean and variance need keepdim=True to broadcast.",
    "sinusoidal": "The table is (n_positions, d_model): one row per position.",
    "multi_head_attention": "Merge the heads back to (B, T, d) before w_o.",
    "rope": "RoPE keeps the shape of x: interleave the rotated pairs back with stack(..., dim=-1).flatten(-2).",
    "kv_cache_step": "Concatenate along the time axis, dim=-2: the caches grow from T_cache to T_cache + T_new.",
}


@dataclass(frozen=True)
class Failure:
    case: str
    description: str
    what: str


@dataclass
class CheckResult:
    name: str
    passed: bool
    status: str  # "passed", "failed", "not implemented yet", "timed out"
    n_cases: int
    failures: list[Failure] = field(default_factory=list)
    hints: tuple[str, ...] = ()
    elapsed_s: float | None = None       # timed mode: seconds since the exercise was started
    time_budget_s: float | None = None   # timed mode: the budget set at the start, if any

    def hint(self, level: int = 1) -> str:
        """The graded hints: 1 says where to look, 2 says what went wrong and how to fix it."""
        level = int_in("level", level, 1, 2)
        if self.passed:
            return "Passed: no hint needed."
        if self.status == "not implemented yet":
            return "Write the function first: the hints are about what your version gets wrong."
        return self.hints[min(level, len(self.hints)) - 1]

    def timing(self) -> str:
        if self.elapsed_s is None:
            return ""
        minutes, seconds = divmod(int(round(self.elapsed_s)), 60)
        line = f"{minutes} min {seconds:02d} s since the start"
        if self.time_budget_s is not None:
            over = self.elapsed_s > self.time_budget_s
            line += f" ({'over' if over else 'within'} the {self.time_budget_s / 60:g} min budget)"
        return line

    def lines(self) -> list[str]:
        if self.passed:
            head = f"\u2714 {self.name}: passed all {self.n_cases} cases"
        elif self.status == "not implemented yet":
            head = f"\u2026 {self.name}: not implemented yet (the function raises NotImplementedError)"
        else:
            head = f"\u2718 {self.name}: {self.status} on {len(self.failures)} of {self.n_cases} cases"
        out = [head] + ([f"  {self.timing()}"] if self.timing() else [])
        out += [f"  - {f.case} ({f.description}): {f.what}" for f in self.failures]
        if self.hints:
            out.append("  result.hint(1) and result.hint(2) give a first and a more specific hint.")
        return out

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        head, *rest = self.lines()
        colour = "#1a7f37" if self.passed else "#555" if self.status == "not implemented yet" else "#b42318"
        items = "".join(f"<li>{html.escape(line.strip().removeprefix('- '))}</li>" for line in rest)
        return f"<div class='qalib-exercise'><b style='color:{colour}'>{html.escape(head)}</b><ul>{items}</ul></div>"


def case_inputs(name: str, case: str) -> tuple[tuple, dict]:
    """(args, kwargs) of one case, to reproduce a failure: fn(*args, **kwargs)."""
    cases = {c.name: c for c in CASES[choice("name", name, NAMES)]()}
    return cases[choice("case", case, list(cases))].inputs()


def check(name: str, fn: Callable, time_limit: float = 5.0) -> CheckResult:
    """Compare fn with the reference of exercise `name` on every case; never raises because of what fn does."""
    choice("name", name, NAMES)
    if not callable(fn):
        raise TypeError(f"fn must be a function (callable), got {type(fn).__name__}: pass the function itself, "
                        f"check({name!r}, {name}), not its result")
    time_limit = float_in("time_limit", time_limit, 0, 600, lo_open=True)
    cases = CASES[name]()
    failures: list[Failure] = []
    hints: tuple[str, ...] = ()
    named_mistake = False
    for case in cases:
        args, kwargs = case.inputs()
        outcome = run_limited(fn, args, kwargs, time_limit)
        if outcome.timed_out:
            note = (" and is still running in the background (it is stuck in one long call; restart the kernel if "
                    "it slows things down)") if outcome.still_running else "; it was stopped"
            failures.append(Failure(case.name, case.description, f"did not return within {time_limit:g} s{note}"))
            hints = hints or (f"Your function did not finish on case '{case.name}' ({case.description}).",
                              "Look for a loop that never ends, or one over many elements: the cases are small, so a "
                              "vectorised solution returns in milliseconds.")
            return CheckResult(name, False, "timed out", len(cases), failures, hints)
        if isinstance(outcome.error, NotImplementedError) and case is cases[0]:  # the stub, untouched
            return CheckResult(name, False, "not implemented yet", len(cases))
        if outcome.error is not None:
            err = outcome.error
            failures.append(Failure(case.name, case.description, f"raised {_short(err)}"))
            hints = hints or (f"Your function raised {type(err).__name__} on case '{case.name}' ({case.description}).",
                              f"The message was \"{_short(err)}\". Reproduce it with args, kwargs = "
                              f"exercises.case_inputs({name!r}, {case.name!r}); then call your function on them.")
            continue
        try:
            problem = _mlm_problems(case, outcome.value, fn, time_limit) if name == "mlm_mask" else \
                _tensor_problem(name, case, outcome.value)
        except Exception as err:  # noqa: BLE001 - an output too odd to compare is the student's failure, not ours
            problem = (f"returned an output the checker cannot compare ({_short(err)})",
                       ("Check what your function returns.", "Return plain CPU torch tensors, as the exercise states."),
                       False)
        if problem is None:
            continue
        what, case_hints, named = problem
        failures.append(Failure(case.name, case.description, what))
        if named and not named_mistake:  # a named mistake is the most useful hint, whichever case showed it
            hints, named_mistake = case_hints, True
        hints = hints or case_hints
    if failures:
        return CheckResult(name, False, "failed", len(cases), failures, hints)
    return CheckResult(name, True, "passed", len(cases))


def _short(err: BaseException, limit: int = 200) -> str:
    """'Type: message', the message cut to its first line and `limit` characters (torch's can run to pages)."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else ""
    return f"{type(err).__name__}: {text[:limit]}{' ...' if len(text) > limit or len(lines) > 1 else ''}"


def _reference(name: str, case: Case):
    """The reference output on float64 copies of the inputs, cast back to the inputs' floating dtype."""
    args, kwargs = case.inputs(torch.float64)
    out = getattr(references, name)(*args, **kwargs)
    dtypes = [a.dtype for a in case.args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    cast = (lambda t: t.to(dtypes[0]) if t.is_floating_point() else t) if dtypes else (lambda t: t)
    return tuple(map(cast, out)) if isinstance(out, tuple) else cast(out)


def _close(a: torch.Tensor, b: torch.Tensor, case: Case) -> bool:
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.allclose(a.double(), b.double(), atol=case.atol, rtol=case.rtol, equal_nan=True)


def _tensor_problem(name: str, case: Case, got):
    """None if `got` matches the reference on this case, else (what went wrong, (hint 1, hint 2), whether the hints
    name a specific mistake)."""
    expected = _reference(name, case)
    labels = OUTPUT_NAMES.get(name, ("output",))
    if isinstance(expected, tuple):
        if not (isinstance(got, (tuple, list)) and len(got) == len(expected)):
            what = f"returned {type(got).__name__}, expected a tuple of {len(expected)} tensors ({', '.join(labels)})"
            return what, ("Check what your function returns.", f"Return the tuple ({', '.join(labels)})."), False
    else:
        got, expected = (got,), (expected,)
    where = lambda label: "" if len(labels) == 1 else f"{label}: "  # noqa: E731
    for label, g, e in zip(labels, got, expected):
        if not isinstance(g, torch.Tensor):
            return (f"{where(label)}returned {type(g).__name__}, expected a torch.Tensor",
                    ("Return a torch.Tensor.", "Build the result with torch operations, not Python lists or numpy."), False)
        if g.layout != torch.strided:
            return (f"{where(label)}a {g.layout} tensor, expected a dense one",
                    ("Return a dense tensor.", "Build the result with dense torch operations (or call .to_dense())."),
                    False)
        if g.device != e.device:
            return (f"{where(label)}a tensor on {g.device}, expected {e.device}",
                    ("Return the result on the inputs' device.", "Do not move tensors to another device: the inputs "
                     "are on the CPU, and so should the output be."), False)
        if g.shape != e.shape:
            return (f"{where(label)}shape {tuple(g.shape)}, expected {tuple(e.shape)}",
                    (f"The shape is wrong on case '{case.name}' ({case.description}).", SHAPE_HINTS[name]), False)
        if g.dtype != e.dtype:
            return (f"{where(label)}dtype {g.dtype}, expected {e.dtype}",
                    (f"The dtype is wrong on case '{case.name}' ({case.description}).",
                     f"Return {e.dtype}, the dtype the exercise states (float inputs give their own dtype back; "
                     "compute in higher precision if you like, then convert with .to(...))."), False)
        if g.is_floating_point() and not torch.isfinite(g).all() and torch.isfinite(e).all():
            return (f"{where(label)}{int((~torch.isfinite(g)).sum())} NaN or inf entries",
                    (f"Your output has NaN or inf on case '{case.name}' ({case.description}).",
                     case.nan_hint or "Find the first step whose result is not finite: print each intermediate."),
                    bool(case.nan_hint))
    for label, g, e in zip(labels, got, expected):
        if not _close(g, e, case):
            if g.dtype == torch.bool:
                what = f"{where(label)}wrong values: {int((g != e).sum())} of {e.numel()} entries differ"
            else:
                what = f"{where(label)}wrong values: largest difference {(g.double() - e.double()).abs().max().item():.3g}"
            named = _diagnose(name, case, got, expected)
            return what, named or (
                f"The values are wrong on case '{case.name}' ({case.description}).",
                f"Reproduce it with args, kwargs = exercises.case_inputs({name!r}, {case.name!r}) and check each "
                "step's shape and values by hand on a small example."), named is not None
    return None


def _diagnose(name: str, case: Case, got, expected):
    """The hints of the first known mistake whose output the student's matches and the reference's does not."""
    for mistake in MISTAKES[name]:
        args, kwargs = case.inputs()
        try:
            with warnings.catch_warnings():  # a mistake's own warnings (var with 0 degrees of freedom) are not news
                warnings.simplefilter("ignore")
                wrong = mistake.wrong(*args, **kwargs)
        except (RuntimeError, ValueError):  # this mistake cannot even run on this case, so it is not the student's
            continue
        wrong = wrong if isinstance(wrong, tuple) else (wrong,)
        same = lambda xs, ys: all(x.shape == y.shape and _close(x, y, case) for x, y in zip(xs, ys))  # noqa: E731
        if same(got, wrong) and not same(wrong, expected):
            return mistake.hint1, mistake.hint2
    return None


def _mlm_problems(case: Case, got, fn, time_limit: float):
    args, kwargs = case.inputs()
    ids, vocab_size = args

    def again():
        a, k = case.inputs()
        return run_limited(fn, a, k, time_limit).value

    found = mlm.problems(ids, got, kwargs, vocab_size, again)
    if not found:
        return None
    what, hint1, hint2 = found[0]
    return "; ".join(p[0] for p in found), (hint1, hint2), True
