"""Notebook 17, "Fine-tuning: what does [CLS] carry, and why does question answering not use it?": two tasks whose
truth is known, built from MiniLM's own word pieces; the heads BERT puts on an encoder (a classifier on [CLS],
BERT's span head, and a span head that reads [CLS] alone); BERT's fine-tuning recipe on the pretrained weights with
the bottom layers frozen or not; and what a run moved (per-layer weight change, CKA to the start, the similarity
structure of held-out text). Compute functions are pure.

    words = WordIds(tokenizer)                          # every word of the tasks as one word piece
    batch = MembershipTask().sample(words, 16, gen)     # "[CLS] animal [SEP] see a dog [SEP]" -> 1
    stream = frozen_stream(model, batches)              # the pretrained hidden states, computed once
    run = finetune(model, stream, "cls", FineTuneConfig(lr=3e-4, trainable=6), seed=0)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from qalib.lab.train import TrainConfig, fit
from qalib.notebook.drawing import LiveTickLabels, bar_polygons, live_bars, live_title
from qalib.nn.model import MiniBert
from qalib.nn.validate import choice, float_in, int_in, seed_int

# -- the tasks' words: each one word piece of BERT's uncased vocabulary (WordIds checks it) --------------------
CATEGORIES = {
    "animal": ("dog", "cat", "horse", "cow", "sheep", "rabbit", "tiger", "lion", "bear", "wolf", "fox", "goat"),
    "fruit": ("apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear", "plum", "strawberry"),
    "instrument": ("guitar", "piano", "violin", "drum", "flute", "trumpet", "cello", "harp", "saxophone"),
    "sport": ("football", "tennis", "golf", "hockey", "baseball", "cricket", "rugby", "boxing", "basketball"),
    "country": ("france", "germany", "spain", "italy", "japan", "china", "brazil", "canada", "mexico", "egypt"),
    "vehicle": ("car", "bus", "truck", "train", "bicycle", "boat", "ship", "plane", "tractor", "taxi"),
    "furniture": ("chair", "table", "sofa", "bed", "desk", "shelf", "cupboard", "wardrobe", "stool", "bench"),
    "job": ("doctor", "teacher", "farmer", "lawyer", "nurse", "pilot", "baker", "chef", "engineer", "soldier"),
    "tool": ("hammer", "drill", "shovel", "axe", "rake", "ladder", "spade", "knife", "scissors", "broom"),
}
COLOURS = ("red", "blue", "green", "yellow", "purple", "pink", "brown", "grey", "black", "white")
FILLERS = ("the", "we", "then", "saw", "very", "and", "it", "was", "so", "here", "there", "one", "day", "later")
# three words each, the noun at the slot: every pair has the same length, so a batch needs no padding (and the
# encoder runs its fused attention kernel, with no mask; WordIds checks the lengths)
TEMPLATES = ("a {} here", "the {} again", "that {} there", "my {} today", "one {} now", "her old {}", "we saw {}",
             "see a {}")


class WordIds:
    """The id of every word the tasks use, each checked to be one word piece of the tokenizer's vocabulary."""

    def __init__(self, tokenizer) -> None:
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
        words = set(COLOURS) | set(FILLERS) | set(CATEGORIES) | {w for ws in CATEGORIES.values() for w in ws}
        if len({len(t.split()) for t in TEMPLATES}) != 1 or any(t.split().count("{}") != 1 for t in TEMPLATES):
            raise ValueError("every template needs the same number of words and one slot {} for the noun")
        template_words = {w for t in TEMPLATES for w in t.split() if w != "{}"}
        words |= template_words
        nouns = [w for ws in CATEGORIES.values() for w in ws]
        shared = sorted({w for w in nouns if nouns.count(w) > 1}
                        | (set(nouns) & (set(COLOURS) | set(FILLERS) | template_words | set(CATEGORIES))))
        if shared:  # the truth would be ambiguous: "we saw saw", or a filler that is also an answer
            raise ValueError(f"task words {shared} play two roles (a noun of two categories, or a noun that is also a "
                             "colour, filler, template word or category name)")
        self.ids = {}
        for w in sorted(words):
            pieces = tokenizer.tokens(w)[1:-1]
            if pieces != [w]:
                raise ValueError(f"task word {w!r} is not one word piece of this vocabulary (it splits into {pieces})")
            self.ids[w] = tokenizer.backend.token_to_id(w)
        self.names = tuple(CATEGORIES)
        self.category_ids = torch.tensor([self.ids[c] for c in self.names])                   # (K,)
        self.nouns = [torch.tensor([self.ids[w] for w in CATEGORIES[c]]) for c in self.names]  # K x (n_k,)
        self.colours = torch.tensor([self.ids[w] for w in COLOURS])
        self.fillers = torch.tensor([self.ids[w] for w in FILLERS])
        self.templates = [[None if w == "{}" else self.ids[w] for w in t.split()] for t in TEMPLATES]


