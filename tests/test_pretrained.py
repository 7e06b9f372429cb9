"""MiniBert with the all-MiniLM-L6-v2 weights equals transformers.BertModel on the same checkpoint."""

import pytest
import torch
from safetensors.torch import load_file

from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.pretrained import (checkpoint_to_minibert, config_from_json, load_minibert, minibert_to_checkpoint, minilm,
                              model_dir)

transformers = pytest.importorskip("transformers")  # test-only dependency, installed by `make setup`

SINGLE = ["The strawberries were delicious."]
PAIR = (["Where is the station?"], ["It is two streets away, next to the old bakery."])
BATCH = ["Short one.", "A much longer sentence that forces the first one to be padded quite a lot."]


@pytest.fixture(scope="module")
def models(minilm):
    ours, tok = minilm
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
    state = load_file(str(model_dir() / "model.safetensors"))
    mapped = checkpoint_to_minibert(state)
    q = state["encoder.layer.0.attention.self.query.weight"]
    assert torch.equal(mapped["layers.0.attention.qkv.weight"][: q.shape[0]], q)


def test_checkpoint_round_trip_is_the_identity():
    """HF -> MiniBert -> HF gives back every tensor of the real checkpoint under its name (BertForMaskedLM's
    names are BertModel's with the prefix "bert."), except the position_ids buffer, which MiniBert does not keep."""
    state = load_file(str(model_dir() / "model.safetensors"))
    back = minibert_to_checkpoint(checkpoint_to_minibert(state))
    expected = {"bert." + k: v for k, v in state.items() if k != "embeddings.position_ids"}
    assert back.keys() == expected.keys()
    assert all(torch.equal(back[k], v) for k, v in expected.items())


def test_minibert_round_trip_keeps_every_weight_with_a_bert_counterpart():
    """MiniBert -> HF -> MiniBert keeps every tensor, MLM head included; only the classifier has no HF name."""
    torch.manual_seed(0)
    cfg = MiniBertConfig(vocab_size=40, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=12)
    state = MiniBert(cfg).state_dict()
    exported = minibert_to_checkpoint(state)
    assert torch.equal(exported["cls.predictions.decoder.weight"], state["embeddings.word_embeddings.weight"])
    back = checkpoint_to_minibert(exported)
    expected = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    assert back.keys() == expected.keys()
    assert all(torch.equal(back[k], v) for k, v in expected.items())


def test_mapping_names_a_missing_projection():
    state = load_file(str(model_dir() / "model.safetensors"))
    del state["encoder.layer.3.attention.self.key.bias"]
    with pytest.raises(ValueError, match=r"layers\.3\.attention\.qkv\.bias.*key"):
        checkpoint_to_minibert(state)


def test_minilm_is_loaded_once_per_device():
    model, tok = minilm()
    assert minilm() == (model, tok) and minilm("cpu")[0] is model and minilm(torch.device("cpu"))[0] is model
    assert not model.training
    elsewhere, _ = minilm("meta")  # another device: another copy; the shared CPU model stays where it is
    assert elsewhere is not model and next(elsewhere.parameters()).is_meta
    assert next(model.parameters()).device == torch.device("cpu")


def test_tokenizer_pads_and_truncates_as_hugging_face():
    """Padding to the longest row; truncation of the longer text of a pair first, [CLS] and [SEP] kept."""
    hf = transformers.AutoTokenizer.from_pretrained(str(model_dir()))
    _, tok = minilm()
    a = ["Where is the station?", "A much longer sentence that forces the other one to be padded, and is cut."]
    b = ["It is two streets away, next to the old bakery on the corner.", "Yes."]
    for args, n in (((a, b), 16), ((a,), 10), ((a,), 512)):
        ours, theirs = tok(*args, max_length=n), hf(*args, padding=True, truncation=True, max_length=n)
        assert {k: v.tolist() for k, v in ours.items()} == {k: theirs[k] for k in ours}
    assert tok(a, max_length=10)["input_ids"][1, -1] == tok.sep_id


def test_tokenizer_rejects_a_length_without_room_for_the_texts():
    _, tok = minilm()
    assert tok("a b c", max_length=3)["input_ids"].shape == (1, 3)
    for text, pair, too_short in (("a b c", None, 2), ("a b", "c d", 4), ("a", None, 513)):
        with pytest.raises(ValueError, match=r"max_length must be an int in \[[35], 512\]"):
            tok(text, pair, max_length=too_short)
