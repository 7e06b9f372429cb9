"""qalib.nn.pretrained.load: any BERT-family checkpoint folder, as save_pretrained writes it, equals Hugging Face's
model on it; a folder that is not one gets an error naming the problem."""

import json
import shutil

import pytest
import torch

from qalib.nn.pretrained import load, minilm, model_dir

transformers = pytest.importorskip("transformers")

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "##s", "."]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
TEXTS = (["the cat sat on the mat.", "a dog ran."], ["the dogs sat.", "the cat ran on a mat."])


def small_config(**changes):
    """12 heads, 3 layers, d = 192: another size than MiniLM's."""
    base = dict(vocab_size=len(VOCAB), hidden_size=192, num_hidden_layers=3, num_attention_heads=12,
                intermediate_size=384, max_position_embeddings=64, type_vocab_size=2)
    return transformers.BertConfig(**(base | changes))


def save(folder, model, vocab=VOCAB):
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return folder


def assert_equal_to_hf(folder, hf_encoder, texts=TEXTS):
    ours, tok = load(folder)
    enc = tok(*texts)
    with torch.no_grad():
        mine = ours(**enc).last_hidden_state
        theirs = hf_encoder.eval()(**enc).last_hidden_state
    keep = enc["attention_mask"].bool()
    assert torch.allclose(mine[keep], theirs[keep], atol=1e-5)
    return ours, tok


@pytest.fixture
def seeded():
    torch.manual_seed(0)


def test_a_bertmodel_of_another_size_with_a_pooler_equals_hf(tmp_path, seeded):
    hf = transformers.BertModel(small_config())
    ours, _ = assert_equal_to_hf(save(tmp_path, hf), hf)
    assert (ours.cfg.d_model, ours.cfg.n_layers, ours.cfg.n_heads) == (192, 3, 12)
    assert torch.equal(ours.state_dict()["pooler.weight"], hf.pooler.dense.weight)


def test_prefixed_names_without_a_pooler_and_one_segment_row(tmp_path, seeded):
    hf = transformers.BertForMaskedLM(small_config(type_vocab_size=1))
    ours, tok = assert_equal_to_hf(save(tmp_path, hf), hf.bert, texts=TEXTS[:1])  # one segment: no pairs
    assert ours.cfg.n_segments == 1
    with pytest.raises(ValueError, match="token_type_ids must lie in \\[0, n_segments=1\\)"):
        ours(**tok(*TEXTS))


def test_a_pretraining_checkpoint_with_its_nsp_head(tmp_path, seeded):
    hf = transformers.BertForPreTraining(small_config())
    assert_equal_to_hf(save(tmp_path, hf), hf.bert)


def test_a_tokenizer_json_gives_hugging_faces_ids(tmp_path, seeded):
    hf = transformers.BertModel(small_config())
    save(tmp_path, hf)
    hf_tok = transformers.BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    hf_tok.save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").unlink()  # only tokenizer.json is left to read
    _, tok = assert_equal_to_hf(tmp_path, hf)
    assert tok(*TEXTS)["input_ids"].tolist() == hf_tok(*TEXTS, padding=True)["input_ids"]


def test_minilms_own_folder_loads_as_minilm():
    ours, tok = load(model_dir())
    ref, _ = minilm()
    enc = tok("The strawberries were delicious.")
    with torch.no_grad():
        assert torch.equal(ours(**enc).last_hidden_state, ref(**enc).last_hidden_state)


def bad_folder(tmp_path, kind):
    hf = transformers.BertModel(small_config())
    save(tmp_path, hf)
    cfg = tmp_path / "config.json"
    if kind == "gpt2":
        shutil.rmtree(tmp_path)
        transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2)).save_pretrained(tmp_path)
    elif kind == "t5":
        cfg.write_text(json.dumps(transformers.T5Config(d_model=32).to_dict()))
    elif kind == "no config":
        cfg.unlink()
    elif kind == "pickle only":
        (tmp_path / "model.safetensors").unlink()
        torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    elif kind == "shapes":
        cfg.write_text(json.dumps(json.loads(cfg.read_text()) | {"hidden_size": 96}))
    elif kind == "vocab":
        (tmp_path / "vocab.txt").write_text("\n".join(VOCAB + [f"extra{i}" for i in range(5)]) + "\n")
    elif kind == "no vocab":
        (tmp_path / "vocab.txt").unlink()
    elif kind == "not bert vocab":
        (tmp_path / "vocab.txt").write_text("\n".join(WORDS + ["x"] * 5) + "\n")
    return tmp_path


@pytest.mark.parametrize("kind, error, message", [
    ("gpt2", ValueError, "model_type 'gpt2' is not BERT"),
    ("t5", ValueError, "model_type 't5' is not BERT"),
    ("no config", FileNotFoundError, "config.json not found"),
    ("pickle only", FileNotFoundError, "safetensors only .*found pytorch_model.bin"),
    ("shapes", ValueError, "tensor shapes do not match"),
    ("vocab", ValueError, "the vocabulary has 20 tokens but the embedding table 15 rows"),
    ("no vocab", FileNotFoundError, "no vocab.txt or tokenizer.json"),
    ("not bert vocab", ValueError, "not a BERT vocabulary: it has no \\[PAD\\]"),
])
def test_a_folder_that_is_not_a_bert_checkpoint_gets_a_clear_error(tmp_path, seeded, kind, error, message):
    with pytest.raises(error, match=message):
        load(bad_folder(tmp_path, kind))


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint folder .*nope does not exist"):
        load(tmp_path / "nope")
