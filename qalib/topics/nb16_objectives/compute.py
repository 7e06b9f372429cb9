"""Notebook 16: BERT's, GPT's and T5's training objectives on one model size and one synthetic language.

Compute functions (tensors or numbers in, tensors, numbers or dicts out) and plots `plot_x(fig, result)`.

    lang = objectives_language()                         # a bigram language (vocabulary 32), sequences of SEQ_LEN
    noise = random_spans_noise_mask(20, g)               # T5's sampler: (1, 20) bool, round(0.15 * 20) = 3 noise tokens
    src, tgt = span_corrupt(ids, g)                      # sentinels for the spans in the input; spans in the target
    b = objective_batch("mlm" | "causal" | "span", ids, g)  # what each objective's model reads and predicts
    signals_per_sequence(20)                             # expected training targets per sequence, each objective
    step_flops(cfg, "span", 20)                          # counted multiply-adds x 2 of one training step
"""

from __future__ import annotations


import matplotlib as mpl
import matplotlib.ticker
import numpy as np
import torch
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.transforms import ScaledTranslation

from qalib.lab.data import IGNORE, MASK, N_SPECIAL, PAD, SEP, SyntheticLanguage, mask_tokens
from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import DecoderLM, EncoderDecoder
from qalib.notebook.drawing import (LiveTickLabels, Update, bar_polygons, label_path, limits_with_margins, live, live_bars,
                           points_to_pixels, text_width)
from qalib.nn.validate import choice, float_in, int_in, probability, seed_int


OBJECTIVES = ("mlm", "causal", "span")
NAMES = {"mlm": "masked LM (BERT)", "causal": "causal LM (GPT)", "span": "span corruption (T5)"}
LANG_VOCAB = 32     # the language's ids: 5 special + 27 content tokens (notebook 12's language)
N_SENTINELS = 8     # T5's <extra_id_k>: ids 32 .. 39, appended to the vocabulary of every model alike
VOCAB = LANG_VOCAB + N_SENTINELS
SEQ_LEN = 20        # round(0.15 * 20) = 3 noise tokens in round(3 / 3) = 1 span: T5's mean span length 3 exactly
EOS = SEP           # T5 ends inputs and targets with EOS; [SEP] plays it here
DECODER_START = PAD  # T5 starts the decoder with the pad id (its code's decoder_start_token_id = 0)
NOISE_DENSITY, MEAN_SPAN = 0.15, 3.0  # t5/data/preprocessors.py span_corruption defaults


def objectives_language(seed: int = 0) -> SyntheticLanguage:
    """A bigram language: each token is one of 4 successors of the previous one, uniformly (qalib.lab.data's
    SyntheticLanguage with p_lag = 0), so the next token given the past has entropy ln 4, and a token is pinned
    down far better by both its neighbours. decoding.true_next_probs gives its exact next-token distribution."""
    return SyntheticLanguage(vocab_size=LANG_VOCAB, branching=4, lag=4, p_lag=0.0, seed=seed)


def left_from_current_ceiling(lang: SyntheticLanguage, length: int) -> float:
    """The best accuracy of guessing x_{t-1} from x_t alone, averaged over positions t = 1 .. length - 2 (the
    probes' positions), computed exactly from the chain: x_0 uniform, P_t = P_0 T^t, T[a, b] the share of a's
    successor slots that are b; at each t the best guess for x_{t-1} given x_t = b is argmax_a P_{t-1}(a) T[a, b]."""
    n = lang.n_content
    T = torch.zeros(n, n, dtype=torch.float64)
    T.index_put_((torch.arange(n).repeat_interleave(lang.branching), lang.successors.reshape(-1)),
                  torch.full((n * lang.branching,), 1 / lang.branching, dtype=torch.float64), accumulate=True)
    p, best = torch.full((n,), 1 / n, dtype=torch.float64), []
    for _ in range(1, int_in("length", length, 3) - 1):
        joint = p[:, None] * T              # (n, n): P(x_{t-1} = a, x_t = b)
        best.append(float(joint.max(0).values.sum()))
        p = joint.sum(0)                    # P_t
    return float(np.mean(best))


