"""Generation from a DecoderLM or an EncoderDecoder: greedy, sampling (temperature, top-k, top-p) and beam search.

    ids = generate(model, prompt_ids, 20)                                               # greedy
    ids = generate(model, prompt_ids, 20, strategy="sample", temperature=0.8, top_k=40, seed=0)
    ids = generate(model, prompt_ids, 20, strategy="beam", num_beams=4)
    ids = generate(encoder_decoder, start_ids, 20, source_ids=source)                   # target prefix + source

The rules (FACTS "Decoding and the KV cache"): greedy takes the argmax; sampling draws from softmax(z / T) after
top-k (Fan et al. 2018: the k most likely tokens) and top-p (Holtzman et al. 2020: the smallest set of most likely
tokens whose probability reaches p), in that order, as HF's logits warpers; beam search keeps the num_beams
prefixes of highest summed log-probability. The filters are pure functions on logits (top_k_filter, top_p_filter,
sampling_distribution), so a notebook can show what each does to one next-token distribution.

Every sequence gets exactly max_new_tokens tokens: there is no end-of-sequence token, so all beams have one length
and need no length penalty. temperature <= 0 is an error, not greedy: the limit T -> 0 of sampling is greedy,
which is strategy="greedy". A seed makes sampling reproducible (a torch.Generator on the model's device); the
model's train/eval mode is left as it is (call model.eval() for dropout-free decoding). Runs under torch.no_grad,
on the model's device, and inside a caller's torch.autocast (the logits are read in float32).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from qalib.nn.decoder import DecoderLM, EncoderDecoder
from qalib.nn.model import check_ids
from qalib.nn.validate import float_in, int_in, positive, seed_int

Strategy = Literal["greedy", "sample", "beam"]
STRATEGIES = get_args(Strategy)


# ---------------------------------------------------------------------------------------------
# The sampling filters: logits (..., V) in, logits out, removed tokens at -inf
# ---------------------------------------------------------------------------------------------
def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of the last dim, -inf elsewhere. Tokens tied with the k-th largest are kept too
    (as HF's TopKLogitsWarper), so more than k may survive."""
    k = int_in("top_k", k, 1, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus: keep the smallest set of most likely tokens whose probability sums to at least p, -inf elsewhere.
    The most likely token always survives (among ties, the lowest id); p = 1 keeps every token."""
    p = float_in("top_p", p, 0.0, 1.0, lo_open=True)
    if p == 1.0:
        return logits  # the whole distribution, whatever the rounding of a cumulative sum
    # stable: among tied tokens the lower id comes first, so the survivor is argmax's (and greedy's) choice
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)  # (..., V) each
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # (..., V): the probability of the more likely tokens
    remove = mass_before >= p                  # the set already reached p without this token
    remove = remove.scatter(-1, order, remove)  # back from sorted to vocabulary order
    return logits.masked_fill(remove, float("-inf"))


def sampling_distribution(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                          top_p: float | None = None) -> torch.Tensor:
    """The distribution strategy="sample" draws from: softmax of logits / temperature after top-k, then top-p.
    (..., V) -> (..., V) probabilities, in float32."""
    logits = logits.float() / positive("temperature", temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)


# ---------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def generate(model: DecoderLM | EncoderDecoder, prompt_ids: torch.Tensor, max_new_tokens: int, *,
             strategy: Strategy = "greedy", temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, num_beams: int = 1, seed: int | None = None, use_cache: bool = True,
             source_ids: torch.Tensor | None = None) -> torch.Tensor:
    """prompt_ids (B, T) -> (B, T + max_new_tokens): the prompt and its continuation.

    strategy: "greedy", "sample" (temperature, top_k, top_p apply only here) or "beam" (num_beams).
    seed: the sampling generator's seed (None: torch's global generator). use_cache: run each step on the new token
    with the KV cache (False re-runs the whole prefix each step: the same tokens, more time). source_ids (B, S):
    the source, for an EncoderDecoder only; prompt_ids is then the target prefix (a start token, say)."""
    cfg = _check_model(model, source_ids)
    if isinstance(prompt_ids, torch.Tensor) and prompt_ids.dim() == 2 and 0 in prompt_ids.shape:
        raise ValueError(f"prompt_ids is empty (shape {tuple(prompt_ids.shape)}): generation continues a prompt of "
                         "at least one token per sequence (a start token, if nothing else)")
    check_ids("prompt_ids", prompt_ids, cfg.vocab_size)
    max_new_tokens = int_in("max_new_tokens", max_new_tokens, 0)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if strategy != "sample" and (temperature != 1.0 or top_k is not None or top_p is not None):
        raise ValueError(f"temperature, top_k and top_p shape what strategy='sample' draws from; strategy={strategy!r} "
                         "does not sample")
    temperature = positive("temperature", temperature)
    top_k = None if top_k is None else int_in("top_k", top_k, 1, cfg.vocab_size)
    top_p = None if top_p is None else float_in("top_p", top_p, 0.0, 1.0, lo_open=True)
    num_beams = int_in("num_beams", num_beams, 1, cfg.vocab_size)
    if strategy != "beam" and num_beams != 1:
        raise ValueError(f"num_beams applies to strategy='beam'; strategy={strategy!r} got num_beams={num_beams}")
    b, t = prompt_ids.shape
    if cfg.pos == "learned" and t + max_new_tokens > cfg.max_len:
        raise ValueError(f"prompt length {t} + max_new_tokens {max_new_tokens} = {t + max_new_tokens} exceeds "
                         f"max_len={cfg.max_len}: the learned position table has no row for a later position "
                         "(pos='sinusoidal' has no limit)")
    if use_cache and not cfg.causal:
        raise ValueError("use_cache=True needs a causal model: with causal=False every position sees the later ones, "
                         "so its keys and values change with each new token and a cache of them would be stale; "
                         "pass use_cache=False")
    device = next(model.parameters()).device
    prompt_ids = prompt_ids.to(device)
    if source_ids is not None:
        check_ids("source_ids", source_ids, cfg.vocab_size)
        if source_ids.shape[0] != b:
            raise ValueError(f"source_ids has {source_ids.shape[0]} sequences, prompt_ids {b}: one source per prompt")
        source_ids = source_ids.to(device).repeat_interleave(num_beams, dim=0)  # (B * num_beams, S)
    step = _step_function(model, source_ids, use_cache)
    if strategy == "beam":
        return _beam_search(step, prompt_ids, max_new_tokens, num_beams, use_cache)
    if strategy == "greedy":
        choose = lambda logits: logits.argmax(dim=-1, keepdim=True)  # noqa: E731
    else:
        generator = None if seed is None else torch.Generator(device=device).manual_seed(seed_int("seed", seed))
        choose = lambda logits: torch.multinomial(  # noqa: E731
            sampling_distribution(logits, temperature, top_k, top_p), 1, generator=generator)
    ids, cache, new = prompt_ids, None, prompt_ids
    for _ in range(max_new_tokens):
        logits, cache = step(new if use_cache else ids, cache)  # (B, V)
        new = choose(logits)                                    # (B, 1)
        ids = torch.cat([ids, new], dim=1)                      # (B, T + 1)
    return ids


def _beam_search(step, prompt_ids, max_new_tokens: int, k: int, use_cache: bool) -> torch.Tensor:
    """Keep the k prefixes of highest summed log-probability; return the best of each batch row."""
    b = prompt_ids.shape[0]
    ids = prompt_ids.repeat_interleave(k, dim=0)  # (B*k, T): every beam starts as the prompt
    # the k beams start identical: only the first may extend, or the first step would pick one token k times
    scores = torch.full((b, k), float("-inf"), device=ids.device)
    scores[:, 0] = 0.0
    cache, new = None, ids
    for _ in range(max_new_tokens):
        logits, cache = step(new if use_cache else ids, cache)  # (B*k, V)
        v = logits.shape[-1]
        extended = scores[:, :, None] + logits.log_softmax(dim=-1).view(b, k, v)  # (B, k, V): beam i + token j
        scores, flat = extended.view(b, k * v).topk(k, dim=-1)  # (B, k), best first
        rows = (torch.arange(b, device=ids.device)[:, None] * k + flat // v).view(-1)  # (B*k,): the beam each extends
        new = (flat % v).view(-1, 1)  # (B*k, 1)
        ids = torch.cat([ids[rows], new], dim=1)
        cache = None if cache is None else cache.select(rows)
    return ids.view(b, k, -1)[:, 0]  # topk sorts: beam 0 has the highest score


def _step_function(model, source_ids, use_cache: bool):
    """(ids, cache) -> (the newest position's logits (B, V) in float32, the cache of every position or None)."""
    memory = model.encode(source_ids) if isinstance(model, EncoderDecoder) else None

    def step(ids, cache):
        if memory is None:
            out = model(ids, cache, use_cache=use_cache, last_only=True)
        else:  # an encoder-decoder reads the memory until its cache holds the memory's keys and values
            out = model.decode(ids, memory if cache is None else None, cache, use_cache=use_cache, last_only=True)
        return out.logits[:, -1].float(), out.cache

    return step


def _check_model(model, source_ids):
    if not isinstance(model, (DecoderLM, EncoderDecoder)):
        raise TypeError(f"model must be a qalib DecoderLM or EncoderDecoder, got {type(model).__name__}")
    if isinstance(model, EncoderDecoder) and source_ids is None:
        raise ValueError("an EncoderDecoder generates from a source: pass source_ids (B, S)")
    if isinstance(model, DecoderLM) and source_ids is not None:
        raise ValueError("source_ids is for an EncoderDecoder; a DecoderLM continues prompt_ids alone")
    return model.cfg


__all__ = ["generate", "top_k_filter", "top_p_filter", "sampling_distribution", "STRATEGIES"]
