"""MiniBert with the all-MiniLM-L6-v2 weights equals transformers.BertModel on the same checkpoint."""

import pytest
import torch

from qalib.pretrained import checkpoint_to_minibert, config_from_json, load_minibert, minilm, model_dir

transformers = pytest.importorskip("transformers")  # test-only dependency, installed by `make setup`

SINGLE = ["The strawberries were delicious."]
PAIR = (["Where is the station?"], ["It is two streets away, next to the old bakery."])
BATCH = ["Short one.", "A much longer sentence that forces the first one to be padded quite a lot."]


@pytest.fixture(scope="module")
def models():
    ours, tok = minilm()
    ref = transformers.BertModel.from_pretrained(str(model_dir()), attn_implementation="eager").eval()
    return ours, tok, ref


@pytest.mark.parametrize("case", ["single", "pair", "padded"])
def test_hidden_states_and_attention_equal_hf(models, case):
    ours, tok, ref = models
    enc = {"single": lambda: tok(SINGLE), "pair": lambda: tok(*PAIR), "padded": lambda: tok(BATCH)}[case]()
    if case == "padded":
        assert (enc["attention_mask"] == 0).any(), "the padded case must contain padding"
    with torch.no_grad():
        mine = ours(**enc, return_internals=True)
        theirs = ref(**enc, output_hidden_states=True, output_attentions=True)
    keep = enc["attention_mask"].bool()
    # padded positions are free to differ (nobody attends to them); compare real tokens
    assert torch.allclose(mine.last_hidden_state[keep], theirs.last_hidden_state[keep], atol=1e-4)
    assert torch.allclose(mine.internals["embeddings.out"][keep], theirs.hidden_states[0][keep], atol=1e-4)
    for i in range(ours.cfg.n_layers):
        assert torch.allclose(mine.internals[f"layer{i}.hidden"][keep], theirs.hidden_states[i + 1][keep], atol=1e-4)
        ours_p, ref_p = mine.internals[f"layer{i}.probs"], theirs.attentions[i]
        rows = keep[:, None, :, None].expand_as(ours_p)  # real query rows
        assert torch.allclose(ours_p[rows], ref_p[rows], atol=1e-4)


def test_fused_path_equals_manual_on_real_weights(models):
    ours, tok, _ = models
    enc = tok(BATCH)
    with torch.no_grad():
        fused = ours(**enc).last_hidden_state
        manual = ours(**enc, return_internals=True).last_hidden_state
    keep = enc["attention_mask"].bool()
    assert torch.allclose(fused[keep], manual[keep], atol=1e-5)


def test_tokenizer_gives_bert_inputs(models):
    _, tok, _ = models
    enc = tok("strawberries", "are red")
    tokens = tok.tokens("strawberries", "are red")
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2
    assert "straw" in tokens and "##berries" in tokens  # WordPiece splits the word
    assert enc["token_type_ids"][0].tolist() == [0] * (tokens.index("[SEP]") + 1) + [1] * (len(tokens) - tokens.index("[SEP]") - 1)


def test_config_read_from_checkpoint():
    cfg = config_from_json(model_dir() / "config.json")
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, cfg.vocab_size, cfg.max_len) == (384, 6, 12, 1536, 30522, 512)


def test_mapping_rejects_a_mismatched_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text((model_dir() / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_minibert(tmp_path)


def test_mapping_fuses_qkv():
    from safetensors.torch import load_file

    state = load_file(str(model_dir() / "model.safetensors"))
    mapped = checkpoint_to_minibert(state, 6)
    q = state["encoder.layer.0.attention.self.query.weight"]
    assert torch.equal(mapped["layers.0.attention.qkv.weight"][: q.shape[0]], q)
