"""What a synthetic language's known next-token distribution says of a text or a model (notebooks 12 and 16).

    p = true_next_probs(lang, ids)                  # (B, T, V): the truth's distribution of token t+1 given ids[:, :t+1]
    entropy_rate(lang)                              # nats per token: the lowest loss any model can reach
    true_logprobs(lang, ids, start=8)               # log p_truth of every token from `start` on (-inf: impossible)
    truth_greedy(lang, prompt, 16)                  # the truth's own argmax continuation: what "greedy" could reach
    kl(p, q), distinct_n(ids, 4), unigram_kl(ids, ref, 32)
    generation_stats(lang, ids, prompt_len, reference)   # generated text judged against the truth
"""

from __future__ import annotations

import math

import numpy as np
import torch

from qalib.lab.data import N_SPECIAL, SyntheticLanguage
from qalib.nn.validate import int_in


def _check_ids(lang: SyntheticLanguage, ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[1] < 1:
        raise ValueError(f"ids must be a (B, T) tensor with T >= 1, got {getattr(ids, 'shape', type(ids))}")
    if ids.min() < 0 or ids.max() >= lang.vocab_size:
        raise ValueError(f"ids must be token ids 0 .. {lang.vocab_size - 1}")
    return ids.long().cpu()


def true_next_probs(lang: SyntheticLanguage, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) token ids -> (B, T, V) float64: at position t, the language's distribution of token t+1 given
    tokens 0..t. It is (1 - p_lag) uniform over the successors of token t, plus p_lag on lag_map[token t+1-lag]
    once t+1 >= lag (before that, the successors only). Defined for every context, possible or not."""
    ids = _check_ids(lang, ids)
    b, t = ids.shape
    n = lang.n_content
    # a model may emit a special id, which the language never does: its successors are then all content tokens
    # alike, and it maps to no token for the copy rule, so that every context has a defined truth
    succ = torch.full((n + 1, n), 1.0 / n, dtype=torch.float64)   # (n + 1, n): row a = uniform over a's successors
    succ[:n] = 0.0
    succ[:n].scatter_(1, lang.successors, 1.0 / lang.branching)
    content = ids >= N_SPECIAL
    x = torch.where(content, ids - N_SPECIAL, torch.full_like(ids, n))  # (B, T): content index, n for a special id
    p = succ[x]                                                   # (B, T, n)
    lagged = torch.arange(t) + 1 >= lang.lag                      # (T,): positions whose next token may copy
    if lang.p_lag > 0 and lagged.any():
        src = x[:, torch.arange(t)[lagged] + 1 - lang.lag]        # (B, T_lagged): token t+1-lag
        copy = torch.zeros(b, int(lagged.sum()), n + 1, dtype=torch.float64)
        copy.scatter_(2, torch.cat([lang.lag_map, torch.tensor([n])])[src][..., None], 1.0)
        # a special token t+1-lag copies to nothing: its share stays with the successors
        share = torch.where(src < n, lang.p_lag, 0.0).double()[..., None]  # (B, T_lagged, 1)
        p[:, lagged] = (1 - share) * p[:, lagged] + share * copy[..., :n]
    full = torch.zeros(b, t, lang.vocab_size, dtype=torch.float64)  # special ids have probability 0
    full[..., N_SPECIAL:] = p
    return full


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Entropy in nats over the last dim (0 log 0 = 0)."""
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    return -(p * logp).sum(-1)


def entropy_rate(lang: SyntheticLanguage, n: int = 4096, length: int = 32, seed: int = 999) -> float:
    """The truth's mean next-token entropy over the positions a model is trained on (1 .. length-1 predicted from
    their prefixes), averaged over n sampled sequences: the cross-entropy of a perfect model, in nats."""
    ids = lang.sample(int_in("n", n, 1), int_in("length", length, 2), torch.Generator().manual_seed(seed))
    return float(entropy(true_next_probs(lang, ids[:, :-1])).mean())


def true_logprobs(lang: SyntheticLanguage, ids: torch.Tensor, start: int = 1) -> torch.Tensor:
    """(B, T) -> (B, T - start): log p_truth(token t | tokens < t) for t = start .. T-1; -inf where the language
    could not have produced the token."""
    t = ids.shape[1] if isinstance(ids, torch.Tensor) and ids.dim() == 2 else 0
    start = int_in("start", start, 1, max(1, t - 1))
    p = true_next_probs(lang, ids[:, :-1])[:, start - 1:]              # (B, T - start, V): predicts tokens start..
    picked = p.gather(2, ids[:, start:].long().cpu()[..., None])[..., 0]  # (B, T - start)
    return picked.log()


def truth_greedy(lang: SyntheticLanguage, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """(B, P) prompt -> (B, P + new_tokens): greedy decoding from the language's exact next-token distribution (ties go
    to the lowest id), the continuation a perfect model's argmax would write."""
    ids = _check_ids(lang, prompt)
    for _ in range(int(new_tokens)):
        ids = torch.cat([ids, true_next_probs(lang, ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) in nats over the last dim; inf where q gives 0 to something p does not."""
    p, q = p.double(), q.double()
    ratio = torch.where(p > 0, p.log() - q.log(), torch.zeros_like(p))
    return (p * ratio).sum(-1)


# -- text statistics ---------------------------------------------------------------------------
def distinct_n(ids: torch.Tensor, n: int) -> float:
    """Mean over sequences of (distinct n-grams) / (n-grams): 1 = no n-gram repeats, small = a loop."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"ids must be a (B, T) tensor, got {getattr(ids, 'shape', type(ids))}")
    n = int_in("n", n, 1, ids.shape[1])
    grams = ids.unfold(1, n, 1)  # (B, T - n + 1, n)
    return float(np.mean([len({tuple(g) for g in row.tolist()}) / row.shape[0] for row in grams]))


def unigram_kl(ids: torch.Tensor, reference: torch.Tensor, vocab_size: int, smoothing: float = 0.5) -> float:
    """KL(reference frequencies || frequencies of ids) over the content tokens, each count plus `smoothing`
    (so a token the generated text never uses costs a finite, large amount)."""
    counts = [torch.bincount(x.reshape(-1).long(), minlength=vocab_size)[N_SPECIAL:].double() + smoothing
              for x in (reference, ids)]
    ref, got = (c / c.sum() for c in counts)
    return float(kl(ref, got))


def generation_stats(lang: SyntheticLanguage, ids: torch.Tensor, prompt_len: int, reference: torch.Tensor,
                     n: int = 4) -> dict:
    """What a decoding strategy produced after a prompt of prompt_len tokens, judged against the truth:
    impossible: the share of new tokens the language could not have produced; nll: the truth's mean -log p of the
    possible ones (real text scores the entropy rate); distinct: distinct_n of the new tokens; unigram_kl: their
    token frequencies against `reference` text's."""
    logp = true_logprobs(lang, ids, prompt_len)
    ok = torch.isfinite(logp)
    new = ids[:, prompt_len:].cpu()
    return {"impossible": float((~ok).double().mean()), "nll": float(-logp[ok].mean()) if ok.any() else math.inf,
            "distinct": distinct_n(new, n), "unigram_kl": unigram_kl(new, reference[:, prompt_len:], lang.vocab_size)}
