import pytest
import torch

from qalib.lab.data import (CLS, IGNORE, MASK, N_SPECIAL, SEP, MLMTask, PairTask, ProbeTask, SyntheticLanguage,
                        mask_tokens, masking_rates, text_file_sequences)


def test_language_is_deterministic_and_follows_its_rules():
    lang = SyntheticLanguage(vocab_size=32, branching=4, lag=4, p_lag=0.0, seed=0)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    a, b = lang.sample(50, 20, g1), lang.sample(50, 20, g2)
    assert torch.equal(a, b) and a.min() >= N_SPECIAL and a.max() < 32
    content = a - N_SPECIAL
    allowed = lang.successors[content[:, :-1]]  # (n, T-1, branching)
    assert (allowed == content[:, 1:, None]).any(-1).all(), "with p_lag=0 every token is a bigram successor"
    lagged = SyntheticLanguage(vocab_size=32, lag=3, p_lag=1.0, seed=0).sample(20, 12)
    lm = SyntheticLanguage(vocab_size=32, lag=3, p_lag=1.0, seed=0).lag_map
    assert torch.equal(lm[lagged[:, :-3] - N_SPECIAL] + N_SPECIAL, lagged[:, 3:])


def test_masking_fractions_match_bert():
    ids = torch.randint(N_SPECIAL, 100, (400, 250))
    g = torch.Generator().manual_seed(0)
    corrupted, labels = mask_tokens(ids, 100, g)
    chosen = labels != IGNORE
    n = ids.numel()
    assert abs(chosen.sum() / n - 0.15) < 0.005
    assert abs((corrupted == MASK).sum() / n - 0.12) < 0.005
    unchanged = chosen & (corrupted == ids)
    assert abs(unchanged.sum() / n - 0.015 - 0.15 * 0.1 / 95) < 0.003  # 10% kept, plus random draws that hit the same id
    assert torch.equal(labels[chosen], ids[chosen])


def test_masking_rejects_bad_fractions():
    with pytest.raises(ValueError, match="mask_frac"):
        mask_tokens(torch.ones(2, 2, dtype=torch.long), 10, mask_frac=0.95, random_frac=0.1)
    with pytest.raises(ValueError, match="mlm_prob"):
        mask_tokens(torch.ones(2, 2, dtype=torch.long), 10, mlm_prob=1.5)


def test_tasks_shapes():
    lang = SyntheticLanguage(vocab_size=32)
    b = MLMTask(lang, seq_len=10).batch(4)
    assert b.input_ids.shape == (4, 12) and (b.input_ids[:, 0] == CLS).all() and (b.input_ids[:, -1] == SEP).all()
    p = PairTask(lang, half_len=5).batch(64, torch.Generator().manual_seed(0))
    assert p.input_ids.shape == (64, 13) and p.token_type_ids[:, -1].eq(1).all() and set(p.labels.tolist()) == {0, 1}
    pr = ProbeTask("previous", vocab_size=20, seq_len=8).batch(3)
    assert torch.equal(pr.labels[:, 2:], pr.input_ids[:, 1:-1])
    rv = ProbeTask("reverse", vocab_size=20, seq_len=8).batch(3)
    assert torch.equal(rv.labels[:, 1:], rv.input_ids[:, 1:].flip(1))
    kb = ProbeTask("k_back", vocab_size=20, seq_len=8, k=3).batch(3, seq_len=12)
    assert kb.input_ids.shape == (3, 13) and torch.equal(kb.labels[:, 4:], kb.input_ids[:, 1:-3])
    with pytest.raises(ValueError, match="kind"):
        ProbeTask("next")


def test_text_file_through_wordpiece(tmp_path):
    from qalib.nn.pretrained import WordPiece, model_dir

    tok = WordPiece(model_dir() / "vocab.txt")
    f = tmp_path / "t.txt"
    f.write_text("The strawberries were ripe. " * 20)
    rows = text_file_sequences(f, tok, seq_len=16)
    assert rows.shape[1] == 16 and (rows[:, 0] == tok.cls_id).all()
    with pytest.raises(FileNotFoundError):
        text_file_sequences(tmp_path / "missing.txt", tok)
    (tmp_path / "short.txt").write_text("hi")
    with pytest.raises(ValueError, match="fewer than one row"):
        text_file_sequences(tmp_path / "short.txt", tok)


def test_masking_rates_is_the_one_rule_for_the_three_rates():
    assert masking_rates(1, 0, 0) == (1.0, 0.0, 0.0) and all(type(x) is float for x in masking_rates(1, 0, 0))
    assert masking_rates(0.15, 0.8, 0.2 + 1e-12)[2] == 0.2 + 1e-12  # round-off above a sum of 1 is allowed
    with pytest.raises(ValueError, match=r"mask_frac \+ random_frac must be <= 1 \(the rest stays unchanged\)"):
        masking_rates(0.15, 0.8, 0.3)
    with pytest.raises(ValueError, match=r"random_frac must be a probability in \[0, 1\], got -0.1"):
        masking_rates(0.15, 0.8, -0.1)