def model_config(d_model: int = 32, n_layers: int = 2) -> DecoderConfig:
    """GPT-2's block layout (pre-norm, tied output layer) at width d_model, 4 heads, d_ff = 4 d. The MLM model is the
    same network with causal=False; T5's encoder-decoder gets n_layers / 2 layers per stack (see build_model)."""
    d = int_in("d_model", d_model, 8)
    return DecoderConfig(vocab_size=VOCAB, d_model=d, n_layers=int_in("n_layers", n_layers, 2, even=True), n_heads=4,
                         d_ff=4 * d, max_len=64)


def build_model(objective: str, cfg: DecoderConfig) -> DecoderLM | EncoderDecoder:
    """mlm: DecoderLM without the causal mask (a bidirectional encoder with a tied output layer); causal: DecoderLM;
    span: EncoderDecoder with n_layers / 2 encoder and n_layers / 2 decoder layers, so all three stack n_layers
    layers of the same width (the encoder-decoder adds its cross-attention and two norms)."""
    choice("objective", objective, OBJECTIVES)
    if objective == "span":
        return EncoderDecoder(cfg.replace(n_layers=cfg.n_layers // 2))
    return DecoderLM(cfg.replace(causal=objective == "causal"))


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# -- T5's span corruption ----------------------------------------------------------------------
def span_counts(length: int, noise_density: float = NOISE_DENSITY, mean_span: float = MEAN_SPAN) -> tuple[int, int]:
    """(noise tokens, noise spans) of one sequence, as T5's random_spans_noise_mask rounds them: both are fixed by
    the length, only their placement is random."""
    length = int_in("length", length, 2)
    density = probability("noise_density", noise_density)
    mean_span = float_in("mean_span", mean_span, 1.0)
    n_noise = min(max(round(length * density), 1), length - 1)
    return n_noise, max(round(n_noise / mean_span), 1)


def _random_segmentation(n_rows: int, n_items: int, n_segments: int, generator) -> torch.Tensor:
    """Split n_items into n_segments non-empty runs at random, per row: (n_rows, n_segments) run lengths (T5's
    _random_segmentation: a shuffled indicator of which items start a new run, item 0 always starting one)."""
    cut = torch.rand(n_rows, n_items - 1, generator=generator).argsort(1)[:, : n_segments - 1] + 1  # (B, n_seg - 1)
    first = torch.zeros(n_rows, n_items, dtype=torch.long).scatter_(1, cut, 1)  # (B, n_items): 1 = starts a run
    seg = first.cumsum(1)                                                       # (B, n_items): run index
    return torch.zeros(n_rows, n_segments, dtype=torch.long).scatter_add_(1, seg, torch.ones_like(seg))


def random_spans_noise_mask(length: int, generator=None, noise_density: float = NOISE_DENSITY,
                            mean_span: float = MEAN_SPAN, n_rows: int = 1) -> torch.Tensor:
    """(n_rows, length) bool, True = noise: span_counts' noise tokens in its number of spans, kept and noise runs
    alternating, each run's length a random segmentation of the counts (T5's random_spans_noise_mask). One
    change: T5's code starts with a kept run and ends with a noise span, so a one-span sequence would always lose
    its last tokens; here a kept run of at least one token also closes the sequence, so every span has a kept
    neighbour on both sides."""
    n_noise, n_spans = span_counts(length, noise_density, mean_span)
    n_spans = min(n_spans, (length - n_noise) - 1)  # n_spans + 1 kept runs of at least one token
    if n_spans < 1:
        raise ValueError(f"noise_density leaves fewer than 2 kept tokens in {length}: no span fits between them")
    b = int_in("n_rows", n_rows, 1)
    kept = _random_segmentation(b, length - n_noise, n_spans + 1, generator)   # (B, n_spans + 1)
    noise = _random_segmentation(b, n_noise, n_spans, generator)               # (B, n_spans)
    runs = torch.cat([torch.stack([kept[:, :-1], noise], dim=2).reshape(b, -1), kept[:, -1:]], dim=1)  # (B, 2 n + 1)
    ends = runs.cumsum(1)                                                      # where each run ends
    run_of = (torch.arange(length)[None, :, None] >= ends[:, None, :]).sum(-1)  # (B, T): the run each position is in
    return run_of % 2 == 1


def sentinel(k: int) -> int:
    """The id of the k-th sentinel (T5 counts <extra_id_0> down from the top of its vocabulary; here up from 32)."""
    return LANG_VOCAB + int_in("sentinel index", k, 0, N_SENTINELS - 1)


def _replace_runs(ids: torch.Tensor, drop: torch.Tensor) -> torch.Tensor:
    """(B, T) ids, (B, T) bool -> the ids with each run of dropped positions replaced by the next sentinel, then
    EOS. Every row drops the same number of runs and positions, so the result is (B, T - dropped + runs + 1)."""
    starts = drop & ~torch.nn.functional.pad(drop[:, :-1], (1, 0))  # (B, T): first position of each dropped run
    if int(starts.sum(1).max()) > N_SENTINELS:
        raise ValueError(f"more than {N_SENTINELS} spans in a sequence: lower the length or the noise density")
    ids = torch.where(starts, LANG_VOCAB + starts.long().cumsum(1) - 1, ids)  # run k's first position -> sentinel k
    keep = ~drop | starts
    rows = ids[keep].view(len(ids), -1)  # (B, kept): the same count in every row
    return torch.cat([rows, torch.full((len(ids), 1), EOS)], dim=1)


def span_corrupt(ids: torch.Tensor, generator=None, noise_density: float = NOISE_DENSITY,
                 mean_span: float = MEAN_SPAN) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """T5's span_corruption on (B, T) ids -> (inputs (B, S), targets (B, U), noise (B, T) bool). Inputs: the kept
    tokens, each noise span replaced by one sentinel, then EOS. Targets: each sentinel followed by its span, then
    the sentinel that stands for the closing kept run, then EOS (the paper's example: "<X> for inviting <Y> last
    <Z>")."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"ids must be a (B, T) tensor, got {getattr(ids, 'shape', type(ids))}")
    noise = random_spans_noise_mask(ids.shape[1], generator, noise_density, mean_span, n_rows=len(ids))
    return _replace_runs(ids, noise), _replace_runs(ids, ~noise), noise


# -- what each objective reads and predicts ----------------------------------------------------
def objective_batch(objective: str, ids: torch.Tensor, generator=None) -> dict:
    """The training example of one objective from clean (B, T) ids. -> {"inputs": what the (encoder) network reads,
    "decoder_in" (span only): the shifted target, "labels": same shape as the predicting positions' logits,
    IGNORE where no loss}. mlm: BERT's 15% with 80/10/10 (qalib.lab.data.mask_tokens, random tokens from the language's
    content ids); causal: position t predicts t + 1; span: the decoder predicts the target (teacher forcing)."""
    choice("objective", objective, OBJECTIVES)
    if objective == "mlm":
        corrupted, labels = mask_tokens(ids, LANG_VOCAB, generator)
        return {"inputs": corrupted, "labels": labels}
    if objective == "causal":
        return {"inputs": ids[:, :-1], "labels": ids[:, 1:]}
    src, tgt, _ = span_corrupt(ids, generator)
    start = torch.full((len(ids), 1), DECODER_START)
    return {"inputs": src, "decoder_in": torch.cat([start, tgt[:, :-1]], dim=1), "labels": tgt}


def logits_of(model, objective: str, batch: dict) -> torch.Tensor:
    """The logits at the predicting positions of objective_batch's example: (B, T', V)."""
    if objective == "span":
        return model(batch["inputs"], batch["decoder_in"]).logits
    return model(batch["inputs"]).logits


def language_targets(labels: torch.Tensor) -> torch.Tensor:
    """(B, T') labels -> (B,) how many of them are tokens of the text (not sentinels, EOS or IGNORE): the training
    signals about the language itself."""
    return ((labels >= N_SPECIAL) & (labels < LANG_VOCAB)).sum(1)


def signals_per_sequence(length: int = SEQ_LEN, mlm_prob: float = 0.15, noise_density: float = NOISE_DENSITY,
                         mean_span: float = MEAN_SPAN) -> dict:
    """Expected training targets per sequence of `length` tokens. mlm: mlm_prob x length (binomial); causal:
    length - 1 (every position but the last predicts its successor); span: the noise tokens, and the decoder's
    whole target (spans, one sentinel per span, the closing sentinel and EOS). Also the tokens each network reads: the encoder's input and
    the decoder's."""
    n = int_in("length", length, 2)
    p = probability("mlm_prob", mlm_prob)
    n_noise, n_spans = span_counts(n, noise_density, mean_span)
    n_spans = min(n_spans, n - n_noise - 1)  # as random_spans_noise_mask
    return {"targets": {"mlm": p * n, "causal": n - 1, "span": n_noise},
            "decoder targets (span)": n_noise + n_spans + 2,
            "tokens read": {"mlm": n, "causal": n - 1, "span": (n - n_noise + n_spans + 1, n_noise + n_spans + 2)},
            "n_spans": n_spans, "length": n}


# -- compute -----------------------------------------------------------------------------------
def _layer_flops(d: int, d_ff: int, t_q: int, t_k: int) -> int:
    """Forward FLOPs (2 per multiply-add) of one self-attention layer for t_q query positions over t_k keys: the Q,
    K, V and output projections, the FFN, and the score and value matmuls (the full square is computed, masked or
    not)."""
    macs_per_position = 4 * d * d + 2 * d * d_ff + 2 * d * t_k
    return 2 * macs_per_position * t_q


def _cross_flops(d: int, t_q: int, t_k: int) -> int:
    """Forward FLOPs a decoder layer's cross-attention adds: Q and output projections of t_q positions, the memory's
    K and V projections (t_k positions), the score and value matmuls."""
    return 2 * ((2 * d * d + 2 * d * t_k) * t_q + 2 * d * d * t_k)


def step_flops(cfg: DecoderConfig, objective: str, length: int = SEQ_LEN, batch_size: int = 1, rate: float = 0.15,
               mean_span: float = MEAN_SPAN) -> int:
    """FLOPs of one training step on batch_size sequences: 3 x the forward pass (the backward pass costs about twice
    the forward, Kaplan et al. 2020 sec. 2.1), counted per matmul; the output layer only where there is a loss (all
    positions for causal, the expected share `rate` for mlm, every decoder position for span; rate is also span's
    noise density). Norms, softmax and the optimiser are left out (O(d) per position, not O(d^2))."""
    choice("objective", objective, OBJECTIVES)
    d, f, v, n_layers = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layers
    s = signals_per_sequence(length, rate, rate, mean_span)
    if objective == "span":
        src, tgt = s["tokens read"]["span"]
        half = n_layers // 2  # build_model's layers per stack
        fwd = (half * (_layer_flops(d, f, src, src) + _layer_flops(d, f, tgt, tgt) + _cross_flops(d, tgt, src))
               + 2 * d * v * tgt)
    else:
        t = s["tokens read"][objective]
        fwd = n_layers * _layer_flops(d, f, t, t) + 2 * d * v * s["targets"][objective]
    return int(round(3 * fwd * batch_size))


# -- what one sequence becomes under each objective (demo 1) -----------------------------------
KINDS = ("read, no loss", "[MASK], predicted", "random token, predicted", "token as is, predicted", "sentinel", "EOS")
KIND_COLOURS = ("#dddddd", "#3b0f70", "#de4968", "#fe9f6d", "#2c7fb8", "#555555")


def corruption_view(objective: str = "mlm", rate: float = 0.15, mean_span: float = MEAN_SPAN, length: int = SEQ_LEN,
                    seed: int = 0) -> dict:
    """One sequence of the language under one objective. rate: mlm's masking probability or span's noise density
    (causal has none). -> {"input": (S,) kind codes of what the network reads (KINDS), "target": (U,) codes of what
    the decoder writes (span only, else None), "n_signals": text tokens that carry a loss, "length"}."""
    choice("objective", objective, OBJECTIVES)
    rate = float_in("rate", rate, 0.0, 0.5)
    n = int_in("length", length, 4, 64)
    g = torch.Generator().manual_seed(seed_int("seed", seed))
    ids = objectives_language().sample(1, n, g)
    if objective == "causal":  # every position but the last reads its token and predicts the next one
        return {"input": np.full(n - 1, 3), "target": None, "n_signals": n - 1, "length": n, "objective": objective}
    if objective == "mlm":
        corrupted, labels = mask_tokens(ids, LANG_VOCAB, g, mlm_prob=rate)
        chosen = labels[0] != IGNORE
        code = torch.where(corrupted[0] == MASK, 1, torch.where(corrupted[0] != ids[0], 2, 3))
        return {"input": torch.where(chosen, code, 0).numpy(), "target": None, "n_signals": int(chosen.sum()),
                "length": n, "objective": objective}
    if rate <= 0:
        raise ValueError("rate (the noise density) must be > 0 for span corruption: T5 corrupts at least one token")
    src, tgt, noise = span_corrupt(ids, g, rate, float_in("mean_span", mean_span, 1.0))
    def codes(row):
        return np.where(row >= LANG_VOCAB, 4, np.where(row == EOS, 5, 0))
    target = codes(tgt[0].numpy())
    target[target == 0] = 3  # the spans' tokens are what the decoder predicts
    return {"input": codes(src[0].numpy()), "target": target, "n_signals": int(noise.sum()), "length": n,
            "objective": objective}


def _position_ticks(lo: float, hi: float) -> np.ndarray:
    """Whole positions to label between lo and hi, spaced as matplotlib's AutoLocator would (1-2-5 steps)."""
    ticks = matplotlib.ticker.MaxNLocator(nbins=9, steps=[1, 2, 5, 10], integer=True).tick_values(lo, hi)
    return ticks[(ticks >= lo) & (ticks <= hi)]


NO_DECODER = "no decoder: each coloured input position predicts the token after it"


def _glyphs(ax, offset_transform, colour, offsets=None) -> PathCollection:
    """A live collection of texts as glyph outlines (label_path, in points), placed at offsets in offset_transform;
    not clipped, as a Text is not. The colour is given twice: a collection of one path and one colour is drawn
    as markers, and deciding so measures the path's extent curve by curve (10 ms for a 60-glyph line)."""
    collection = PathCollection([], offsets=np.zeros((0, 2)) if offsets is None else offsets,
                                offset_transform=offset_transform, transform=points_to_pixels(ax.get_figure(root=True)),
                                facecolors=[colour, colour], linewidths=0, clip_on=False)
    ax.add_collection(collection, autolim=False)
    live(collection)
    return collection


class _LiveLabel:
    """An axis label whose words change at no drawing cost: the Text stays, invisible, holding the widest of the
    `choices` (so the layout leaves room for each), and the shown one is drawn in its place as glyph outlines."""

    def __init__(self, ax, label, choices) -> None:
        self.size, self.ha, self.va = label.get_fontsize(), label.get_ha(), label.get_va()
        label.set_text(max(choices, key=lambda text: text_width(text, self.size)))
        label.set_alpha(0.0)
        self.collection = _glyphs(ax, label.get_transform(), label.get_color(), [label.get_position()])
        self.collection.set_in_layout(False)  # the invisible label stands in for it

    def set(self, text: str) -> None:
        self.collection.set_paths([label_path(text, self.size, ha=self.ha, va=self.va)] if text else [])


def plot_corruption(fig, r: dict) -> Update:
    """Two strips of cells, coloured by KINDS: what the network reads, and (span) what its decoder writes. Every part
    that depends on the result is live: the strips, the position labels (glyph outlines, no ticks: the limits
    change no static pixel), the row labels and the bottom axis label (_LiveLabel), the no-decoder note and the
    title; so no change draws a static pixel again."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    axes = fig.subplots(2, 1)
    cmap = ListedColormap(KIND_COLOURS)
    strips, positions, rows = [], [], []
    gap = ScaledTranslation(-mpl.rcParams["axes.labelpad"] / 72, 0, fig.dpi_scale_trans)
    for ax, choices in zip(axes, (("network input", "encoder input"), ("decoder", "decoder target"))):
        ax.set(yticks=[], ylim=(-0.5, 0.5))
        ax.grid(False)
        ax.set_xlabel("position")
        positions.append(LiveTickLabels(ax, "x", size=mpl.rcParams["xtick.labelsize"], rotation=0, width_chars=2,
                                        pad=_tick_pad("x")))
        ax.set_ylabel(choices[0], rotation=0, ha="right", va="center")
        ax.yaxis.set_label_coords(0.0, 0.5, ax.transAxes + gap)  # where the axis puts it: labelpad off the spine
        rows.append(_LiveLabel(ax, ax.yaxis.label, choices))
        strips.append(ax.imshow(np.zeros((1, 1)), cmap=cmap, vmin=-0.5, vmax=len(KINDS) - 0.5, aspect="auto",
                                extent=(-0.5, 0.5, -0.5, 0.5)))
    bottom = _LiveLabel(axes[1], axes[1].xaxis.label, ("position",))  # no decoder, no positions
    note = _glyphs(axes[1], axes[1].transData, mpl.rcParams["text.color"])
    title = axes[0].set_title("")
    live(title, *strips)
    fig.legend(handles=[Patch(color=c, label=k) for c, k in zip(KIND_COLOURS, KINDS)], loc="outside lower center",
               ncol=3, fontsize=8, frameon=False)

    def update(r: dict) -> None:
        xlim = (-0.5, r["length"] + 2.5)
        ticks = _position_ticks(*xlim)
        for ax, row, strip, labels in zip(axes, (r["input"], r["target"]), strips, positions):
            ax.set_xlim(*xlim)  # no ticks on x: the limits change no static pixel
            strip.set_visible(row is not None)
            if row is not None:
                strip.set_data(np.asarray(row, dtype=float)[None, :])
                strip.set_extent((-0.5, len(row) - 0.5, -0.5, 0.5))
            labels.set([f"{t:g}" for t in ticks] if row is not None else [], ticks if row is not None else [])
        has_decoder = r["target"] is not None
        rows[0].set("encoder input" if has_decoder else "network input")
        rows[1].set("decoder target" if has_decoder else "decoder")
        bottom.set("position" if has_decoder else "")
        note.set_paths([] if has_decoder else [label_path(NO_DECODER, 9.0, ha="left", va="center")])
        note.set_offsets(np.zeros((0 if has_decoder else 1, 2)))
        title.set_text(f"{NAMES[r['objective']]}: {r['n_signals']} of {r['length']} text tokens carry a loss")
        return None

    update(r)
    return update


# -- training signals and compute per sequence (demo 2) ----------------------------------------
def signals_view(length: int = SEQ_LEN, rate: float = 0.15, mean_span: float = MEAN_SPAN, d_model: int = 32) -> dict:
    """Expected text tokens carrying a loss per sequence, and counted training FLOPs per sequence (step_flops with
    batch 1, at width d_model and 2 layers), for each objective; rate is both mlm's masking rate and span's noise
    density."""
    n = int_in("length", length, 4, 64)
    rate = float_in("rate", rate, 0.05, 0.5)
    s = signals_per_sequence(n, rate, rate, mean_span)
    cfg = model_config(int_in("d_model", d_model, 8, 1024))
    flops = {o: step_flops(cfg, o, n, 1, rate, mean_span) for o in OBJECTIVES}
    return {"targets": s["targets"], "flops": flops, "length": n, "rate": rate}


def _tick_pad(axis: str) -> float:
    """Points from the spine to a tick label, as the style puts them (its ticks are hidden but still pad)."""
    rc = mpl.rcParams
    size = {"in": 0.0, "inout": 0.5, "out": 1.0}[rc[f"{axis}tick.direction"]] * rc[f"{axis}tick.major.size"]
    return float(rc[f"{axis}tick.major.pad"] + size)


def _tick_text(ticks) -> list[str]:
    """Tick values with as many decimals as the finest of them needs, as matplotlib's ScalarFormatter writes them."""
    for decimals in range(7):
        if np.allclose(ticks, np.round(ticks, decimals), rtol=0, atol=1e-9 * max(1.0, np.abs(ticks).max())):
            break
    return [f"{t:.{decimals}f}" for t in ticks]


class _LiveYAxis:
    """A y axis whose limits follow the data at no drawing cost: tick labels as glyph outlines (LiveTickLabels) and
    horizontal grid lines in one live LineCollection, placed where the style's ticks and grid would be."""

    def __init__(self, ax, width_chars: int) -> None:
        rc = mpl.rcParams
        ax.yaxis.grid(False)
        self.ax = ax
        self.labels = LiveTickLabels(ax, "y", size=rc["ytick.labelsize"], width_chars=width_chars, pad=_tick_pad("y"))
        self.grid = LineCollection([], colors=rc["grid.color"], linewidths=rc["grid.linewidth"],
                                   linestyles=rc["grid.linestyle"], alpha=rc["grid.alpha"],
                                   zorder=0.5 if rc["axes.axisbelow"] is True else 2.5)  # where gridlines go
        ax.add_collection(self.grid, autolim=False)
        live(self.grid)
        self.locator = matplotlib.ticker.MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10])

    def set(self, lo: float, hi: float) -> None:
        self.ax.set_ylim(lo, hi)  # no ticks on y: the limits change no static pixel
        ticks = self.locator.tick_values(lo, hi)
        slack = 1e-9 * (hi - lo)
        ticks = ticks[(ticks >= lo - slack) & (ticks <= hi + slack)]
        self.labels.set(_tick_text(ticks), ticks)
        x0, x1 = self.ax.get_xlim()
        self.grid.set_segments([[(x0, t), (x1, t)] for t in ticks])


