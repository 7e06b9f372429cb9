"""Linear probes: can a linear map read a property (a token, its position, its segment) out of vectors?

    W = fit_probe(X_train, y_train, n_classes)      # least squares on one-hot targets, with a bias
    probe_accuracy(W, X_test, y_test)               # the share of argmax predictions that are right

Used by several notebooks (04 on summed embeddings, 11 on hidden states after pre-training).
"""

from __future__ import annotations

import torch


def fit_probe(X: torch.Tensor, y, n_classes, ridge: float = 1e-5) -> torch.Tensor:
    """Least-squares linear probe with a bias: (d + 1, C) weights mapping X to one-hot targets (argmax predicts).

    y, n_classes may be lists (several probes on the same X): one Gram matrix, one solve, weights side by side."""
    ys, cs = (list(y), list(n_classes)) if isinstance(n_classes, (list, tuple)) else ([y], [n_classes])
    Xb = torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], dim=1)  # (N, d + 1)
    gram = Xb.T @ Xb                                                   # (d + 1, d + 1)
    rhs = torch.cat([torch.zeros(c, Xb.shape[1], dtype=X.dtype).index_add_(0, yy, Xb)  # (onehot(y)^T X)
                     for yy, c in zip(ys, cs)], dim=0).T                                # (d + 1, sum C)
    gram, rhs = gram.double(), rhs.double()                         # the small solve in float64: sums can be rank-deficient
    eye, scale = torch.eye(len(gram), dtype=gram.dtype), gram.diagonal().mean()
    for lam in (ridge, ridge * 100, ridge * 1e4):  # float32 Gram errors can make a rank-deficient Gram slightly indefinite
        chol, info = torch.linalg.cholesky_ex(gram + lam * scale * eye)
        if info == 0:
            break
    return torch.cholesky_solve(rhs, chol).to(X.dtype)


def probe_accuracy(Wp: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    return float(((X @ Wp[:-1] + Wp[-1]).argmax(-1) == y).double().mean())
