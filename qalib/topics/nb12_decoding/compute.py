"""Notebook 12: how a decoder generates text, judged against a language whose next-token distribution is known.

Compute functions (tensors or numbers in, tensors, numbers or dicts out) and plots `plot_x(fig, result)`.

    lang = decoding_language()                      # qalib.lab.data.SyntheticLanguage, vocabulary 32
                                                    # (its truth: qalib.lab.language_truth)
    attention_entries(model, prompt, new, cache)    # score entries the model actually computed, per new token
    cache_bytes_formula(cfg, t, batch, 2)           # 2 x layers x kv_heads x d_head x T x batch x bytes
    sampling_view(logits, truth, temperature=0.7)   # what temperature, top-k and top-p do to one distribution
"""

from __future__ import annotations

import math
import time

import matplotlib.ticker
import numpy as np
import torch

from qalib.lab.data import N_SPECIAL, SyntheticLanguage
from qalib.lab.device import one_thread
from qalib.lab.fits import fit_exponent
from qalib.lab.language_truth import kl, true_logprobs, true_next_probs
from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import DecoderLM
from qalib.nn.generate import generate, sampling_distribution
from qalib.nn.validate import float_in, int_in
from qalib.notebook.drawing import Change, live, live_title, log_ticks


VOCAB = 32  # 27 content tokens after BERT's 5 special ids


def decoding_language(seed: int = 0) -> SyntheticLanguage:
    """The notebook's language: each token is one of 4 successors of the previous token, and with probability 1/2
    instead a fixed function of the token 4 places back (qalib.lab.data.SyntheticLanguage)."""
    return SyntheticLanguage(vocab_size=VOCAB, branching=4, lag=4, p_lag=0.5, seed=seed)


def decoder_config(causal: bool = True, n_kv_heads: int | None = None, max_len: int = 64,
                   d_model: int = 32) -> DecoderConfig:
    """The notebook's decoder: GPT-2's layout at d = 32, 2 layers, 4 heads (d_head 8), d_ff = 4d = 128. d_model = 64
    (d_head 16) is the reference's wider variant."""
    return DecoderConfig(vocab_size=VOCAB, d_model=d_model, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads,
                         d_ff=4 * d_model, max_len=max_len, causal=causal)


