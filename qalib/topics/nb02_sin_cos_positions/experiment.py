"""Notebook 02's experiment: learned vs sinusoidal vs no positions on an order-sensitive task, then longer inputs.

Task: qalib.lab.data.ProbeTask("previous"): every token must output the token before it, on uniformly random
tokens, so nothing but order can solve it. The mini-BERT's learned table has exactly train_len + 1 rows
([CLS] + tokens), as BERT's has 512: evaluating on longer sequences asks for rows it does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from qalib.lab.data import IGNORE, ProbeTask
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.positions import sinusoidal
from qalib.nn.validate import choice, choices, int_in, seed_list
from qalib.lab.gate import Gate, learned
from qalib.lab.stats import paired_difference
from qalib.notebook.claims import above, at_least, at_most, below, check
from qalib.notebook.drawing import budget_axis, seed_band, seeds_and_median

VARIANTS = ("learned", "sinusoidal", "none")


@dataclass
class PositionExperiment:
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    train_len: int
    long_len: int
    steps: list[int]
    curves: dict[str, np.ndarray]            # variant -> (n_seeds, n_logged) training accuracy
    accuracy: dict[str, np.ndarray]          # variant -> (n_seeds,) held-out accuracy at train_len
    long_accuracy: dict[str, np.ndarray | None]  # variant -> (n_seeds, long_len) accuracy per token position,
                                                 # None if the variant cannot run at long_len
    long_error: dict[str, str | None]        # variant -> the error message when it cannot run
    chance: float
    bag_ceiling: float                       # best accuracy without order information (see bag_of_tokens_ceiling)
    models: dict[str, list[MiniBert]] = field(default_factory=dict, repr=False)


INITS = ("matched", "bert")


def experiment_config(pos: str, train_len: int, d_model: int = 32, vocab_size: int = 16, pos_base: float = 10000.0,
                      init: str = "matched") -> MiniBertConfig:
    """1 layer, 2 heads; the learned table has train_len + 1 rows ([CLS] + tokens). init "matched": word vectors std 1;
    "bert": BERT's 0.02 for every learned table."""
    return MiniBertConfig(vocab_size=vocab_size, d_model=d_model, n_layers=1, n_heads=2, d_ff=4 * d_model,
                          max_len=train_len + 1, pos=pos, pos_base=pos_base,
                          embed_init_std=1.0 if choice("init", init, INITS) == "matched" else None)


def build_model(pos: str, train_len: int, d_model: int = 32, vocab_size: int = 16, pos_base: float = 10000.0,
                init: str = "matched") -> MiniBert:
    """init "matched" (the notebook's): the same starting scale for every variant: word vectors std 1 (norm
    ~sqrt(d)); a learned position row std 1/sqrt(2) (norm ~sqrt(d/2), the sinusoid's norm). With BERT's 0.02 for one
    of the two, the other drowns it after the sum and LayerNorm, and that variant waits for its part to grow.
    init "bert": every learned table (words, learned positions) at BERT's 0.02, the sinusoid as the formula gives it,
    so the sinusoid's positions start ~50x the word vectors' norm: the reference's second initialisation."""
    model = MiniBert(experiment_config(pos, train_len, d_model, vocab_size, pos_base, init))
    if pos == "learned" and init == "matched":
        torch.nn.init.normal_(model.embeddings.position_embeddings.weight, std=2 ** -0.5)
    return model


@torch.no_grad()
def accuracy_by_position(model: MiniBert, task: ProbeTask, seq_len: int, n: int = 256, seed: int = 999) -> np.ndarray:
    """Accuracy at each token position 1 .. seq_len - 1 (position 0 has no previous token): -> (seq_len,), NaN-free
    (entry 0 is set to the mean of the rest so plots stay finite). Raises the model's ValueError if it cannot run."""
    batch = task.batch(n, torch.Generator().manual_seed(seed), seq_len=seq_len)
    model.eval()
    hidden = model(batch.input_ids, batch.token_type_ids, batch.attention_mask).last_hidden_state
    pred = model.mlm_logits(hidden).argmax(-1)[:, 1:]  # drop [CLS]: (n, seq_len)
    labels = batch.labels[:, 1:]
    keep = labels != IGNORE
    acc = ((pred == labels) & keep).double().sum(0) / keep.double().sum(0).clamp(min=1)
    acc[0] = acc[1:].mean()
    return acc.numpy()


