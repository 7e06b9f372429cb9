"""mlm_mask is random, so it is checked by its properties, each a hint when it fails, not against one draw.

The rates are measured on 200,000 tokens and accepted within 5 binomial standard deviations (a correct function
fails one of the rate checks by chance with probability ~1e-6 per check); the rest are exact.
"""

from __future__ import annotations

import math

import torch

from qalib.lab.data import IGNORE, MASK, N_SPECIAL

Problem = tuple[str, str, str]  # (what went wrong, hint 1, hint 2)


def _rate_off(count: int, n: int, p: float) -> bool:
    """count / n is more than 5 binomial sigmas from p (at least one token's worth, for p = 0 or 1)."""
    return abs(count - n * p) > 5 * math.sqrt(n * p * (1 - p)) + 1


def problems(ids: torch.Tensor, out, kwargs: dict, vocab_size: int, again) -> list[Problem]:
    """What is wrong with out = mlm_mask(ids, vocab_size, **kwargs); `again()` calls it once more, same seed."""
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        return [(f"returned {type(out).__name__}, expected a tuple (corrupted ids, labels)",
                 "Return two tensors: the corrupted ids and the labels.",
                 "Return (corrupted, labels), both the shape of ids.")]
    corrupted, labels = out
    for name, t in (("corrupted", corrupted), ("labels", labels)):
        if t.shape != ids.shape or t.is_floating_point():
            return [(f"{name} has shape {tuple(t.shape)} and dtype {t.dtype}; expected {tuple(ids.shape)}, integer",
                     "Both outputs have the shape and integer dtype of ids.",
                     "Build them with torch.where from ids, so that they keep its shape and dtype.")]
    p, m, r = kwargs.get("mlm_prob", 0.15), kwargs.get("mask_frac", 0.8), kwargs.get("random_frac", 0.1)
    special = ids < N_SPECIAL
    chosen = labels != IGNORE
    if chosen.all():  # every other property then fails as a consequence: name the cause alone
        return [("every position has a label",
                 "Which positions should carry a label?",
                 f"Only the chosen positions carry a label; every other one gets {IGNORE}, so that the loss skips it "
                 "(BERT predicts only the masked tokens, Devlin et al. 2019, sec. 3.1).")]
    found: list[Problem] = []
    if (chosen & special).any():
        found.append(("a special token ([CLS], [SEP], [PAD]) was chosen for prediction",
                      "Which positions may be chosen?",
                      f"Special tokens (ids < {N_SPECIAL}) are never chosen: choose among ids >= {N_SPECIAL} only."))
    if (labels[chosen] != ids[chosen]).any():
        found.append(("a label differs from the original token at its position",
                      "What should the model predict at a chosen position?",
                      "The label at a chosen position is the original token (ids), whatever the input shows there."))
    if (corrupted[~chosen] != ids[~chosen]).any():
        found.append(("a position with label IGNORE was changed",
                      "Which positions may the corruption touch?",
                      "Only chosen positions are corrupted (and carry a label): the 80/10/10 split applies to the chosen "
                      f"{p:.0%}, not to every token. Everything else stays as it was, with label {IGNORE}."))
    n_maskable, n_chosen = int((~special).sum()), int(chosen.sum())
    if _rate_off(n_chosen, n_maskable, p):
        found.append((f"{n_chosen / n_maskable:.4f} of the maskable tokens were chosen, expected {p}",
                      "Check the fraction of positions that get a label.",
                      "Each maskable position is chosen with probability mlm_prob; the loss is on those only (labels "
                      f"{IGNORE} elsewhere), not on every token."))
    if n_chosen:
        became = corrupted[chosen]
        n_mask = int((became == MASK).sum())
        replaced = became[(became != MASK) & (became != ids[chosen])]
        n_content = vocab_size - N_SPECIAL
        if _rate_off(n_mask, n_chosen, m):
            found.append((f"{n_mask / n_chosen:.4f} of the chosen positions became [MASK], expected {m}",
                          "Check the split of the chosen positions.",
                          "Of the chosen positions, mask_frac become [MASK], random_frac a random token and the rest stay "
                          "unchanged (BERT: 80/10/10, Devlin et al. 2019, sec. 3.1)."))
        # a random token equals the original with probability 1 / n_content, so it is then unseen
        if _rate_off(len(replaced), n_chosen, r * (1 - 1 / n_content)):
            found.append((f"{len(replaced) / n_chosen:.4f} of the chosen positions became another token, expected "
                          f"{r * (1 - 1 / n_content):.4f}",
                          "Check the random replacements.",
                          "A fraction random_frac of the chosen positions get a random content token; the rest of the "
                          "non-[MASK] ones keep the original."))
        if ((replaced < N_SPECIAL) | (replaced >= vocab_size)).any():
            found.append(("a random replacement is a special token or lies outside the vocabulary",
                          "Which tokens may a random replacement be?",
                          f"Draw random replacements from the content tokens only: torch.randint({N_SPECIAL}, vocab_size, "
                          "...), never [CLS], [SEP], [PAD] or [MASK] (this exercise's contract, qalib's convention; BERT's "
                          "create_pretraining_data.py draws from its whole vocabulary)."))
    second = again()
    if isinstance(second, tuple) and not all(torch.equal(a, b) for a, b in zip(out, second)):
        found.append(("two calls with generators of the same seed gave different masks",
                      "Is every random draw taken from the generator you were given?",
                      "Pass generator=generator to every torch.rand / torch.randint call, so that a seed reproduces the "
                      "masking."))
    return found