# -- the cache: work and memory ----------------------------------------------------------------
@torch.no_grad()
def attention_entries(model: DecoderLM, prompt: torch.Tensor, new_tokens: int, use_cache: bool) -> np.ndarray:
    """Greedy generation step by step, counting the attention score entries each step computed, read from the
    shapes of the probabilities the model returned (every layer's (B, H, T_new, T_keys)). -> (new_tokens,)"""
    ids, cache, counts = prompt, None, []
    for _ in range(int_in("new_tokens", new_tokens, 1)):
        out = model(ids[:, -1:] if cache is not None else ids, cache, use_cache=use_cache, return_internals=True,
                    last_only=True)
        counts.append(sum(out.internals[f"layer{i}.probs"].numel() for i in range(model.cfg.n_layers)))
        cache = out.cache if use_cache else None
        ids = torch.cat([ids, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return np.array(counts)


def cache_bytes_formula(cfg: DecoderConfig, t: int, batch: int, bytes_per_element: int) -> int:
    """2 (K and V) x layers x kv_heads x d_head x T x batch x bytes per element (FACTS "Decoding and the KV cache")."""
    return 2 * cfg.n_layers * cfg.kv_heads * cfg.d_head * t * batch * bytes_per_element


# -- judging a trained model against the truth -------------------------------------------------
@torch.no_grad()
def model_next_probs(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T, V) float64 on the CPU: the model's distribution of token t+1 at every position t."""
    return model(ids.to(next(model.parameters()).device)).logits.double().softmax(-1).cpu()


def exposure_bias(lang: SyntheticLanguage, model: DecoderLM, text: torch.Tensor, generated: torch.Tensor,
                  prompt_len: int) -> dict:
    """KL(truth || model) of the next-token distribution at each position after the prompt, on two kinds of
    prefix: real text (teacher forcing, what training saw) and the model's own samples (free running).
    -> {"teacher": (T - prompt_len,), "free": (T - prompt_len,)} mean over sequences; "free_clean" and
    "free_after_error": free-running positions whose prefix has no impossible token yet, and those after one."""
    out = {}
    for name, ids in (("teacher", text), ("free", generated)):
        d = kl(true_next_probs(lang, ids[:, :-1]), model_next_probs(model, ids[:, :-1]))[:, prompt_len - 1:]
        out[name] = d.mean(0).numpy()                        # (T - prompt_len,): predicting tokens prompt_len ..
        out[name + "_all"] = d
    bad = torch.isinf(true_logprobs(lang, generated, prompt_len))  # (B, T - prompt_len): token t impossible
    after = (bad.cumsum(1) - bad.long()) > 0                 # some earlier generated token was impossible
    d = out.pop("free_all")
    out.pop("teacher_all")
    out["free_clean"] = float(d[~after].mean())
    out["free_after_error"] = float(d[after].mean()) if after.any() else math.nan
    out["share_after_error"] = float(after.double().mean())
    return out


@torch.no_grad()
def planted_error(lang: SyntheticLanguage, model: DecoderLM, text: torch.Tensor, position: int,
                  generator: torch.Generator) -> dict:
    """Exposure bias tested directly: in every real sequence replace the token at `position` by one the language gives
    probability 0 there (uniform among those), and compare KL(truth || model) at every later position with the same
    position of the unedited sequence: the same sequences, the same positions, one planted error.
    The truth reads the planted token only when it predicts the next token (its successor rule) and `lang.lag`
    tokens on (its copy rule); from offset lag + 1 it has forgotten it, so a KL that stays higher there is the model
    carrying its own error along.
    -> {"offsets": (n,) positions after the plant, "edited" and "clean": (n,) mean KL there, "forgotten": (B,) per
    sequence the mean of edited - clean over the offsets > lag, "near": (B,) the same over offsets 1..lag}"""
    b, t = text.shape
    position = int_in("position", position, 1, t - lang.lag - 2)
    truth = true_next_probs(lang, text[:, :position])[:, -1]          # (B, V): what may follow text[:, :position]
    impossible = truth == 0
    impossible[:, :N_SPECIAL] = False                                 # plant a content token, never a special id
    pick = torch.multinomial(impossible.double(), 1, generator=generator)[:, 0]   # (B,) one impossible token each
    edited = text.clone()
    edited[:, position] = pick
    d = {}
    for name, ids in (("clean", text), ("edited", edited)):
        d[name] = kl(true_next_probs(lang, ids[:, :-1]), model_next_probs(model, ids[:, :-1]))[:, position:]  # (B, n)
    diff = d["edited"] - d["clean"]                                   # (B, n): offset k + 1 predicts token position+k+1
    offsets = np.arange(1, diff.shape[1] + 1)
    return {"offsets": offsets, "edited": d["edited"].mean(0).numpy(), "clean": d["clean"].mean(0).numpy(),
            "near": diff[:, : lang.lag].mean(1).numpy(), "forgotten": diff[:, lang.lag:].mean(1).numpy()}


@torch.no_grad()
def future_attention(model: DecoderLM, ids: torch.Tensor) -> np.ndarray:
    """(layers, heads): the mean attention probability that position i puts on position i + 1 (the token it is
    trained to predict), over the positions that have one. 0 exactly under a causal mask."""
    out = model(ids.to(next(model.parameters()).device), return_internals=True).internals
    rows = []
    for i in range(model.cfg.n_layers):
        p = out[f"layer{i}.probs"].double().cpu()            # (B, H, T, T)
        rows.append(p.diagonal(offset=1, dim1=2, dim2=3).mean((0, 2)).numpy())  # (H,): entries (i, i + 1)
    return np.array(rows)


# -- time per token, printed (make bench judges timings) -------------------------------------------
@torch.no_grad()
@one_thread()
def time_per_token(lengths=(64, 128, 256, 512), new_tokens: int = 16, repeats: int = 3, seed: int = 0) -> dict:
    """Wall time per generated token (best of `repeats`, one thread) when the last new_tokens of a sequence of each
    length are generated greedily, with and without the cache, on an untrained decoder of the notebook's width
    (time does not depend on the weights); with the fitted exponents (Theil-Sen: the median pairwise slope)."""
    lengths = [int_in("length", t, new_tokens + 1, 4096) for t in lengths]
    torch.manual_seed(seed)
    model = DecoderLM(decoder_config(max_len=max(lengths))).eval()
    out = {"T": np.array(lengths), "cached": [], "uncached": []}
    for t in lengths:
        prompt = torch.randint(N_SPECIAL, VOCAB, (1, t - new_tokens), generator=torch.Generator().manual_seed(t))
        for key, cache in (("cached", True), ("uncached", False)):
            best = math.inf
            for _ in range(int_in("repeats", repeats, 1, 20)):
                start = time.perf_counter()
                generate(model, prompt, new_tokens, use_cache=cache)
                best = min(best, time.perf_counter() - start)
            out[key].append(best / new_tokens)
    for key in ("cached", "uncached"):
        out[key] = np.array(out[key])
        out["exp_" + key] = fit_exponent(out["T"], out[key], robust=True)
    return out


def plot_timing(fig, counted: dict, timed: dict) -> None:
    """Left: attention score entries computed per new token (counted from the shapes); right: wall time per token."""
    ax1, ax2 = fig.subplots(1, 2)
    for key, marker in (("cached", "o-"), ("uncached", "s-")):
        ax1.loglog(counted["T"], counted[key], marker, label=f"{key}: T^{counted['exp_' + key]:.2f}")
        ax2.loglog(timed["T"], timed[key] * 1e3, marker, label=f"{key}: T^{timed['exp_' + key]:.2f}")
    ax1.set(title="score entries per new token (counted)", xlabel="position of the new token T",
            ylabel="entries, all layers and heads")
    ax2.set(title="wall time per new token (this run, 1 thread)", xlabel="sequence length T", ylabel="ms")
    log_ticks(ax1, "x", list(counted["T"]), [str(t) for t in counted["T"]])
    log_ticks(ax2, "x", list(timed["T"]), [str(t) for t in timed["T"]])
    for ax in (ax1, ax2):
        # a log axis spanning less than a decade labels its minor ticks too, and those labels overlap: plain numbers
        # at the major ticks only
        if ax is ax2:  # under a decade of wall time: ticks at 1, 2 and 5 of each decade
            ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=8)


def plot_exposure(fig, eb: list[dict], prompt_len: int) -> None:
    """KL(truth || model) per position, teacher-forced vs free-running prefixes, one line per seed."""
    ax = fig.subplots()
    for i, r in enumerate(eb):
        x = np.arange(prompt_len, prompt_len + len(r["teacher"]))
        ax.plot(x, r["teacher"], color="#2166ac", lw=1, label="teacher forcing (real prefixes)" if i == 0 else None)
        ax.plot(x, r["free"], color="#b35806", lw=1, label="free running (its own samples)" if i == 0 else None)
    ax.set(title="how far the model's next-token distribution is from the truth, one line per seed",
           xlabel="position of the predicted token", ylabel="KL(truth || model), nats")
    ax.legend(fontsize=8)


# -- demo 1: temperature, top-k and top-p on one real next-token distribution -----------------
def sampling_view(logits: torch.Tensor, truth: torch.Tensor, temperature: float = 1.0, top_k: int = 27,
                  top_p: float = 1.0) -> dict:
    """What strategy="sample" would draw from (qalib.nn.generate.sampling_distribution: softmax(z / T), then top-k,
    then top-p) for one context's logits (V,), beside the truth's distribution (V,) of the same context.
    kl_truth: KL(truth || sampled), or None when the filters cut a token the language can produce (then the KL is
    infinite: that text can never be sampled)."""
    t = float_in("temperature", temperature, 0.05, 20.0)
    k = int_in("top_k", top_k, 1, logits.shape[-1])
    p = float_in("top_p", top_p, 0.0, 1.0, lo_open=True)
    probs = sampling_distribution(logits, t, k, p).double()
    truth = truth.double()
    cut = int(((probs == 0) & (truth > 0)).sum())
    out = {"probs": probs[N_SPECIAL:].numpy(), "truth": truth[N_SPECIAL:].numpy(),
           "model": logits.double().softmax(-1)[N_SPECIAL:].numpy(), "kl_truth": None if cut else float(kl(truth, probs)),
           "kept": int((probs > 0).sum()), "cut_possible": cut, "temperature": t, "top_k": k, "top_p": p}
    if cut:
        out["note"] = (f"the filters removed {cut} token(s) the language can produce here: KL(truth || sampled) is "
                       "infinite, and that text can never be sampled")
    return out


def plot_sampling_view(fig, r: dict):
    """Bars of the sampled distribution over the 27 content tokens, the truth as dots; fixed axes (probabilities
    0 to 1), so a change redraws only the bars, the dots (another context has another truth) and the title."""
    ax = fig.subplots()
    x = np.arange(len(r["probs"]))
    bars = ax.bar(x, r["probs"], color="#2166ac", label="sampled from (after T, top-k, top-p)")
    dots, = ax.plot(x, r["truth"], "o", color="#b35806", ms=5, label="the truth")
    ax.set(xlim=(-0.7, len(x) - 0.3), ylim=(0, 1.02), xlabel="next token (content id)", ylabel="probability")
    ax.set_xticks(x[::2], [str(i + N_SPECIAL) for i in x[::2]])
    ax.legend(fontsize=8, loc="upper right")
    title = live_title(ax)
    live(*bars, dots)

    def update(r) -> None:
        dots.set_ydata(r["truth"])
        for bar, h in zip(bars, r["probs"]):
            bar.set_height(h)
        kl_text = "inf" if r["kl_truth"] is None else f"{r['kl_truth']:.3f}"
        title.set_text(f"T = {r['temperature']:.2g}, top-k = {r['top_k']}, top-p = {r['top_p']:.2f}: "
                       f"{r['kept']} tokens kept, KL(truth || sampled) = {kl_text} nats")

    update(r)
    return update


# -- demo 2: the causal mask on or off, and what each position sees -----------------------------
@torch.no_grad()
def attention_view(models: dict, ids: torch.Tensor, causal: bool = True, layer: int = 0, head: int = 0) -> dict:
    """One head's attention probabilities (T, T) on one sequence, from the trained model with the causal mask
    (models[True]) or the one trained without it (models[False]). future: the mass each query puts on later
    positions; next_mass: the mean mass on position i + 1, the token position i is asked to predict."""
    model = models[bool(causal)]
    layer = int_in("layer", layer, 0, model.cfg.n_layers - 1)
    head = int_in("head", head, 0, model.cfg.n_heads - 1)
    out = model(ids.to(next(model.parameters()).device), return_internals=True).internals
    p = out[f"layer{layer}.probs"][0, head].double().cpu()  # (T, T): query i (row) over key j (column)
    future = torch.triu(p, diagonal=1).sum(1)               # (T,): mass on keys j > i
    return {"probs": p.numpy(), "future": future.numpy(), "next_mass": float(p.diagonal(1).mean()),
            "causal": bool(causal), "layer": layer, "head": head}


def plot_attention_view(fig, r: dict):
    """The (T, T) probabilities as an image with a fixed colour scale, the diagonal j = i + 1 outlined; a change
    redraws only the image and the title."""
    ax = fig.subplots()
    t = r["probs"].shape[0]
    im = ax.imshow(r["probs"], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    fig.colorbar(im, ax=ax, label="attention probability")
    ax.plot(np.arange(1, t), np.arange(t - 1), ls="none", marker="s", ms=5, mfc="none", mec="white", mew=0.6,
            label="key i + 1: the token query i must predict")
    ax.set(xlabel="key position j", ylabel="query position i")
    ax.grid(False)
    ax.legend(fontsize=7, loc="lower left")
    title = live_title(ax)
    live(im)

    def update(r):
        if r["probs"].shape != (t, t):
            return Change.FIGURE
        im.set_data(r["probs"])
        mask = "causal mask" if r["causal"] else "NO causal mask"
        title.set_text(f"{mask}, layer {r['layer']} head {r['head']}: mean mass on later keys "
                       f"{r['future'].mean():.2f}, on key i + 1 {r['next_mass']:.2f}")
        return None

    update(r)
    return update