def bag_of_tokens_ceiling(task: ProbeTask, n: int = 2000, seed: int = 7) -> float:
    """Best accuracy of a position-blind predictor on 'previous': it knows x_t and the multiset of tokens, so its
    best guess is the most frequent other token. Monte Carlo over n sequences."""
    x = task.batch(n, torch.Generator().manual_seed(seed)).input_ids[:, 1:]  # (n, T) content tokens
    counts = torch.zeros(n, task.vocab_size).scatter_add_(1, x, torch.ones_like(x, dtype=torch.float))
    others = counts[:, None, :].repeat(1, x.shape[1], 1)
    others.scatter_add_(2, x[:, :, None], -torch.ones(n, x.shape[1], 1))  # remove x_t itself: (n, T, V)
    best = others.max(-1).values[:, 1:]  # positions 1 .. T-1 have a previous token
    return float((best / (x.shape[1] - 1)).mean())


def run_position_experiment(variants=VARIANTS, seeds=(0, 1, 2), steps: int = 200, train_len: int = 12,
                            long_len: int = 24, d_model: int = 32, vocab_size: int = 16, batch_size: int = 32,
                            lr: float = 5e-3, device=None) -> PositionExperiment:
    """Train each variant once per seed; evaluate at train_len (held-out batches) and per position at long_len.
    Each variant's seeds train as one batched run (train_seeds); the variants run side by side on the cores."""
    variants = choices("variants", variants, VARIANTS)
    seeds = seed_list("seeds", seeds)
    int_in("long_len", long_len, train_len + 1)  # longer than trained on: the length the variants extrapolate to
    task = ProbeTask("previous", vocab_size=vocab_size, seq_len=train_len)
    tcfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=20, log_every=max(1, steps // 20),
                       device=None if device is None else str(device))
    res = PositionExperiment(tuple(variants), tuple(seeds), train_len, long_len, [], {}, {}, {}, {},
                             chance=1 / (vocab_size - 5), bag_ceiling=bag_of_tokens_ceiling(task))
    _train_all(res, task, tcfg, d_model, vocab_size)
    return res


def _train_all(res: PositionExperiment, task: ProbeTask, tcfg: TrainConfig, d_model: int, vocab_size: int) -> None:
    # every seed of one variant in one batched run (qalib.lab.train_batched); the variants side by side on the cores
    train_variant = partial(_train_variant, seeds=list(res.seeds), task=task, tcfg=tcfg, train_len=res.train_len,
                            long_len=res.long_len, d_model=d_model, vocab_size=vocab_size)
    for v, mine in zip(res.variants, map_runs(train_variant, list(res.variants), tcfg.device)):
        res.steps = mine[-1]["step"]
        res.models[v] = [o["model"] for o in mine]
        res.curves[v] = np.array([o["curve"] for o in mine])
        res.accuracy[v] = np.array([o["accuracy"] for o in mine])
        longs = [o["long"] for o in mine if o["long"] is not None]
        res.long_error[v] = mine[-1]["long_error"]
        res.long_accuracy[v] = np.array(longs) if longs else None


def _train_variant(v: str, seeds: list[int], task: ProbeTask, tcfg: TrainConfig, train_len: int, long_len: int,
                   d_model: int, vocab_size: int) -> list[dict]:
    """Every seed of one variant: member i starts as torch.manual_seed(seed_i); build_model(v, ...) and reads its
    own data stream, so each seed sees the same data in every variant."""
    run = train_seeds(partial(build_model, v, train_len, d_model, vocab_size), task, seeds, tcfg)
    out = []
    for model, hist in zip(run.models, run.histories):
        model.cpu()
        o = {"step": hist.step, "curve": hist.accuracy, "model": model, "long": None, "long_error": None,
             "accuracy": evaluate(model, task, n_batches=2, batch_size=256)["accuracy"]}
        try:
            o["long"] = accuracy_by_position(model, task, long_len)
        except ValueError as err:
            o["long_error"] = str(err)
        out.append(o)
    return out


