"""qalib.practice.exercises: every reference and solution passes; typical wrong answers fail with the right hint; a
function that raises, returns NaN, the wrong shape or never returns is reported plainly, and the kernel goes on."""

import threading
import time

import pytest
import torch

from exercise_mistakes import MISTAKES
from qalib.practice import exercises
from qalib.practice.exercises import references, solutions, stubs
from qalib.practice.exercises.diagnose import MISTAKES as KNOWN

NAMES = exercises.list_exercises()


def test_the_eight_exercises_of_the_issue():
    assert NAMES == ["attention", "causal_mask", "layer_norm", "sinusoidal", "multi_head_attention", "rope",
                     "kv_cache_step", "mlm_mask"]


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_and_the_solution_pass(name):
    for fn in (getattr(references, name), getattr(solutions, name)):
        result = exercises.check(name, fn)
        assert result.passed, result
        assert result.hint(1) == "Passed: no hint needed."


@pytest.mark.parametrize("name", NAMES)
def test_a_stub_is_reported_as_not_implemented(name):
    result = exercises.check(name, getattr(stubs, name))
    assert not result.passed and result.status == "not implemented yet"
    assert "not implemented yet" in repr(result)


@pytest.mark.parametrize("name, wrong, words", MISTAKES, ids=[f"{n}-{w.__name__}" for n, w, _ in MISTAKES])
def test_a_typical_mistake_fails_with_its_hint(name, wrong, words):
    result = exercises.check(name, wrong)
    assert not result.passed and result.failures
    assert words in result.hint(2), f"hint 2 was: {result.hint(2)}"
    assert result.hint(1) != result.hint(2), "the hints are graded: the first is not the second"


def test_at_least_two_typical_mistakes_per_exercise():
    assert all(sum(n == name for n, _, _ in MISTAKES) >= 2 for name in NAMES)


@pytest.mark.parametrize("name", list(KNOWN))
def test_each_known_mistake_is_caught_and_named(name):
    """The diagnosis's own wrong functions: each fails, and is named by its own hint (no two are confused)."""
    for mistake in KNOWN[name]:
        result = exercises.check(name, mistake.wrong)
        assert not result.passed and result.hints == (mistake.hint1, mistake.hint2), (mistake.name, result)


def test_a_function_that_raises_is_reported_with_type_and_message():
    def broken(q, k, v, mask=None):
        raise KeyError("oops")

    result = exercises.check("attention", broken)
    assert not result.passed and result.status == "failed"
    assert all(f.what == "raised KeyError: 'oops'" for f in result.failures)
    assert "case_inputs" in result.hint(2)
    def verbose(T):
        raise RuntimeError("first line\n" + "x" * 5000)  # torch's dispatcher errors run to pages

    long = exercises.check("causal_mask", verbose)
    assert long.failures[0].what == "raised RuntimeError: first line ..."


def test_not_implemented_later_on_is_a_failure_not_a_stub():
    def no_masks(q, k, v, mask=None):
        if mask is not None:
            raise NotImplementedError("masks later")
        return solutions.attention(q, k, v)

    result = exercises.check("attention", no_masks)
    assert result.status == "failed" and "raised NotImplementedError: masks later" in result.failures[0].what


