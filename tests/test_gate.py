"""qalib.lab.gate: a run is read only if it beat a stated baseline by a stated margin."""

import math

import pytest

from qalib.lab.gate import learned, learned_share


def test_higher_and_lower_is_better():
    acc = learned("held-out accuracy", 0.93, baseline=0.25, baseline_name="chance", margin=0.1)
    assert acc.passed and acc.threshold == pytest.approx(0.35)
    assert str(acc) == "learned: held-out accuracy 0.93 > chance 0.25 + 0.1"
    loss = learned("final loss (nats)", 3.2, baseline=3.11, baseline_name="the unigram level", margin=0.3,
                   higher_is_better=False)
    assert not loss.passed and str(loss).startswith("did NOT learn: final loss (nats) 3.2 not <")


def test_the_edge_and_nan_do_not_pass():
    assert not learned("acc", 0.35, 0.25, "chance", 0.1).passed  # exactly at the threshold: not past it
    assert not learned("acc", math.nan, 0.25, "chance", 0.1).passed
    assert not learned("loss", math.inf, 3.0, "unigram", 0.1, higher_is_better=False).passed


@pytest.mark.parametrize("kwargs, error", [
    (dict(metric="", value=1.0, baseline=0.5, baseline_name="chance", margin=0.1), ValueError),
    (dict(metric="acc", value=1.0, baseline=0.5, baseline_name="chance", margin=-0.1), ValueError),
    (dict(metric="acc", value=True, baseline=0.5, baseline_name="chance", margin=0.1), TypeError),
    (dict(metric="acc", value=1.0, baseline=math.nan, baseline_name="chance", margin=0.1), ValueError),
])
def test_bad_gates_are_refused(kwargs, error):
    with pytest.raises(error):
        learned(**kwargs)


def test_learned_share():
    gates = [learned("acc", v, 0.25, "chance", 0.1) for v in (0.9, 0.2, 0.5, 0.3)]
    assert learned_share(gates) == 0.5
    with pytest.raises(ValueError):
        learned_share([])