def plot_experiment(fig, r: PositionExperiment) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    for i, v in enumerate(r.variants):
        seed_band(ax1, r.steps, r.curves[v], color=f"C{i}", label=f"{v} (final {r.accuracy[v].mean():.2f})")
        if r.long_accuracy[v] is not None:
            seed_band(ax2, np.arange(1, r.long_len), r.long_accuracy[v][:, 1:], color=f"C{i}", label=v)
    for ax in (ax1, ax2):
        ax.axhline(r.bag_ceiling, color="grey", ls=":", label="best without order")
        ax.set(ylim=(0, 1.02), ylabel="accuracy")
    ax1.set(title=f"training ('previous' token, length {r.train_len}); band = min-max over {len(r.seeds)} seeds",
            xlabel="step")
    ax2.axvspan(r.train_len - 0.5, r.long_len - 0.5, color="grey", alpha=0.1, label="positions never trained")
    failed = [v for v in r.variants if r.long_error.get(v)]
    ax2.set(title=f"evaluated at length {r.long_len}" + (f" ({', '.join(failed)}: cannot run)" if failed else ""),
            xlabel="token position")
    ax1.legend(fontsize="small")
    ax2.legend(fontsize="small")


# -- the reference: sooner or better? and why sooner? ---------------------------------------------------------------
# Five ways to supply positions, a 2 x 2 of (starting rows: random | the sinusoid) x (trained | fixed), plus none:
REFERENCE_VARIANTS = ("learned", "sinusoidal", "learned from sinusoid", "fixed random", "none")
HELD_OUT = 20_000_002  # + the seed: the reference's held-out batches, disjoint from every training stream
TRAIN_LEN, LONG_LEN = 12, 24
SOLVED = 0.95          # held-out accuracy at which a run counts as having learned the order task


def reference_model(variant: str, init: str = "matched") -> MiniBert:
    """The notebook's model for one reference variant. "learned from sinusoid": a learned table whose rows start as
    the sinusoid's (so it starts exactly where the sinusoidal model starts, and training may move them); "fixed
    random": the learned table's random rows, never trained. Both isolate one of the two things "learned vs
    sinusoidal" changes at once: whether the rows train, and how they start."""
    if variant == "learned from sinusoid":
        start = build_model("sinusoidal", TRAIN_LEN, init=init)  # every other weight as the sinusoidal model's
        model = build_model("learned", TRAIN_LEN, init=init)
        missing = model.load_state_dict(start.state_dict(), strict=False).missing_keys
        assert missing == ["embeddings.position_embeddings.weight"], missing
        with torch.no_grad():
            model.embeddings.position_embeddings.weight.copy_(sinusoidal(TRAIN_LEN + 1, model.cfg.d_model))  # (13, d)
        return model
    model = build_model("learned" if variant == "fixed random" else variant, TRAIN_LEN, init=init)
    table = model.embeddings.position_embeddings
    if variant == "fixed random":
        table.weight.requires_grad_(False)  # qalib's optimizer takes only parameters that require a gradient
    return model


