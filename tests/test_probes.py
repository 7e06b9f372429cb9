"""qalib.lab.probes: the least-squares linear probe the notebooks use to read properties out of vectors."""

import torch

from qalib.lab.probes import fit_probe, probe_accuracy


def test_fit_probe_recovers_a_linear_code():
    X = torch.eye(5, dtype=torch.float64).repeat(3, 1) * 2.0 + 0.5  # 5 classes, each a distinct direction
    y = torch.arange(5).repeat(3)
    Wp = fit_probe(X, y, 5)
    assert probe_accuracy(Wp, X, y) == 1.0