@dataclass
class Examples:
    """One batch of a task: input_ids, token_type_ids (B, T), and the truth: labels (B,) for the pair task,
    (B, 2) start and end positions for the span task. Every token is real (no padding)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.input_ids)

    def slice(self, lo: int, hi: int) -> "Examples":
        return Examples(self.input_ids[lo:hi], self.token_type_ids[lo:hi], self.labels[lo:hi])

    def to(self, device) -> "Examples":
        return Examples(self.input_ids.to(device), self.token_type_ids.to(device), self.labels.to(device))


def _pair(words: WordIds, question: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] question [SEP] context [SEP]: (B, 3 + C + 1) ids, with segment 0 up to the first [SEP], 1 after it."""
    b = len(question)
    ids = torch.cat([torch.full((b, 1), words.cls_id), question[:, None], torch.full((b, 1), words.sep_id),
                     context, torch.full((b, 1), words.sep_id)], dim=1)
    types = torch.zeros_like(ids)
    types[:, 3:] = 1
    return ids, types


def _nouns(words: WordIds, cats: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """(B,) a uniformly drawn noun of each category in `cats`."""
    return torch.stack([words.nouns[c][torch.randint(len(words.nouns[c]), (1,), generator=g)][0] for c in cats.tolist()])


def _other_category(cats: torch.Tensor, k: int, g: torch.Generator) -> torch.Tensor:
    """(B,) for each category a different one, uniformly among the other k - 1."""
    return (cats + torch.randint(1, k, cats.shape, generator=g)) % k


@dataclass(frozen=True)
class MembershipTask:
    """Sentence-pair classification: "[CLS] <category> [SEP] <a three-word sentence with one noun> [SEP]", label 1
    when the noun belongs to the category (half the pairs), 0 otherwise. The truth is the word lists, so it is
    known for every pair; no padding."""

    @property
    def seq_len(self) -> int:
        return 4 + len(TEMPLATES[0].split())  # [CLS] category [SEP] sentence [SEP]

    def sample(self, words: WordIds, n: int, g: torch.Generator) -> Examples:
        n = int_in("n", n, 1, 1 << 16)
        k = len(words.names)
        asked = torch.randint(k, (n,), generator=g)
        label = torch.randint(2, (n,), generator=g)
        noun_cat = torch.where(label.bool(), asked, _other_category(asked, k, g))
        template = torch.randint(len(words.templates), (n,), generator=g)
        nouns = _nouns(words, noun_cat, g)
        context = torch.tensor([[nouns[i].item() if w is None else w for w in words.templates[t]]
                                for i, t in enumerate(template.tolist())])                    # (n, 3)
        ids, types = _pair(words, words.category_ids[asked], context)
        return Examples(ids, types, label)


@dataclass(frozen=True)
class SpanTask:
    """Extractive question answering with a known answer: "[CLS] <category> [SEP] <context> [SEP]", the context
    `context_len` word pieces of filler words holding two two-word phrases "<colour> <noun>" whose nouns are of
    different categories. The answer is the phrase whose noun belongs to the asked category: its colour is the
    start, its noun the end, so a token cannot tell from its own word whether it starts the answer."""

    context_len: int = 8

    def __post_init__(self):
        int_in("SpanTask.context_len", self.context_len, 4, 64)

    @property
    def seq_len(self) -> int:
        return self.context_len + 4

    def sample(self, words: WordIds, n: int, g: torch.Generator) -> Examples:
        n = int_in("n", n, 1, 1 << 16)
        k, c = len(words.names), self.context_len
        asked = torch.randint(k, (n,), generator=g)
        other = _other_category(asked, k, g)
        context = words.fillers[torch.randint(len(words.fillers), (n, c), generator=g)]       # (n, C)
        # two phrase starts a < b with b >= a + 2 and b + 1 < C, uniform over such pairs
        starts = [(a, b) for a in range(c - 1) for b in range(a + 2, c - 1)]
        pick = torch.randint(len(starts), (n,), generator=g)
        answer_first = torch.randint(2, (n,), generator=g).bool()
        answer_nouns, other_nouns = _nouns(words, asked, g), _nouns(words, other, g)
        colours = words.colours[torch.randint(len(words.colours), (n, 2), generator=g)]
        start = torch.empty(n, dtype=torch.long)
        for i in range(n):
            a, b = starts[int(pick[i])]
            pos_answer, pos_other = (a, b) if answer_first[i] else (b, a)
            context[i, pos_answer], context[i, pos_answer + 1] = colours[i, 0], answer_nouns[i]
            context[i, pos_other], context[i, pos_other + 1] = colours[i, 1], other_nouns[i]
            start[i] = 3 + pos_answer  # [CLS] question [SEP] come first
        ids, types = _pair(words, words.category_ids[asked], context)
        return Examples(ids, types, torch.stack([start, start + 1], dim=1))


# -- heads: what BERT puts on the encoder for each kind of task -------------------------------------------------
HEADS = ("cls", "span", "cls_span")
HEAD_NAMES = {"cls": "[CLS] classifier", "span": "span head on every token", "cls_span": "span head on [CLS]"}


class Head(nn.Module):
    """cls: W C + b on the last layer's [CLS] vector C (BERT sec. 4.1: 'the only new parameters ... are
    classification layer weights W'); span: a start vector S and an end vector E scored against every token T_i
    (BERT sec. 4.2);
    cls_span: start and end logits for every position read from [CLS] alone, a linear map d -> 2T.
    Weights N(0, 0.02) as BERT initialises, biases 0."""

    def __init__(self, kind: str, d: int, seq_len: int, generator: torch.Generator) -> None:
        super().__init__()
        self.kind = choice("head", kind, HEADS)
        self.seq_len = seq_len
        n_out = {"cls": 2, "span": 2, "cls_span": 2 * seq_len}[kind]
        self.linear = nn.Linear(d, n_out)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(n_out, d, generator=generator) * 0.02)
            self.linear.bias.zero_()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> class logits (B, 2), or start/end logits (B, 2, T)."""
        if self.kind == "cls":
            return self.linear(hidden[:, 0])
        if self.kind == "span":
            return self.linear(hidden).transpose(1, 2)                   # (B, T, 2) -> (B, 2, T)
        return self.linear(hidden[:, 0]).view(-1, 2, self.seq_len)       # (B, 2T) -> (B, 2, T)


def head_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy: over the two classes, or (BERT sec. 4.2) the mean of the start and end log-likelihoods."""
    if logits.dim() == 2:
        return F.cross_entropy(logits, labels)
    return (F.cross_entropy(logits[:, 0], labels[:, 0]) + F.cross_entropy(logits[:, 1], labels[:, 1])) / 2


