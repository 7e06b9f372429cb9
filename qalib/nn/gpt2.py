"""DecoderLM as transformers.GPT2LMHeadModel: the config that matches, and the name table between the two.

    hf = to_gpt2(model)   # a GPT2LMHeadModel with model's weights (built from a config, nothing downloaded)

GPT-2 (HF modeling_gpt2.py) is what DecoderConfig's defaults describe: learned positions, pre-LN, a final LayerNorm
(ln_f), tanh-GELU ("gelu_new"), LayerNorm eps 1e-5, scores scaled by 1/sqrt(d_head) and an LM head tied to wte.
Its projections are Conv1D layers, whose weight is the transpose of an nn.Linear's. Used by tests/test_decoder.py
(the two models must agree) and qalib/tools/bench_decoder.py (the two must be timed on the same weights).
"""

from __future__ import annotations


from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import DecoderLM

# the fields a GPT-2 has exactly one value of (sizes aside)
GPT2_LAYOUT = {"pos": "learned", "norm": "layer", "norm_placement": "pre", "final_norm": True, "activation": "gelu_tanh",
               "attn_scale": "inv_sqrt_dk", "embed_scale": "none", "embed_norm": False, "tie_embeddings": True,
               "residual": True, "causal": True, "n_kv_heads": None}


def gpt2_names(n_layers: int) -> dict[str, tuple[str, bool]]:
    """Our parameter name -> (GPT2LMHeadModel's name, whether the weight is transposed: Conv1D stores (in, out))."""
    table = {"embeddings.word_embeddings.weight": ("transformer.wte.weight", False),
             "embeddings.position_embeddings.weight": ("transformer.wpe.weight", False),
             "decoder.final_norm.weight": ("transformer.ln_f.weight", False),
             "decoder.final_norm.bias": ("transformer.ln_f.bias", False)}
    per_layer = {"attention_norm": ("ln_1", False), "attention.qkv": ("attn.c_attn", True),
                 "attention.output": ("attn.c_proj", True), "ffn_norm": ("ln_2", False),
                 "ffn.intermediate": ("mlp.c_fc", True), "ffn.output": ("mlp.c_proj", True)}
    for i in range(n_layers):
        for ours, (theirs, conv1d) in per_layer.items():
            table[f"decoder.layers.{i}.{ours}.weight"] = (f"transformer.h.{i}.{theirs}.weight", conv1d)
            table[f"decoder.layers.{i}.{ours}.bias"] = (f"transformer.h.{i}.{theirs}.bias", False)
    return table


def gpt2_config(cfg: DecoderConfig):
    """The transformers.GPT2Config of the same sizes; ValueError naming every field GPT-2 cannot express."""
    import transformers

    differ = {name: getattr(cfg, name) for name, value in GPT2_LAYOUT.items() if getattr(cfg, name) != value}
    if differ:
        raise ValueError(f"GPT-2 has {({name: GPT2_LAYOUT[name] for name in differ})}; this config has {differ}")
    return transformers.GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_len, n_embd=cfg.d_model, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_inner=cfg.d_ff, activation_function="gelu_new", resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, layer_norm_epsilon=cfg.layer_norm_eps,
        initializer_range=cfg.init_std, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def to_gpt2(model: DecoderLM, attn_implementation: str = "sdpa"):
    """A transformers.GPT2LMHeadModel holding model's weights, on model's device, in model's train/eval mode."""
    import transformers

    hf = transformers.GPT2LMHeadModel._from_config(gpt2_config(model.cfg), attn_implementation=attn_implementation)
    theirs = {}
    for name, tensor in model.state_dict().items():
        hf_name, conv1d = gpt2_names(model.cfg.n_layers)[name]
        theirs[hf_name] = tensor.t() if conv1d else tensor
    missing, unexpected = hf.load_state_dict(theirs, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]  # tied to transformer.wte.weight
    if missing or unexpected:
        raise RuntimeError(f"weight transfer to GPT2LMHeadModel failed: missing {missing}, unexpected {unexpected}")
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr(), "GPT-2's head must stay tied"
    device = next(model.parameters()).device
    return hf.to(device).train(model.training)


__all__ = ["gpt2_config", "gpt2_names", "to_gpt2", "GPT2_LAYOUT"]
