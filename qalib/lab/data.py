"""Data with known ground truth, generated from a seed in milliseconds.

Token ids 0-4 are reserved as in BERT's vocabulary ([PAD] [UNK] [CLS] [SEP] [MASK]); content tokens
are 5 .. vocab_size-1.

    SyntheticLanguage  a small language whose token at t depends on t-1 (a sparse bigram table) and,
                       with probability p_lag, on the token `lag` places back (a fixed permutation).
    mask_tokens        BERT's rule: choose 15% of positions; 80% [MASK], 10% random, 10% unchanged.
    Tasks              each task draws fresh batches: MLMTask, PairTask (is B the continuation of A?),
                       ProbeTask (copy the previous token, the token k back, reverse).
    text_file_sequences  any local text file through the real WordPiece tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from qalib.nn.validate import choice, int_in, probability

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
N_SPECIAL = 5
IGNORE = -100  # label for positions that carry no loss (PyTorch's cross_entropy ignore_index)


@dataclass
class Batch:
    input_ids: torch.Tensor        # (B, T) long
    token_type_ids: torch.Tensor   # (B, T) long
    attention_mask: torch.Tensor   # (B, T) long, 1 = real token
    labels: torch.Tensor           # (B, T) token labels (IGNORE where none) or (B,) class labels
    kind: Literal["token", "class"]

    def to(self, device) -> "Batch":
        return Batch(self.input_ids.to(device), self.token_type_ids.to(device), self.attention_mask.to(device),
                     self.labels.to(device), self.kind)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids, "attention_mask": self.attention_mask}


class SyntheticLanguage:
    """x_t ~ uniform over `branching` successors of x_{t-1}; with probability p_lag instead x_t = perm[x_{t-lag}].

    Everything (successor table, permutation) is fixed by `seed`, so the language is the same in every run.
    """

    def __init__(self, vocab_size: int = 64, branching: int = 4, lag: int = 4, p_lag: float = 0.5, seed: int = 0):
        self.vocab_size = int_in("vocab_size", vocab_size, N_SPECIAL + 2)
        self.n_content = self.vocab_size - N_SPECIAL
        self.branching = int_in("branching", branching, 1, self.n_content)  # successors among the content tokens
        self.lag = int_in("lag", lag, 1)
        self.p_lag = probability("p_lag", p_lag)
        g = torch.Generator().manual_seed(seed)
        # successors[a] = the `branching` tokens allowed after content token a (as content indices)
        self.successors = torch.stack([torch.randperm(self.n_content, generator=g)[:branching] for _ in range(self.n_content)])
        self.lag_map = torch.randperm(self.n_content, generator=g)

    def sample(self, n: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(n, length) content token ids (no special tokens)."""
        n, length = int_in("n", n, 1), int_in("length", length, 1)
        x = torch.empty(n, length, dtype=torch.long)
        x[:, 0] = torch.randint(self.n_content, (n,), generator=generator)
        for t in range(1, length):
            choice = torch.randint(self.branching, (n,), generator=generator)
            nxt = self.successors[x[:, t - 1], choice]
            if t >= self.lag and self.p_lag > 0:
                use_lag = torch.rand(n, generator=generator) < self.p_lag
                nxt = torch.where(use_lag, self.lag_map[x[:, t - self.lag]], nxt)
            x[:, t] = nxt
        return x + N_SPECIAL


# How far above 1 mask_frac + random_frac may add up in floats and still mean "every chosen position is changed":
# 0.8 + 0.2 may be 1.0000000000000002. A sum within it draws [MASK] or random for every chosen position.
RATE_SUM_TOLERANCE = 1e-9


def masking_rates(mlm_prob: float, mask_frac: float, random_frac: float) -> tuple[float, float, float]:
    """BERT's three masking rates as floats, checked: each a probability, and a chosen position cannot be both
    [MASK] and random, so mask_frac + random_frac <= 1 (the rest stays unchanged)."""
    p, m, r = probability("mlm_prob", mlm_prob), probability("mask_frac", mask_frac), probability("random_frac", random_frac)
    if m + r > 1 + RATE_SUM_TOLERANCE:
        raise ValueError(f"mask_frac + random_frac must be <= 1 (the rest stays unchanged), got {m:g} + {r:g}")
    return p, m, r


