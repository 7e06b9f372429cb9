"""qalib.lab.stacked and qalib.tools.stacked_decoders: decoders and encoder-decoders trained as one batched
computation equal their solo runs (fp32, CPU). The MiniBert trainer built on it is tested in test_train_batched.py."""

import pytest
import torch
import torch.nn.functional as F

from qalib.lab.stacked import StackedModules, clip_per_member
from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import DecoderLM, EncoderDecoder
from qalib.tools.stacked_decoders import lm_logits_unchecked, seq2seq_logits_unchecked, train_stacked

LM = DecoderConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_len=16)
SEQ2SEQ = DecoderConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=16,
                        norm_placement="post", activation="relu", final_norm=False)
# Adam moves a weight whose gradient is near 0 by up to lr per step in the direction of its sign, so float-order
# differences of 1e-7 in such a gradient can grow to ~lr / 10 in the weight within 30 steps: at 1e-2 the members and
# solo runs differed by up to 2e-3 in a weight (losses still within 1e-5); at 3e-3 by under 3e-5
LR = 3e-3


def built(kind, cfg, seed):
    torch.manual_seed(seed)
    return kind(cfg).train()


def lm_loss(model, ids):
    logits = lm_logits_unchecked(model, ids[:, :-1])  # (B, T-1, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def seq2seq_loss(model, source, target):
    logits = seq2seq_logits_unchecked(model, source, target[:, :-1])  # (B, T-1, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target[:, 1:].reshape(-1), label_smoothing=0.1)


def solo_lm_loss(model, ids):  # the checked forward, as a user calls it
    logits = model(ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def solo_seq2seq_loss(model, source, target):
    logits = model(source, target[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target[:, 1:].reshape(-1), label_smoothing=0.1)


def batches(seed, kind, n=8, t=10):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 20, (n, t), generator=g)
    return (ids,) if kind is DecoderLM else (ids, torch.randint(0, 20, (n, t - 2), generator=g))


CASES = {"decoder": (DecoderLM, LM, lm_loss, solo_lm_loss), "encoder-decoder": (EncoderDecoder, SEQ2SEQ, seq2seq_loss,
                                                                               solo_seq2seq_loss)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_step_losses_and_gradients_equal_solo_models(case):
    """Every member's loss and gradient on its own batch equals a solo model's (same init, same batch) to 1e-5."""
    kind, cfg, loss_fn, solo_loss_fn = CASES[case]
    seeds = [0, 1, 2, 3]
    stacked = StackedModules([built(kind, cfg, s) for s in seeds])
    per_member = [batches(s, kind) for s in seeds]
    args = [torch.stack(parts) for parts in zip(*per_member)]  # each (S, B, T)
    losses = stacked.map(loss_fn, *args)
    assert losses.shape == (4,)
    losses.sum().backward()
    for i, seed in enumerate(seeds):
        solo = built(kind, cfg, seed)
        loss = solo_loss_fn(solo, *per_member[i])
        loss.backward()
        assert float(losses[i].detach()) == pytest.approx(float(loss), abs=1e-5)
        for name, p in solo.named_parameters():
            assert float((stacked.params[name].grad[i] - p.grad).abs().max()) < 1e-5, name


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_short_run_tracks_each_solo_run(case):
    """30 steps of AdamW (lr LR) with warm-up and clipping (a small clip, so it acts): each of 4 members ends where its solo
    loop ends, to float tolerance, and the members differ (own inits and data)."""
    kind, cfg, loss_fn, solo_loss_fn = CASES[case]
    seeds, steps = [0, 1, 2, 3], 30
    models = [built(kind, cfg, s) for s in seeds]
    gens = [torch.Generator().manual_seed(s) for s in seeds]

    def draw(g):  # learnable: counting up from a random start (decoder); copying the source (encoder-decoder)
        ids = (torch.randint(0, 20, (8, 1), generator=g) + torch.arange(10)) % 20  # (8, 10)
        if kind is DecoderLM:
            return (ids,)
        source = torch.randint(0, 20, (8, 8), generator=g)
        return source, source

    def optimizer(params):
        opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0, foreach=True)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5))

    def next_batch(step):
        return tuple(torch.stack(parts) for parts in zip(*[draw(g) for g in gens]))  # each (S, B, T)

    history = train_stacked(models, loss_fn, next_batch, steps, optimizer, clip=0.5)
    assert history.shape == (4, steps)
    for i, seed in enumerate(seeds):
        solo, g = built(kind, cfg, seed), torch.Generator().manual_seed(seed)
        opt, sched = optimizer(list(solo.parameters()))
        curve = []
        for _ in range(steps):
            loss = solo_loss_fn(solo, *draw(g))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(solo.parameters(), 0.5)
            opt.step()
            sched.step()
            curve.append(float(loss.detach()))
        assert max(abs(a - b) for a, b in zip(history[i].tolist(), curve)) < 1e-4
        worst = max(float((p - q).abs().max()) for p, q in zip(models[i].parameters(), solo.parameters()))
        assert worst < 1e-4, f"seed {seed}: weights differ by {worst:.1e}"
    assert all(history[:, -1] < history[:, 0]) and len(set(history[:, -1].tolist())) == 4


def test_clip_per_member_clips_each_member_at_its_own_norm():
    g = [torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.tensor([[0.0], [0.0]])]  # member norms 5 and 0.5
    clip_per_member(g, 1.0)
    assert torch.allclose(g[0][0], torch.tensor([0.6, 0.8]), atol=1e-6)
    assert torch.allclose(g[0][1], torch.tensor([0.3, 0.4]))  # below the limit: unchanged


def test_bad_members_and_non_finite_losses_are_named():
    with pytest.raises(ValueError, match="at least one"):
        StackedModules([])
    with pytest.raises(ValueError, match="same kind"):
        StackedModules([DecoderLM(LM), EncoderDecoder(LM)])
    with pytest.raises(ValueError, match="same config"):
        StackedModules([DecoderLM(LM), DecoderLM(LM.replace(d_ff=32))])
    models = [built(DecoderLM, LM, s) for s in (0, 1)]
    with torch.no_grad():
        models[1].embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="member 1 became nan at step 0"):
        train_stacked(models, lm_loss, lambda step: (torch.randint(0, 20, (2, 4, 6)),), 2,
                      lambda p: (torch.optim.SGD(p, lr=0.1), None))


def test_the_unchecked_forwards_equal_the_models_forward():
    """What the stacked members run is the models' own computation, without the host-side id checks."""
    torch.manual_seed(0)
    cfg = DecoderConfig(vocab_size=20, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=16)
    ids = torch.randint(0, 20, (3, 7))
    lm, seq2seq = DecoderLM(cfg).eval(), EncoderDecoder(cfg).eval()
    assert torch.equal(lm_logits_unchecked(lm, ids), lm(ids).logits)
    assert torch.equal(seq2seq_logits_unchecked(seq2seq, ids, ids[:, :5]), seq2seq(ids, ids[:, :5]).logits)