def best_span(logits: torch.Tensor, first: int = 3, last: int | None = None) -> torch.Tensor:
    """(B, 2, T) start/end logits -> (B, 2) the span i <= j inside the context (positions first .. last - 1;
    default: up to the final [SEP]) that maximises start_i + end_j, BERT's prediction rule (sec. 4.2)."""
    t = logits.shape[-1]
    last = t - 1 if last is None else last
    s, e = logits[:, 0, first:last], logits[:, 1, first:last]          # (B, C)
    score = s[:, :, None] + e[:, None, :]                               # (B, C, C): start i, end j
    allowed = torch.ones(score.shape[1:], dtype=torch.bool).triu()      # j >= i
    flat = score.masked_fill(~allowed, float("-inf")).flatten(1).argmax(1)
    c = score.shape[1]
    return torch.stack([flat // c, flat % c], dim=1) + first


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of right answers: the argmax class, or for spans the best span's start and end both right."""
    if logits.dim() == 2:
        return float((logits.argmax(-1) == labels).float().mean())
    return float((best_span(logits) == labels).all(1).float().mean())


# -- the pretrained encoder, run once: its hidden states feed every frozen layer ------------------------------
@dataclass
class Stream:
    """A fixed list of examples and the pretrained model's hidden states on them: hidden[l] (N, T, d) is the input
    of layer l (hidden[0] the embeddings' output, hidden[L] the last layer's output, if the stream went that far).
    A run that trains the top n layers starts from hidden[L - n], so frozen layers are run once per stream, not once
    per run."""

    examples: Examples
    hidden: list[torch.Tensor]


def frozen_stream(model: MiniBert, examples: Examples, batch_size: int = 64, layers: int | None = None) -> Stream:
    """The pretrained model's hidden states after the embeddings and after each of its first `layers` layers (default:
    all), on every example (moved to the model's device). A run that trains the top k layers needs only the first
    L - k: the rest would be computed and never read."""
    n = len(model.layers) if layers is None else int_in("layers", layers, 0, len(model.layers))
    examples = examples.to(next(model.parameters()).device)
    parts = []
    with torch.no_grad():
        for lo in range(0, len(examples), batch_size):
            ex = examples.slice(lo, lo + batch_size)
            x = model.embeddings(ex.input_ids, ex.token_type_ids, None)  # every token real: no mask
            parts.append([x] + run_layers(model.layers[:n], x))
    return Stream(examples, [torch.cat([p[i] for p in parts]) for i in range(n + 1)])


def run_layers(layers, x: torch.Tensor) -> list[torch.Tensor]:
    """The outputs of each layer in turn, from x (B, T, d); every token real (no mask)."""
    out = []
    for layer in layers:
        x = layer(x, None)
        out.append(x)
    return out


# -- fine-tuning ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FineTuneConfig:
    """BERT's fine-tuning recipe (sec. 4, app. A.3; the optimiser of its code): AdamW with weight decay 0.01
    (not on biases and LayerNorm), eps 1e-6, the learning rate warmed up linearly over the first 10% of steps,
    then decayed linearly to 0, gradients clipped to norm 1. The embeddings (word, position and segment tables and
    their LayerNorm) stay frozen (the word table alone is 11.7M of MiniLM's 22.7M parameters), and so do the bottom
    layers unless `trainable` (the top layers that train) is the whole stack. No dropout: the runs are short, and it keeps
    every run reproducible to the digit."""

    lr: float = 3e-4
    trainable: int = 6      # how many of the top layers train; 0: the head alone
    batch_size: int = 16
    warmup: float = 0.1
    weight_decay: float = 0.01
    clip: float = 1.0

    def __post_init__(self):
        float_in("FineTuneConfig.lr", self.lr, 0, 1, lo_open=True)
        int_in("FineTuneConfig.trainable", self.trainable, 0, 64)
        int_in("FineTuneConfig.batch_size", self.batch_size, 1, 4096)
        float_in("FineTuneConfig.warmup", self.warmup, 0, 1)


@dataclass
class Tuned:
    """A fine-tuned model: the pretrained model's frozen bottom, its own copies of the top `trainable` layers,
    and the head. losses: the training loss at every step."""

    base: MiniBert
    top: nn.ModuleList
    head: Head
    cfg: FineTuneConfig
    losses: list[float]

    @property
    def first_tuned(self) -> int:
        return len(self.base.layers) - len(self.top)

    def hidden(self, stream: Stream) -> list[torch.Tensor]:
        """hidden[l] as in Stream, on the stream's examples, from this model (the frozen ones copied)."""
        with torch.no_grad():
            return stream.hidden[: self.first_tuned + 1] + run_layers(self.top, stream.hidden[self.first_tuned])

    def logits(self, stream: Stream) -> torch.Tensor:
        with torch.no_grad():
            return self.head(self.hidden(stream)[-1])


def warmup_steps(warmup: float, steps: int) -> int:
    """The warm-up's length in steps: the first `warmup` share of them, at least one unless the share is 0. The
    learning rate then rises linearly over these and decays linearly to 0 (qalib.lab.train.lr_factor, decay
    "linear"). BERT's has the same shape; its code starts the warm-up at 0 (a first step that moves nothing) and
    decays from step 0, under the warm-up, so that it leaves the warm-up at 1 - warmup rather than at 1."""
    return max(1, math.ceil(warmup * steps)) if warmup > 0 else 0


class TopAndHead(nn.Module):
    """What fine-tuning trains: copies of the top layers, then the head, on the frozen bottom's hidden states."""

    def __init__(self, top: nn.ModuleList, head: Head) -> None:
        super().__init__()
        self.top, self.head = top, head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h (B, T, d): the hidden states entering the first trained layer -> the head's logits."""
        for layer in self.top:
            h = layer(h, None)
        return self.head(h)


def finetune(base: MiniBert, stream: Stream, head: str, cfg: FineTuneConfig, seed: int) -> Tuned:
    """Fine-tune the top cfg.trainable layers of `base` (copies; base is not changed) and a new head on the
    stream's examples, cfg.batch_size per step in their order: one pass, len(stream) / batch_size steps. The head's
    initialisation comes from `seed`; the examples are the stream's, so runs of one stream that differ only in
    lr, trainable or head see the same data in the same order (a paired comparison)."""
    seed = seed_int("seed", seed)
    n_layers = len(base.layers)
    trainable = int_in("trainable", cfg.trainable, 0, n_layers)
    steps = len(stream.examples) // cfg.batch_size
    if steps < 1:
        raise ValueError(f"the stream holds {len(stream.examples)} examples, fewer than one batch of {cfg.batch_size}")
    top = copy.deepcopy(base.layers[n_layers - trainable:])
    x_in = stream.hidden[n_layers - trainable]
    gen = torch.Generator().manual_seed(seed)  # on the CPU: the same head on every device
    model = TopAndHead(top, Head(head, base.cfg.d_model, stream.examples.input_ids.shape[1], gen).to(x_in.device))
    labels = stream.examples.labels
    batches = (slice(step * cfg.batch_size, (step + 1) * cfg.batch_size) for step in range(steps))
    decay, no_decay = [], []  # BERT's rule: no weight decay on biases and LayerNorm
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or "norm" in name else decay).append(p)
    train_cfg = TrainConfig(steps=steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup=warmup_steps(cfg.warmup, steps),
                            decay="linear", weight_decay=cfg.weight_decay, clip=cfg.clip, eps=1e-6,
                            kernel="fused" if x_in.device.type in ("cpu", "cuda") else "foreach",  # ~5x faster here
                            log_every=steps, threads=None, device=x_in.device)
    history = fit(model, lambda m, rows: head_loss(m(x_in[rows]), labels[rows]), batches, train_cfg,
                  decay_groups=(decay, no_decay))
    return Tuned(base, model.top, model.head, cfg, history.step_loss)


# -- the probe's control ----------------------------------------------------------------------------------------
def random_encoder(base: MiniBert, seed: int, keep_embeddings: bool = False) -> MiniBert:
    """A model of base's shape at BERT's initialisation (weights N(0, cfg.init_std), biases 0), on base's device, in
    eval mode: the control for a probe (can a linear probe read the relation from any encoder of this shape, or only
    from the pretrained one?). keep_embeddings: the pretrained embeddings (word, position and segment tables and their
    LayerNorm) under random layers. base is not changed; the global random state is left as it was."""
    seed = seed_int("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MiniBert(base.cfg)
    if keep_embeddings:
        model.embeddings.load_state_dict(base.embeddings.state_dict())
    return model.to(next(base.parameters()).device).eval()


# -- what a run moved --------------------------------------------------------------------------------------
@torch.no_grad()
def relative_weight_change(base: MiniBert, tuned: Tuned) -> np.ndarray:
    """(L,) per layer ||theta - theta_0|| / ||theta_0|| over all of the layer's parameters (0 for a frozen layer)."""
    out = np.zeros(len(base.layers))
    for i, layer in enumerate(tuned.top):
        old = dict(base.layers[tuned.first_tuned + i].named_parameters())
        diff = sum(float((p - old[n]).pow(2).sum()) for n, p in layer.named_parameters())
        norm = sum(float(old[n].pow(2).sum()) for n, _ in layer.named_parameters())
        out[tuned.first_tuned + i] = math.sqrt(diff / norm)
    return out


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) between two sets of n vectors (n, d1), (n, d2): 1 when one is an
    orthogonal transform and rescaling of the other, near 0 when unrelated."""
    x, y = x - x.mean(0), y - y.mean(0)
    cross = (y.T @ x).pow(2).sum()
    return float(cross / ((x.T @ x).pow(2).sum().sqrt() * (y.T @ y).pow(2).sum().sqrt()))


def layer_cka(before: list[torch.Tensor], after: list[torch.Tensor], rows: int = 1024) -> np.ndarray:
    """(L,) CKA between the pretrained and the fine-tuned output of each layer, each token a row: every token of
    the first examples, up to `rows` of them."""
    n = max(1, rows // before[0].shape[1])
    return np.array([linear_cka(b[:n].flatten(0, 1), a[:n].flatten(0, 1)) for b, a in zip(before[1:], after[1:])])


def mean_pooled(hidden: torch.Tensor) -> torch.Tensor:
    """(N, T, d) -> (N, d): MiniLM's sentence embedding (the mean over tokens; every token is real here)."""
    return hidden.mean(1)


def similarity_structure(before: torch.Tensor, after: torch.Tensor) -> float:
    """Pearson correlation between the pairwise cosine similarities of n sentence embeddings before and after
    fine-tuning (every pair once): 1 when the model still ranks every pair of sentences as it did."""
    def cosines(e):
        e = F.normalize(e.double(), dim=-1)
        sims = e @ e.T                                            # (n, n)
        i, j = torch.triu_indices(len(e), len(e), offset=1)
        return sims[i, j]
    a, b = cosines(before), cosines(after)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


# -- the demos: they read runs the notebook already made (fine-tuning is far too slow for a redraw) ---------------
def trained_name(k: int, n_layers: int = 6) -> str:
    """How the demos and figures name a run that trained the top k of n_layers layers."""
    if k == 0:
        return "the head alone (a linear probe)"
    return "all layers" if k == n_layers else ("the top layer" if k == 1 else f"the top {k} layers")


def movement_demo_compute(grid: dict, lr: float, trainable: int, seed: int = 0) -> dict:
    """One run of the learning rate x trained layers grid: per layer, its relative weight change and 1 - CKA of its
    output to the pretrained model's; the run's held-out accuracy and how much of the held-out text's similarity
    structure survived. grid: lrs, trainable (the axes), acc (S, LR, K), similarity (S, LR, K), weight_change and
    cka (S, LR, K, L)."""
    lrs, ks = list(grid["lrs"]), list(grid["trainable"])
    if lr not in lrs:
        raise ValueError(f"the notebook fine-tuned at the learning rates {lrs}, not at {lr!r}")
    if trainable not in ks:
        raise ValueError(f"the notebook trained the top {ks} layers, not {trainable!r}")
    s = int_in("seed", seed, 0, grid["acc"].shape[0] - 1)
    i, j = lrs.index(lr), ks.index(trainable)
    n_layers = grid["cka"].shape[-1]
    note = ("nothing in the encoder moved: only the head was fitted (in closed form, on the frozen [CLS] vectors)"
            if trainable == 0 else "")
    return {"change": grid["weight_change"][s, i, j], "shift": 1 - grid["cka"][s, i, j],
            "acc": float(grid["acc"][s, i, j]), "similarity": float(grid["similarity"][s, i, j]), "lr": lr,
            "trained": trained_name(trainable, n_layers), "note": note,
            "change_top": float(np.max(grid["weight_change"]))}  # the largest change of any run: the axis fits all


def plot_movement_demo(fig, res: dict):
    """Two bar panels over the layers: relative weight change (log scale from 1e-4) and 1 - CKA to the start; the
    bars and the title are live."""
    a1, a2 = fig.subplots(1, 2)
    n = len(res["change"])
    x = np.arange(1, n + 1)
    change = live_bars(a1, facecolors="#2166ac")
    shift = live_bars(a2, facecolors="#b35806")
    a1.set_yscale("log")
    a1.set_ylim(1e-4, max(0.2, 1.5 * res.get("change_top", 0.0)))  # every run's bars fit (1e-3 at SCALE = 4 moves more)
    a2.set_ylim(0, 1)
    for ax in (a1, a2):
        ax.set_xlim(0.4, n + 0.6)
        ax.set_xticks(x)
        ax.set_xlabel("layer")
    a1.set_ylabel("relative weight change\n||θ - θ₀|| / ||θ₀||")
    a2.set_ylabel("1 - CKA of the layer's output\nto the pretrained model's")
    title = live_title(a1)
    title2 = live_title(a2)

    def update(r: dict):
        change.set_verts(bar_polygons(x, np.maximum(r["change"], 1e-4)))  # a frozen layer's 0 sits on the floor
        shift.set_verts(bar_polygons(x, r["shift"]))
        title.set_text(f"lr {r['lr']:g}, trained: {r['trained']}")
        title2.set_text(f"held-out accuracy {r['acc']:.2f}; text similarity kept r = {r['similarity']:.2f}")
        return None

    update(res)
    return update


def span_demo_compute(logits: np.ndarray, examples: Examples, tokens: list[list[str]], head: str, example: int = 0,
                      seed: int = 0) -> dict:
    """One held-out example of the span task under one trained head: the softmax of its start and end logits over
    the tokens, the true span and the span BERT's rule picks. logits: {head: (S, N, 2, T)}."""
    if head not in logits:
        raise ValueError(f"head must be one of {sorted(logits)}, got {head!r}")
    s = int_in("seed", seed, 0, logits[head].shape[0] - 1)
    i = int_in("example", example, 0, logits[head].shape[1] - 1)
    z = torch.as_tensor(logits[head][s, i])                                   # (2, T)
    pred = best_span(z[None])[0].tolist()
    truth = examples.labels[i].tolist()
    words = tokens[i]
    return {"tokens": words, "start": torch.softmax(z[0], -1).numpy(), "end": torch.softmax(z[1], -1).numpy(),
            "truth": truth, "pred": pred, "right": pred == truth, "head": HEAD_NAMES[head],
            "answer": " ".join(words[truth[0]:truth[1] + 1]), "predicted": " ".join(words[pred[0]:pred[1] + 1])}


def plot_span_demo(fig, res: dict):
    """Start and end probabilities per token as live bars, the tokens as live labels; the true span shaded."""
    ax = fig.add_subplot(1, 1, 1)
    t = len(res["tokens"])
    truth = live_bars(ax, facecolors="#fee391", label="the answer")
    start = live_bars(ax, facecolors="#2166ac", label="p(start)")
    end = live_bars(ax, facecolors="#b35806", label="p(end)")
    ax.set_xlim(-0.6, t - 0.4)
    ax.set_ylim(0, 1)
    labels = LiveTickLabels(ax, "x", size=8, rotation=0, width_chars=9)
    ax.set_xlabel("token")
    ax.set_ylabel("probability")
    ax.legend(loc="upper right", fontsize=8)
    title = live_title(ax)

    def update(r: dict):
        x = np.arange(len(r["tokens"]))
        start.set_verts(bar_polygons(x - 0.2, r["start"], width=0.4))
        end.set_verts(bar_polygons(x + 0.2, r["end"], width=0.4))
        lo, hi = r["truth"]
        truth.set_verts(bar_polygons([(lo + hi) / 2], [1.0], width=hi - lo + 1))
        labels.set(r["tokens"])
        verdict = "right" if r["right"] else "wrong"
        title.set_text(f"{r['head']}: picks '{r['predicted']}' ({verdict}; the answer is '{r['answer']}')")
        return None

    update(res)
    return update