def plot_signals(fig, r: dict) -> Update:
    """Bars of the text tokens with a loss and of the counted FLOPs per sequence, with their values. Bars, values, the
    first title and both y axes (_LiveYAxis: the token axis reaches the length, the FLOPs axis 5% above the largest
    bar) are live, so no change draws a static pixel again."""
    ax1, ax2 = fig.subplots(1, 2)
    names = [NAMES[o].split(" (")[1].rstrip(")") for o in OBJECTIVES]
    colours = ["C0", "C1", "C2"]
    x = np.arange(len(OBJECTIVES))
    values, bars = [], []
    for ax in (ax1, ax2):
        ax.set_xticks(x, names)
        ax.set_xlim(*limits_with_margins(-0.4, len(OBJECTIVES) - 0.6))  # as autoscaling puts 0.8-wide bars
        bars.append(live_bars(ax, facecolors=colours))
        # the values 2 points above their bars, as a Text's layout box (its descent below the digits) puts them
        above = ax.transData + ScaledTranslation(0, 2 / 72, fig.dpi_scale_trans)
        values.append(_glyphs(ax, above, mpl.rcParams["text.color"]))
    ax1.set_ylabel("tokens")
    ax2.set(title="training FLOPs per sequence (counted)", ylabel="MFLOPs")
    title1 = ax1.set_title("")
    live(title1)
    y1, y2 = _LiveYAxis(ax1, width_chars=4), _LiveYAxis(ax2, width_chars=5)

    def update(r: dict) -> None:
        t = [float(r["targets"][o]) for o in OBJECTIVES]
        f = [r["flops"][o] / 1e6 for o in OBJECTIVES]
        title1.set_text(f"text tokens with a loss, per {r['length']}-token sequence")
        for bar, text, vals in zip(bars, values, (t, f)):
            bar.set_verts(bar_polygons(x, vals))
            text.set_paths([label_path(f"{v:.3g}", 8.0, ha="center", va="bottom") for v in vals])
            text.set_offsets(np.c_[x, vals])
        y1.set(0, r["length"])
        y2.set(0, 1.05 * max(f))  # as autoscaling's 5% margin above the bars
        return None

    update(r)
    return update