def mask_tokens(
    input_ids: torch.Tensor,
    vocab_size: int,
    generator: torch.Generator | None = None,
    mlm_prob: float = 0.15,
    mask_frac: float = 0.8,
    random_frac: float = 0.1,
    maskable: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking (Devlin et al. 2019, sec. 3.1 and appendix A.1).

    Each maskable position is chosen with probability mlm_prob; a chosen position becomes [MASK] with
    probability mask_frac, a random content token with probability random_frac, and stays unchanged
    otherwise. Returns (corrupted ids, labels), labels = original id at chosen positions, IGNORE elsewhere.
    maskable defaults to every non-special token.
    """
    mlm_prob, mask_frac, random_frac = masking_rates(mlm_prob, mask_frac, random_frac)
    if maskable is None:
        maskable = input_ids >= N_SPECIAL
    chosen = (torch.rand(input_ids.shape, generator=generator) < mlm_prob) & maskable
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    action = torch.rand(input_ids.shape, generator=generator)
    to_mask = chosen & (action < mask_frac)
    to_random = chosen & (action >= mask_frac) & (action < mask_frac + random_frac)
    random_ids = torch.randint(N_SPECIAL, vocab_size, input_ids.shape, generator=generator)
    corrupted = torch.where(to_mask, torch.full_like(input_ids, MASK), input_ids)
    corrupted = torch.where(to_random, random_ids, corrupted)
    return corrupted, labels


def with_cls_sep(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T + 2): [CLS] tokens [SEP]."""
    b = tokens.shape[0]
    return torch.cat([torch.full((b, 1), CLS), tokens, torch.full((b, 1), SEP)], dim=1)


# ---------------------------------------------------------------------------------------------
# Tasks: task.batch(batch_size, generator) -> Batch
# ---------------------------------------------------------------------------------------------
@dataclass
class MLMTask:
    language: SyntheticLanguage
    seq_len: int = 32
    mlm_prob: float = 0.15
    mask_frac: float = 0.8
    random_frac: float = 0.1

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        ids = with_cls_sep(self.language.sample(batch_size, self.seq_len, generator))
        corrupted, labels = mask_tokens(ids, self.language.vocab_size, generator, self.mlm_prob, self.mask_frac, self.random_frac)
        return Batch(corrupted, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


@dataclass
class PairTask:
    """[CLS] A [SEP] B [SEP]; label 1 if B continues A in the same sample, 0 if B comes from another sample."""

    language: SyntheticLanguage
    half_len: int = 12

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        seq = self.language.sample(batch_size, 2 * self.half_len, generator)
        a, b = seq[:, : self.half_len], seq[:, self.half_len:]
        label = (torch.rand(batch_size, generator=generator) < 0.5).long()  # BERT's NSP: 50% true next
        other = self.language.sample(batch_size, 2 * self.half_len, generator)[:, self.half_len:]
        b = torch.where(label[:, None].bool(), b, other)
        cls, sep = torch.full((batch_size, 1), CLS), torch.full((batch_size, 1), SEP)
        ids = torch.cat([cls, a, sep, b, sep], dim=1)
        types = torch.cat([torch.zeros(batch_size, self.half_len + 2, dtype=torch.long),
                           torch.ones(batch_size, self.half_len + 1, dtype=torch.long)], dim=1)
        return Batch(ids, types, torch.ones_like(ids), label, "class")


@dataclass
class ProbeTask:
    """Order-sensitive token tasks on uniformly random tokens (no statistics to lean on):

    previous: label_t = x_{t-1};  k_back: label_t = x_{t-k};  reverse: label_t = x_{T-1-t}.
    Positions without a defined answer carry IGNORE. seq_len may vary per call (evaluate longer than trained).
    """

    kind: Literal["previous", "k_back", "reverse"] = "previous"
    vocab_size: int = 32
    seq_len: int = 16
    k: int = 1

    def __post_init__(self):
        choice("ProbeTask.kind", self.kind, ("previous", "k_back", "reverse"))
        int_in("ProbeTask.vocab_size", self.vocab_size, N_SPECIAL + 2)
        int_in("ProbeTask.seq_len", self.seq_len, 2)
        int_in("ProbeTask.k", self.k, 1)

    def batch(self, batch_size: int, generator: torch.Generator | None = None, seq_len: int | None = None) -> Batch:
        t = seq_len or self.seq_len
        x = torch.randint(N_SPECIAL, self.vocab_size, (batch_size, t), generator=generator)
        labels = torch.full_like(x, IGNORE)
        k = 1 if self.kind == "previous" else self.k
        if self.kind == "reverse":
            labels = x.flip(1)
        elif k < t:
            labels[:, k:] = x[:, :-k]
        # [CLS] in front gives the model an anchor; its label is IGNORE.
        ids = torch.cat([torch.full((batch_size, 1), CLS), x], dim=1)
        labels = torch.cat([torch.full((batch_size, 1), IGNORE), labels], dim=1)
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


def text_file_sequences(path: str | Path, tokenizer, seq_len: int = 64) -> torch.Tensor:
    """Tokenise a local UTF-8 text file with the real WordPiece tokenizer; cut it into (N, seq_len) rows
    of [CLS] ... [SEP] (the tail that does not fill a row is dropped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text file {path} not found")
    int_in("seq_len", seq_len, 3)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text: {err}") from err
    ids = tokenizer.encode(text).ids[1:-1]  # drop the tokenizer's own [CLS] ... [SEP]
    body = seq_len - 2
    n = len(ids) // body
    if n == 0:
        raise ValueError(f"{path} has {len(ids)} word pieces, fewer than one row of {body}")
    rows = torch.tensor(ids[: n * body]).view(n, body)  # (N, seq_len - 2)
    return torch.cat([torch.full((n, 1), tokenizer.cls_id), rows, torch.full((n, 1), tokenizer.sep_id)], dim=1)