def reference_seed(seed: int, steps: int, init: str = "matched", variants: tuple[str, ...] = REFERENCE_VARIANTS) -> dict:
    """One seed of the reference: each variant trained `steps` steps on the notebook's task and settings (solo
    qalib.lab.train.train, the seed's own data stream, the same for every variant). -> {variant: {"accuracy":
    held-out at length 12, "area": mean training accuracy over the logged steps, "steps", "curve", "seen"/"unseen":
    held-out accuracy at length 24 on positions 1-11 / 12-23 (None where the variant cannot run at 24)}}"""
    choices("variants", variants, REFERENCE_VARIANTS)
    task = ProbeTask("previous", vocab_size=16, seq_len=TRAIN_LEN)
    out = {}
    for v in variants:
        torch.manual_seed(seed)
        model = reference_model(v, init)
        cfg = TrainConfig(steps=steps, batch_size=32, lr=5e-3, warmup=20, log_every=max(1, steps // 20), seed=seed,
                          device="cpu")
        hist = train(model, task, cfg)
        o = {"accuracy": evaluate(model, task, n_batches=2, batch_size=256, seed=HELD_OUT + seed)["accuracy"],
             "area": float(np.mean(hist.accuracy)), "steps": list(hist.step), "curve": list(hist.accuracy),
             "seen": None, "unseen": None}
        try:
            by_position = accuracy_by_position(model, task, LONG_LEN, seed=HELD_OUT + seed)
            o["seen"], o["unseen"] = float(by_position[1:TRAIN_LEN].mean()), float(by_position[TRAIN_LEN:].mean())
        except ValueError:  # a 13-row table cannot encode 25 positions
            pass
        out[v] = o
    return out



def reference_view(ref) -> dict:
    """The numbers the notebook reads from its reference: {rung: {variant: {"accuracy", "area", "seen", "unseen"}:
    (seeds,) arrays}} (seen / unseen only for variants that run at length 24), and each rung's steps."""
    out = {}
    for name, rung in ref.rungs.items():
        present = [v for v in REFERENCE_VARIANTS if v in rung.runs[0]]
        keys = lambda v: ("accuracy", "area") + (("seen", "unseen") if rung.runs[0][v]["seen"] is not None else ())  # noqa: E731
        out[name] = {v: {k: rung.values(v, k) for k in keys(v)} for v in present}
    return out


def solved_gate(accuracy: float, task: ProbeTask | None = None) -> Gate:
    """Learned or not: held-out accuracy past the order-blind ceiling, by enough to reach SOLVED."""
    blind = bag_of_tokens_ceiling(task or ProbeTask("previous", vocab_size=16, seq_len=TRAIN_LEN))
    return learned("held-out accuracy", accuracy, baseline=blind, baseline_name="the best order-blind guess",
                   margin=SOLVED - blind)


def reference_claims(ref) -> None:
    """The checks notebook 02 makes on its reference run (the runner makes them on every regeneration too)."""
    v = reference_view(ref)
    steps = {r.name: int(r.kwargs["steps"]) for r in ref.rungs.values()}
    matched = [r for r in ref.rungs if ref.rungs[r].kwargs.get("init", "matched") == "matched"]
    order_aware = REFERENCE_VARIANTS[:4]
    passed = [solved_gate(a).passed for r in matched for o in order_aware for a in v[r][o]["accuracy"]]
    check(f"learned-or-not gate: every order-aware variant passes (held-out accuracy > {SOLVED}; order-blind ~0.26) "
          f"in every seed at every budget ({', '.join(str(steps[r]) for r in matched)} steps)",
          at_least(float(np.mean(passed)), 1.0), {r: {o: v[r][o]["accuracy"].min() for o in order_aware} for r in matched})
    area = lambda r, o: v[r][o]["area"]  # noqa: E731  (seeds,): mean training accuracy over the logged steps
    live, last = matched[0], matched[-1]
    lead = {r: paired_difference(area(r, "learned"), area(r, "sinusoidal"), "learned", "sinusoidal") for r in matched}
    check(f"sooner: at {steps[live]} steps the learned table's training curve lies above the sinusoid's (mean training "
          "accuracy, paired by seed, the 95% interval above 0)", above(lead[live].low, 0), str(lead[live]))
    check(f"not better: the lead shrinks with the budget, to under a tenth of it at {steps[last]} steps, where both "
          "predict the previous token at >= 99.5% of held-out positions, in every seed",
          below(lead[last].mean, lead[live].mean / 10)
          & at_least(min(v[last][o]["accuracy"].min() for o in ("learned", "sinusoidal")), 0.995),
          {f"{steps[r]} steps": f"{lead[r].mean:+.3f}" for r in matched})
    frozen = paired_difference(area(live, "fixed random"), area(live, "learned"), "fixed random rows", "learned")
    check(f"why sooner: not because the rows train. Random rows that never train keep the whole lead: fixed minus "
          f"learned within 0.01 of 0 at {steps[live]} steps (the interval; the lead it is measured against: "
          f"{lead[live].mean:+.2f})", below(max(abs(frozen.low), abs(frozen.high)), 0.01), str(frozen))
    start = paired_difference(area(live, "learned"), area(live, "learned from sinusoid"), "learned",
                              "learned, started at the sinusoid")
    check("because of where the rows start: a learned table started at the sinusoid's rows loses most of the lead "
          "(what remains, learned-from-sinusoid minus sinusoid, is under a third of learned minus sinusoid)",
          above(start.low, 0) & below(float(np.mean(area(live, "learned from sinusoid") - area(live, "sinusoidal"))),
                                      lead[live].mean / 3), str(start))
    drop = {r: v[r]["sinusoidal"]["seen"] - v[r]["sinusoidal"]["unseen"] for r in matched}
    check("more training does not carry the rule to the 12 positions never trained on: the sinusoidal model's accuracy there is more than "
          "0.4 below its accuracy on the trained positions, in every seed at every budget",
          above(np.concatenate(list(drop.values())), 0.4), {f"{steps[r]} steps": v[r]["sinusoidal"]["unseen"] for r in matched})
    bert = [r for r in ref.rungs if ref.rungs[r].kwargs.get("init") == "bert"]
    if bert:
        b = v[bert[0]]
        share = {o: float(np.mean([solved_gate(a).passed for a in b[o]["accuracy"]])) for o in ("learned", "sinusoidal")}
        check(f"the initialisation can decide it: with BERT's 0.02 for the word vectors (the sinusoid's rows ~50x their "
              f"norm), the sinusoidal model passes the gate in no seed after {steps[bert[0]]} steps, while the learned "
              "table (also at 0.02) does in some", at_most(share["sinusoidal"], 0) & above(share["learned"], 0),
              {o: b[o]["accuracy"] for o in ("learned", "sinusoidal")})


def plot_reference(fig, ref) -> None:
    """Left: mean training accuracy (how soon) against the budget, per variant. Right: the sinusoidal model's accuracy
    on trained and on never-trained positions against the budget. Dots: seeds; lines: medians."""
    v = reference_view(ref)
    matched = [r for r in ref.rungs if ref.rungs[r].kwargs.get("init", "matched") == "matched"]
    steps = np.array([int(ref.rungs[r].kwargs["steps"]) for r in matched])
    ax1, ax2 = fig.subplots(1, 2)
    styles = {"learned": ("C0", "o-", None), "fixed random": ("C0", "s--", "white"),
              "sinusoidal": ("C1", "o-", None), "learned from sinusoid": ("C1", "s--", "white"), "none": ("C2", "o-", None)}
    for i, (o, (color, marker, mfc)) in enumerate(styles.items()):
        x = steps * (1 + 0.03 * (i - 2))  # a small offset per variant, so the dots stay visible
        seeds_and_median(ax1, x, [v[r][o]["area"] for r in matched], color, o, marker=marker, mfc=mfc)
    ax1.set(ylabel="mean training accuracy over the run", ylim=(0, 1.02), title="how soon each variant learns")
    ax1.legend(fontsize=8, loc="lower right")
    for key, color, label in (("seen", "C1", "trained positions"), ("unseen", "C4", "the 12 positions never trained")):
        seeds_and_median(ax2, steps, [v[r]["sinusoidal"][key] for r in matched], color, label)
    ax2.axhline(bag_of_tokens_ceiling(ProbeTask("previous", vocab_size=16, seq_len=TRAIN_LEN)), color="grey", ls=":",
                label="best without order")
    ax2.set(ylabel="held-out accuracy at length 24", ylim=(0, 1.02), title="the sinusoidal model on longer inputs")
    ax2.legend(fontsize=8, loc="center right")
    for ax in (ax1, ax2):
        budget_axis(ax, steps)


REFERENCES = [
    ReferenceSpec(
        "02_sin_cos_positions", "positions", reference_seed, seeds=10,
        rungs=(Rung("live", steps=200), Rung("4x", steps=800), Rung("16x", steps=3200),
               Rung("BERT's init", steps=800, init="bert", variants=("learned", "sinusoidal", "none"))),
        lesson="whether the learned table only learns sooner or also better than the sinusoid, why sooner (the rows' "
               "training or their start), and whether more training carries the sinusoid's rule to unseen positions",
        claims=reference_claims),
]