def test_nan_wrong_shape_and_wrong_dtype_are_reported_plainly():
    nan = exercises.check("layer_norm", lambda x, w, b, eps=1e-5: x * float("nan"))
    assert "NaN or inf entries" in nan.failures[0].what
    shape = exercises.check("attention", lambda q, k, v, mask=None: v)
    assert "shape" in shape.failures[0].what and "(..., T_q, d_v)" in shape.hint(2)
    dtype = exercises.check("rope", lambda x, base=10000.0: references.rope(x.float()))
    assert [f.case for f in dtype.failures] == ["fp16"]
    assert "dtype torch.float32, expected torch.float16" in dtype.failures[0].what
    meta = exercises.check("causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool, device="meta"))
    assert "a tensor on meta, expected cpu" in meta.failures[0].what
    sparse = exercises.check("rope", lambda x, base=10000.0: references.rope(x).to_sparse())
    assert "a torch.sparse_coo tensor, expected a dense one" in sparse.failures[0].what
    not_a_tensor = exercises.check("causal_mask", lambda T: [[True] * T] * T)
    assert "returned list, expected a torch.Tensor" in not_a_tensor.failures[0].what


def test_a_python_loop_that_never_ends_is_stopped():
    def forever(T):
        while True:
            pass

    start = time.monotonic()
    result = exercises.check("causal_mask", forever, time_limit=0.3)
    assert time.monotonic() - start < 3
    assert result.status == "timed out" and "it was stopped" in result.failures[0].what
    assert not [t for t in threading.enumerate() if t.name == "qalib-exercise"], "the stopped thread is gone"
    assert exercises.check("causal_mask", solutions.causal_mask).passed, "and the checker still works"


def test_a_call_stuck_in_c_is_abandoned_and_says_so():
    result = exercises.check("causal_mask", lambda T: time.sleep(1.5), time_limit=0.2)
    assert result.status == "timed out" and "still running in the background" in result.failures[0].what
    assert exercises.check("causal_mask", solutions.causal_mask).passed, "the checker works meanwhile"
    for t in [t for t in threading.enumerate() if t.name == "qalib-exercise"]:
        t.join(3)  # it ends when the sleep does; leave no thread behind for the next test


def test_arguments_are_validated_by_name():
    with pytest.raises(ValueError, match=r"name must be one of \['attention'"):
        exercises.check("atention", solutions.attention)
    with pytest.raises(TypeError, match="fn must be a function"):
        exercises.check("attention", solutions.attention(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2)))
    with pytest.raises(ValueError, match="time_limit"):
        exercises.check("attention", solutions.attention, time_limit=0)
    with pytest.raises(ValueError, match="level"):
        exercises.check("attention", solutions.attention).hint(3)


def test_the_html_escapes_what_the_student_produced():
    def evil(T):
        raise ValueError("<script>alert(1)</script>")

    page = exercises.check("causal_mask", evil)._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_solutions_are_shown_folded_and_only_when_asked():
    shown = exercises.show_solution("rope")
    assert "def rope" in shown and shown._repr_html_().startswith("<details class='qalib-solution'>")
    assert "<details class='qalib-solution' open>" in exercises.show_stub("rope")._repr_html_()
    assert "raise NotImplementedError" in exercises.show_stub("rope")


def test_a_case_can_be_reproduced():
    args, kwargs = exercises.case_inputs("attention", "fully masked rows")
    out = solutions.attention(*args, **kwargs)
    assert (out[0, :, 2] == 0).all()
    with pytest.raises(ValueError, match="case must be one of"):
        exercises.case_inputs("attention", "nope")


def test_timed_mode_reports_the_time_since_the_start():
    now = [100.0]
    attempt = exercises.start("causal_mask", minutes=5, clock=lambda: now[0])
    now[0] += 130
    first = attempt.check(lambda T: torch.ones(T, T, dtype=torch.bool).triu())
    assert not first.passed and first.elapsed_s == 130 and attempt.solved_after_s is None
    now[0] += 200
    second = attempt.check(solutions.causal_mask)
    assert second.passed and attempt.solved_after_s == 330
    assert "5 min 30 s since the start (over the 5 min budget)" in repr(second)
    with pytest.raises(ValueError, match="minutes"):
        exercises.start("rope", minutes=0)


def test_the_package_imports_only_the_model_and_the_lab():
    """Like a topic module it sits above the model and the lab; it needs no drawing, widgets, topics, tools, or
    the rest of the practice package (test_layers.py checks the package as a whole)."""
    from pathlib import Path

    from test_layers import imports

    for path in sorted((Path(exercises.__file__).parent).glob("*.py")):
        used = {m for m in imports(path) if m.startswith("qalib") and not m.startswith("qalib.practice.exercises")}
        outside = {m for m in used if m.split(".")[:2] not in (["qalib", "nn"], ["qalib", "lab"])}
        assert not outside, f"{path.name} imports {outside}"