# -- attention patterns read from the trained models -------------------------------------------
def attention_maps(models: dict, ids: torch.Tensor, example: int = 0) -> dict:
    """{objective: model} and (B, T) clean ids -> {panel name: (T_q, T_k) layer-0 attention, mean over heads} of one
    example, drawn from each model's own probabilities (return_internals): the MLM model, the causal model, and
    T5's encoder self-, decoder self- and cross-attention (on a span-corrupted copy of the text)."""
    i = int_in("example", example, 0, len(ids) - 1)
    dev = next(models["mlm"].parameters()).device
    with torch.no_grad():
        out = {name: models[o](ids.to(dev), return_internals=True).internals["layer0.probs"]
               for name, o in (("masked LM: bidirectional", "mlm"), ("causal LM", "causal"))}
        b = objective_batch("span", ids, torch.Generator().manual_seed(0))
        inner = models["span"](b["inputs"].to(dev), b["decoder_in"].to(dev), return_internals=True).internals
    out.update({"T5 encoder: bidirectional": inner["encoder.layer0.probs"], "T5 decoder: causal": inner["layer0.probs"],
                "T5 cross: target -> source": inner["layer0.cross.probs"]})
    return {k: v[i].mean(0).float().cpu().numpy() for k, v in out.items()}


def right_mass(probs: np.ndarray) -> float:
    """Mean attention probability a query puts on keys to its right (j > i), over the queries of a square map."""
    return float(np.triu(probs, 1).sum(1).mean())


def plot_attention_maps(fig, maps: dict) -> None:
    axes = fig.subplots(1, len(maps))
    for ax, (name, m) in zip(axes, maps.items()):
        ax.imshow(m, cmap="viridis", vmin=0, vmax=max(float(m.max()), 1e-9), interpolation="nearest")
        ax.set_title(name, fontsize=8)
        ax.set(xlabel="key", ylabel="query", xticks=[], yticks=[])
        ax.grid(False)
