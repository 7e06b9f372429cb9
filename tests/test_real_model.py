"""The QALIB_MODEL switch: real_model() loads the folder the variable names (once per folder and device), or MiniLM
when it is unset; a claim marked holds_for="all-MiniLM-L6-v2" is an ordinary check on MiniLM and a "⊘ skipped"
line on another model."""

import pytest
import torch

from qalib.nn.pretrained import ENV_VAR, MINILM_NAME, minilm, model_dir, real_model, real_model_dir, real_model_name
from qalib.notebook.claims import SKIP, TICK, ClaimFailed, check, check_all, check_close, identity

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def random_bert(tmp_path_factory):
    """A random BertModel of another size (2 layers, d = 96, 12 heads, pooler) with MiniLM's vocabulary."""
    folder = tmp_path_factory.mktemp("models") / "tiny-random-bert"
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=96, num_hidden_layers=2, num_attention_heads=12,
                                     intermediate_size=192, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_bytes((model_dir() / "vocab.txt").read_bytes())
    return folder


def test_unset_or_empty_means_minilm(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert real_model() == minilm() and real_model_name() == MINILM_NAME and real_model_dir() == model_dir()
    assert real_model_name(short=True) == "MiniLM"
    monkeypatch.setenv(ENV_VAR, " ")
    assert real_model()[0] is minilm()[0]


def test_the_variable_loads_that_folder_once(monkeypatch, random_bert):
    monkeypatch.setenv(ENV_VAR, str(random_bert))
    model, tok = real_model()
    assert (model.cfg.n_layers, model.cfg.d_model, model.cfg.n_heads) == (2, 96, 12)
    assert real_model("cpu")[0] is model and real_model_name() == real_model_name(short=True) == "tiny-random-bert"
    assert real_model_dir() == random_bert.resolve()
    out = model(**tok("The cat sat.")).last_hidden_state
    assert out.shape[-1] == 96 and torch.isfinite(out).all()


def test_a_bad_folder_gets_the_loaders_error_naming_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=f"{ENV_VAR}=.*nowhere.*does not exist"):
        real_model()
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "model.safetensors").touch()  # the config is read first
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(ValueError, match=f"{ENV_VAR}=.*not BERT"):
        real_model()


def test_a_model_specific_claim_is_checked_on_minilm(monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    check("MiniLM's number", True, 1.0, holds_for=MINILM_NAME)
    assert capsys.readouterr().out.strip() == f"{TICK} MiniLM's number — measured: 1"  # as without holds_for
    with pytest.raises(ClaimFailed):
        check_all("MiniLM's numbers", [True, False], holds_for=MINILM_NAME)


def test_a_model_specific_claim_is_skipped_on_another_model(monkeypatch, capsys, random_bert):
    monkeypatch.setenv(ENV_VAR, str(random_bert))
    assert check("MiniLM's number", False, 1.0, holds_for=MINILM_NAME) is None
    check_close("MiniLM's width", 96, 384, holds_for=MINILM_NAME)
    identity("MiniLM's level", False, holds_for=MINILM_NAME)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(f"{SKIP} skipped: MiniLM's") for line in lines)
    assert f"about {MINILM_NAME}'s weights ({ENV_VAR}={random_bert} loads tiny-random-bert)" in lines[0]
    with pytest.raises(ClaimFailed):  # an unmarked claim is still checked on any model
        check("any BERT's property", False)


def test_holds_for_must_name_a_model():
    with pytest.raises(TypeError, match="holds_for"):
        check("x", True, holds_for=" ")


def test_any_bert_counts_measurements_and_skipped_claims():
    from qalib.tools.any_bert import count

    lines = [f"{TICK} a — measured: 1", f"{SKIP} skipped: b — ...", "\u2261 identity: c — checked: 0", f"{TICK} d"]
    assert count(lines) == (2, 1)
