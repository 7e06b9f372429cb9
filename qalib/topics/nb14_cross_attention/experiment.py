"""Notebook 14, the trained encoder-decoders: reversal models (tied / untied, with / without label smoothing),
what their cross-attention looks at, what their memory holds, and what breaks when the memory is tampered with.

    res = run_reversal_experiment(seeds=(0, 1, 2), steps=200)
    res.accuracy, res.share                         # (V, S) held-out accuracy; (V, S, L, H) alignment shares
    model = res.models[("tied", 0)]
    memory_wiring(model, task)                      # every layer's cross K/V from the one memory; layers' K differ
    memory_ablations(model, task)                   # zero / another sentence's / permuted memory; matching-layer wiring
    memory_probes(model, task)                      # linear probes on the memory: its token, its position, a neighbour
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache, partial

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.device import one_thread
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.train import TrainConfig, fit
from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.nn.decoder import EncoderDecoder
from qalib.nn.generate import generate
from qalib.nn.kv_cache import KVCache, LayerKV
from qalib.nn.validate import choice, int_in, seed_list
from qalib.lab.stats import paired_difference
from qalib.notebook.claims import above, at_least, check
from qalib.notebook.drawing import Change, Update, budget_axis, live, seeds_and_median
from qalib.topics.nb14_cross_attention.compute import ReversalTask, alignment_share, reversal_config


# name -> (tie the LM head to the embeddings, label smoothing eps)
VARIANTS = {"tied": (True, 0.0), "tied, eps=0.1": (True, 0.1), "untied": (False, 0.0)}
EVAL_SEED = 12345  # held-out batches come from a generator no training run uses


@dataclass
class ReversalResult:
    variants: list[str]
    seeds: list[int]
    accuracy: np.ndarray   # (V, S) held-out token accuracy
    nll: np.ndarray        # (V, S) held-out cross-entropy on the true token, unsmoothed (nats)
    p_true: np.ndarray     # (V, S) mean probability of the true token
    share: np.ndarray      # (V, S, L, H) cross-attention mass on the true source position, per layer and head
    n_params: np.ndarray   # (V,) parameters of each variant's model
    steps: int
    models: dict = field(repr=False, default_factory=dict)  # (variant, seed) -> trained EncoderDecoder, in eval mode
    task: ReversalTask = field(default_factory=ReversalTask)

    def best_share(self) -> np.ndarray:
        """(V, S): the share of the best head in any layer."""
        return self.share.max(axis=(2, 3))


def held_out(task: ReversalTask, n: int = 512):
    return task.batch(n, torch.Generator().manual_seed(EVAL_SEED))


@one_thread()  # tiny tensors: a second thread only spins, the more so on a busy machine
@torch.no_grad()
def evaluate_model(model: EncoderDecoder, task: ReversalTask, n: int = 512) -> dict:
    """Teacher-forced held-out accuracy, unsmoothed NLL, mean p(true) and per-(layer, head) alignment shares."""
    source, decoder_in, labels = held_out(task, n)
    out = model(source, decoder_in, return_internals=True)
    logp = out.logits.log_softmax(-1)  # (B, T, vocab)
    lp_true = logp.gather(-1, labels[..., None])[..., 0]  # (B, T)
    share = [alignment_share(out.internals[f"layer{i}.cross.probs"], task.alignment).numpy()
             for i in range(model.cfg.n_layers)]
    return {"accuracy": float((logp.argmax(-1) == labels).double().mean()), "nll": float(-lp_true.mean()),
            "p_true": float(lp_true.exp().mean()), "share": np.array(share)}


@one_thread()
def run_reversal_experiment(seeds=(0, 1, 2), steps: int = 200, lr: float = 3e-3, batch_size: int = 32,
                            task: ReversalTask | None = None, device: str | None = None) -> ReversalResult:
    """Train every variant on every seed (same seed, same init of the shared parts and the same data stream)."""
    seeds = seed_list("seeds", seeds)
    int_in("steps", steps, 1, 100_000)
    task = task or ReversalTask()
    runs = [(name, seed) for name in VARIANTS for seed in seeds]
    states = map_runs(partial(_train_one, task=task, steps=steps, lr=lr, batch_size=batch_size, device=device),
                      runs, device)
    models, evals = {}, []
    for (name, seed), state in zip(runs, states):
        model = EncoderDecoder(reversal_config(VARIANTS[name][0], task.vocab_size))
        model.load_state_dict(state)
        models[(name, seed)] = model.eval()
        evals.append(evaluate_model(model, task))
    shape = (len(VARIANTS), len(seeds))
    pick = lambda key: np.array([e[key] for e in evals]).reshape(shape + np.shape(evals[0][key]))  # noqa: E731
    n_params = np.array([sum(p.numel() for p in models[(name, seeds[0])].parameters()) for name in VARIANTS])
    return ReversalResult(list(VARIANTS), seeds, pick("accuracy"), pick("nll"), pick("p_true"), pick("share"),
                          n_params, steps, models, task)


def _train_one(run: tuple[str, int], task: ReversalTask, steps: int, lr: float, batch_size: int,
               device: str | None) -> dict:
    """Teacher forcing with Adam (no warm-up, no clipping, no weight decay); returns the trained weights on the CPU
    (a state dict crosses processes)."""
    name, seed = run
    tie, eps = VARIANTS[name]
    torch.manual_seed(seed)
    model = EncoderDecoder(reversal_config(tie, task.vocab_size))
    g = torch.Generator().manual_seed(seed)
    batches = (task.batch(batch_size, g) for _ in range(steps))
    # Adam is AdamW without weight decay; "default": torch's own kernel choice, as a plain torch.optim.Adam makes
    cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=0, weight_decay=0.0, clip=0.0,
                      kernel="default", log_every=steps, threads=None, device=device or "cpu")
    fit(model, partial(smoothed_loss, label_smoothing=eps), batches, cfg)
    return {k: v.cpu() for k, v in model.state_dict().items()}


def smoothed_loss(model: EncoderDecoder, batch: tuple, label_smoothing: float) -> torch.Tensor:
    """Teacher-forced cross-entropy of one (source, decoder input, labels) batch, with label smoothing."""
    dev = next(model.parameters()).device
    source, decoder_in, labels = (x.to(dev) for x in batch)
    logits = model(source, decoder_in).logits  # (B, T, vocab)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=label_smoothing)


# -- where cross-attention's K and V come from ---------------------------------------------------------
def _decode_with_memories(model: EncoderDecoder, decoder_in: torch.Tensor, memories) -> torch.Tensor:
    """Logits when decoder layer i's cross-attention reads memories[i]: a cache with no self-attention positions
    yet and the cross keys/values of the chosen memories (the same path generation takes)."""
    cfg = model.cfg
    b = decoder_in.shape[0]
    empty = torch.zeros(b, cfg.kv_heads, 0, cfg.d_head)  # (B, H_kv, 0, dh): no target position cached
    cross = tuple(layer.cross_attention.memory_kv(m) for layer, m in zip(model.decoder.layers, memories))
    cache = KVCache(tuple(LayerKV(empty, empty) for _ in cross), cross)
    return model.decode(decoder_in, cache=cache).logits


@one_thread()  # tiny tensors: a second thread only spins, the more so on a busy machine
@torch.no_grad()
def memory_wiring(model: EncoderDecoder, task: ReversalTask, n: int = 64) -> dict:
    """What each decoder layer's cross-attention consumed (from the forward pass's internals) against
    memory_kv(encode(source)): the max difference per layer; how far apart the layers' K are (relative norm of
    the difference); and how far each layer's K is from the K it would get from the *matching* encoder layer's
    output instead of the final one."""
    source, decoder_in, _ = held_out(task, n)
    enc_internals: dict = {}
    memory = model.encode(source, enc_internals)
    out = model(source, decoder_in, return_internals=True)
    used = [out.internals[f"layer{i}.cross.k"] for i in range(model.cfg.n_layers)]  # (B, H_kv, S, dh) each
    from_memory = [layer.cross_attention.memory_kv(memory) for layer in model.decoder.layers]
    v_used = [out.internals[f"layer{i}.cross.v"] for i in range(model.cfg.n_layers)]
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    matching = [layer.cross_attention.memory_kv(enc_internals[f"encoder.layer{i}.hidden"]).k
                for i, layer in enumerate(model.decoder.layers)]
    return {"k_gap": [float((u - m.k).abs().max()) for u, m in zip(used, from_memory)],
            "v_gap": [float((u - m.v).abs().max()) for u, m in zip(v_used, from_memory)],
            "layers_k_rel_diff": rel(used[1], used[0]),
            "matching_layer_k_rel_diff": [rel(m, u) for m, u in zip(matching, used)],
            "memory_shape": tuple(memory.shape), "k_shape": tuple(used[0].shape)}


@one_thread()  # tiny tensors: a second thread only spins, the more so on a busy machine
@torch.no_grad()
def cached_decoding(model: EncoderDecoder, task: ReversalTask, n: int = 128) -> dict:
    """Free-running greedy decoding from [BOS] (no teacher forcing), one position at a time with the KV cache:
    the share of held-out sentences reversed exactly, agreement with qalib.nn.generate, and whether every step
    reused the first step's cross-attention keys and values (the same tensor objects) while the self-attention
    cache grew."""
    source, decoder_in, labels = held_out(task, n)
    memory = model.encode(source)
    out = model.decode(decoder_in[:, :1], memory, use_cache=True, last_only=True)
    first = out.cache
    ids, reused, lengths = [], True, []
    for _ in range(task.src_len):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        ids.append(nxt)
        reused &= all(a.k is b.k and a.v is b.v for a, b in zip(out.cache.cross, first.cross))
        lengths.append(out.cache.length)
        out = model.decode(nxt, cache=out.cache, use_cache=True, last_only=True)
    ids = torch.cat(ids, dim=1)  # (B, S)
    reference = generate(model, decoder_in[:, :1], task.src_len, source_ids=source)[:, 1:]
    return {"exact": float((ids == labels).all(1).double().mean()), "same_as_generate": bool((ids == reference).all()),
            "cross_reused": bool(reused), "self_cache_lengths": lengths,
            "cross_shape": tuple(first.cross[0].k.shape)}


@one_thread()  # tiny tensors: a second thread only spins, the more so on a busy machine
@torch.no_grad()
def memory_ablations(model: EncoderDecoder, task: ReversalTask, n: int = 512) -> dict:
    """Held-out accuracy with the memory as it is, zeroed, taken from another sentence of the batch (scored
    against that sentence's reversal too), permuted along the source positions, and wired "layer i reads
    encoder layer i" instead of every layer reading the final output."""
    source, decoder_in, labels = held_out(task, n)
    internals: dict = {}
    memory = model.encode(source, internals)  # (B, S, d)
    acc = lambda logits, y=labels: float((logits.argmax(-1) == y).double().mean())  # noqa: E731
    n_layers = model.cfg.n_layers
    normal = model.decode(decoder_in, memory).logits
    donor = memory.roll(1, dims=0)  # sentence b reads sentence b-1's memory
    swapped = model.decode(decoder_in, donor).logits
    perm = torch.randperm(task.src_len, generator=torch.Generator().manual_seed(0))
    permuted = model.decode(decoder_in, memory[:, perm]).logits
    matching = _decode_with_memories(model, decoder_in, [internals[f"encoder.layer{i}.hidden"] for i in range(n_layers)])
    return {"normal": acc(normal), "zero": acc(model.decode(decoder_in, torch.zeros_like(memory)).logits),
            "swapped_own": acc(swapped), "swapped_donor": acc(swapped, labels.roll(1, dims=0)),
            "permuted_max_change": float((permuted - normal).abs().max()),
            "matching_layer": acc(matching), "chance": 1 / task.n_content}


@one_thread()  # tiny tensors: a second thread only spins, the more so on a busy machine
@torch.no_grad()
def memory_probes(model: EncoderDecoder, task: ReversalTask, n_train: int = 512, n_test: int = 512) -> dict:
    """Linear probes (least squares, qalib.lab.probes) on memory vectors and, for comparison, on the encoder's input
    embeddings (token + position, no context): read the position's own token, its position and the next source
    token (its right neighbour; positions 0 .. S-2), and the previous one (its left neighbour; positions 1 .. S-1).
    Accuracy on held-out sentences."""
    s = task.src_len
    train_src = task.batch(n_train, torch.Generator().manual_seed(EVAL_SEED + 1))[0]
    test_src = held_out(task, n_test)[0]

    def features(source):  # -> {"memory": (B, S, d), "embeddings": (B, S, d)}
        internals: dict = {}
        memory = model.encode(source, internals)
        return {"memory": memory, "embeddings": internals["encoder.embeddings.out"]}

    def targets(source):  # each (B * (S-1),): over positions 0 .. S-2, so the neighbour exists
        b = source.shape[0]
        return {"token": source[:, :-1].flatten(), "position": torch.arange(s - 1).repeat(b),
                "next token": source[:, 1:].flatten()}

    f_train, f_test = features(train_src), features(test_src)
    y_train, y_test = targets(train_src), targets(test_src)
    out = {}
    for where in ("memory", "embeddings"):
        x_train = f_train[where][:, :-1].flatten(0, 1)  # (B * (S-1), d): positions 0 .. S-2
        x_test = f_test[where][:, :-1].flatten(0, 1)
        out[where] = {}
        for what in y_train:
            w = fit_probe(x_train, y_train[what], task.vocab_size if what != "position" else s)
            out[where][what] = probe_accuracy(w, x_test, y_test[what])
        # the left neighbour: positions 1 .. S-1 read the token before them, (B * (S-1), d) -> (B * (S-1),)
        w = fit_probe(f_train[where][:, 1:].flatten(0, 1), train_src[:, :-1].flatten(), task.vocab_size)
        out[where]["previous token"] = probe_accuracy(w, f_test[where][:, 1:].flatten(0, 1), test_src[:, :-1].flatten())
    out["chance"] = {"token": 1 / task.n_content, "position": 1 / (s - 1), "next token": 1 / task.n_content,
                     "previous token": 1 / task.n_content}
    return out


@one_thread()  # tiny tensors: a second thread only spins, the more so on a busy machine
@torch.no_grad()
def reverse_direction_share(model: EncoderDecoder, task: ReversalTask, layer: int = 0, n: int = 256) -> dict:
    """Cross-attention run the other way with the same weights: the source positions as queries (W_Q on the
    memory), the target positions as keys (W_K on the decoder stream that entered this layer's cross-attention).
    The best head's mean mass on the aligned position, in both directions."""
    source, decoder_in, _ = held_out(task, n)
    ca = model.decoder.layers[layer].cross_attention
    seen = {}
    hook = ca.register_forward_pre_hook(lambda _module, args: seen.update(stream=args[0]))  # (B, T, d): its input
    try:
        out = model(source, decoder_in, return_internals=True)
    finally:
        hook.remove()
    memory = model.encode(source)
    q_src = ca.split_heads(F.linear(memory, ca.w_q, ca.b_q))  # (B, H, S, dh)
    k_tgt = ca.split_heads(F.linear(seen["stream"], ca.w_k, ca.b_k))  # (B, H, T, dh)
    probs = (q_src @ k_tgt.transpose(-1, -2) * model.cfg.scale).softmax(-1)  # (B, H, S, T)
    forward = alignment_share(out.internals[f"layer{layer}.cross.probs"], task.alignment)
    backward = alignment_share(probs, task.alignment)  # reversal is its own inverse: source j aligns with target S-1-j
    return {"forward": float(forward.max()), "backward": float(backward.max()), "chance": 1 / task.src_len}


# -- the demo on a trained model ----------------------------------------------------------------------
@lru_cache(maxsize=1)
def small_result() -> ReversalResult:
    """A stand-in for the notebook's experiment (one seed, the tied model) so the demo builds on its own."""
    return run_reversal_experiment(seeds=(0,), steps=200, device="cpu")


def alignment_view(res: ReversalResult, variant: str, seed: int, layer: int, head, example: int = 0) -> dict:
    """One held-out sentence's cross-attention (T, S) in a layer (one head, or the heads' mean), the true
    alignment, and the share on it."""
    choice("variant", variant, res.variants)
    choice("seed", seed, res.seeds)
    model = res.models[(variant, seed)]
    int_in("layer", layer, 0, model.cfg.n_layers - 1)
    if head != "mean":
        int_in("head", head, 0, model.cfg.n_heads - 1)
    int_in("example", example, 0, 63)
    source, decoder_in, labels = held_out(res.task, 64)
    with torch.no_grad():
        out = model(source[example:example + 1], decoder_in[example:example + 1], return_internals=True)
    probs = out.internals[f"layer{layer}.cross.probs"][0]  # (H, T, S)
    p = probs.mean(0) if head == "mean" else probs[head]
    t = p.shape[0]
    share = float(p[torch.arange(t), res.task.alignment[:t]].mean())
    return {"probs": p.numpy(), "alignment": res.task.alignment.numpy(), "share": share, "layer": layer, "head": head,
            "source": source[example].numpy(), "target": labels[example].numpy(),
            "predicted": out.logits[0].argmax(-1).numpy()}


def plot_alignment(fig, res: dict) -> Update:
    """Fixed axes (positions as ticks); a change of setting redraws only the image and the title, which names the
    sentence's tokens (changing only live artists keeps a redraw near 0.1 s)."""
    ax = fig.subplots()
    t, s = res["probs"].shape
    im = ax.imshow(np.zeros((t, s)), cmap="viridis", vmin=0, vmax=1, interpolation="nearest", aspect="auto")
    fig.colorbar(im, ax=ax, label="attention probability")
    ax.plot(res["alignment"], np.arange(t), "s", mfc="none", mec="#ff7f0e", mew=1.5, ms=14, label="true source position")
    ax.set(xlabel="source position", ylabel="target position", xticks=range(s), yticks=range(t))
    ax.legend(loc="lower left", fontsize=7, framealpha=0.8)
    ax.grid(False)
    live(im, ax.title)

    def update(res) -> Change | None:
        if res["probs"].shape != (t, s):
            return Change.FIGURE
        im.set_data(res["probs"])
        head = "mean of heads" if res["head"] == "mean" else f"head {res['head']}"
        tokens = " ".join(str(int(x)) for x in res["source"])
        ax.set_title(f"layer {res['layer']}, {head}: share on the true position {res['share']:.2f}\n"
                     f"source tokens {tokens}", fontsize=9)
        return None

    update(res)
    return update


# -- the reference: do the trained model's properties hold once it has had 4x and 16x the steps? ---------------------
SOLVED = 0.99  # teacher-forced held-out accuracy at which a run counts as having learned to reverse


@one_thread()  # tiny tensors: a second thread only spins
def reference_seed(seed: int, steps: int) -> dict:
    """One seed of the reference: the notebook's tied model (batch 64, lr 3e-3), `steps` steps, and every measurement
    its checks read, on the same held-out sentences. -> {"accuracy", "exact", "best_share", "right", "left" (probe
    accuracy of the memory for its right / left neighbour), "donor", "rewired", "forward", "backward"}"""
    task = ReversalTask()
    model = EncoderDecoder(reversal_config(True, task.vocab_size))
    model.load_state_dict(_train_one(("tied", seed), task, steps, lr=3e-3, batch_size=64, device="cpu"))
    model.eval()
    ev, probes = evaluate_model(model, task), memory_probes(model, task)
    abl, rev = memory_ablations(model, task), reverse_direction_share(model, task, layer=0)
    return {"accuracy": ev["accuracy"], "best_share": float(ev["share"].max()),
            "exact": cached_decoding(model, task)["exact"],
            "right": probes["memory"]["next token"], "left": probes["memory"]["previous token"],
            "donor": abl["swapped_donor"], "rewired": abl["matching_layer"],
            "forward": rev["forward"], "backward": rev["backward"]}



def reference_claims(ref) -> None:
    """The checks notebook 14 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = list(ref.rungs.values())
    steps = {r.name: int(r.kwargs["steps"]) for r in rungs}
    v = {r.name: {k: r.values(k) for k in ("accuracy", "exact", "best_share", "right", "left", "donor", "rewired",
                                            "forward", "backward")} for r in rungs}
    budgets = ", ".join(str(s) for s in steps.values())
    check(f"learned-or-not gate: teacher-forced held-out accuracy > {SOLVED} in every seed at every budget ({budgets} "
          "steps; chance 1/19), and free-running greedy decoding reverses every held-out sentence exactly",
          at_least(min(x["accuracy"].min() for x in v.values()), SOLVED) & at_least(min(x["exact"].min() for x in v.values()), 1.0),
          {n: x["accuracy"].min() for n, x in v.items()})
    check("the alignment holds at every budget: some cross-attention head puts > 0.9 of its mass on the true source "
          "position, in every seed", above(min(x["best_share"].min() for x in v.values()), 0.9),
          {n: x["best_share"].min() for n, x in v.items()})
    check("lookup by position at every budget: given another sentence's memory the decoder writes that sentence's "
          "reversal (> 0.99 against it, every seed)", above(min(x["donor"].min() for x in v.values()), 0.99),
          {n: x["donor"].min() for n, x in v.items()})
    lead = {n: paired_difference(x["right"], x["left"], "right neighbour", "left") for n, x in v.items()}
    first, last = rungs[0].name, rungs[-1].name
    check(f"at {steps[first]} steps the memory holds more of its right neighbour than of its left (probe accuracy, "
          "paired by seed, the 95% interval above 0)", above(lead[first].low, 0), str(lead[first]))
    print(f"at {steps[last]} steps: {lead[last]}")
    check("the rewired 'layer i reads encoder layer i' keeps most of the accuracy at every budget: > 0.5 in every seed",
          above(min(x["rewired"].min() for x in v.values()), 0.5), {n: x["rewired"] for n, x in v.items()})


def plot_reference(fig, ref) -> None:
    """Left: right minus left neighbour probe per seed against the budget. Right: the rewired model's accuracy."""
    steps = np.array([int(r.kwargs["steps"]) for r in ref.rungs.values()])
    ax1, ax2 = fig.subplots(1, 2)
    seeds_and_median(ax1, steps, [r.values("right") - r.values("left") for r in ref.rungs.values()], "C0",
                     "right minus left neighbour")
    ax1.axhline(0, color="grey", lw=1)
    ax1.set(ylabel="probe accuracy difference", title="what the memory holds of its neighbours")
    seeds_and_median(ax2, steps, [r.values("rewired") for r in ref.rungs.values()], "C1",
                     "layer i reads encoder layer i")
    ax2.axhline(1 / ReversalTask().n_content, color="grey", ls=":", lw=1, label="chance")
    ax2.set(ylabel="held-out accuracy", ylim=(0, 1.02), title="the rewired model, never trained that way")
    for ax in (ax1, ax2):
        budget_axis(ax, steps)
        ax.legend(fontsize=8, loc="lower right")


REFERENCES = [
    ReferenceSpec(
        "14_cross_attention", "reversal", reference_seed, seeds=10,
        rungs=(Rung("live", steps=300), Rung("4x", steps=1200), Rung("16x", steps=4800)),
        lesson="whether the tied reversal model's alignment, its memory's right-over-left neighbour, the donor "
               "result and the rewired wiring hold at 4x and 16x the notebook's 300 steps, over 10 seeds",
        claims=reference_claims),
]
