"""The collection's table of contents: one entry per notebook, with its topic and experiment modules, used by
00_start_here, the README test, the static site and the demo tests. The short answers here are the 30-second
versions; each notebook argues its own."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from qalib.tools.paths import NOTEBOOKS


@dataclass(frozen=True)
class Entry:
    file: str        # the notebook, in notebooks/
    topic: str       # its topic module: compute functions, plots, demos
    experiment: str  # its experiment module: the training runs (qalib/topics/__init__.py has the import rule)
    question: str
    short_answer: str
    play_with: str

    @property
    def path(self) -> Path:
        return NOTEBOOKS / self.file

    @property
    def exists(self) -> bool:
        return self.path.is_file()


CATALOG = [
    Entry("01_scaled_attention.ipynb", "qalib.topics.scaled_attention", "qalib.topics.scaled_attention_experiment",
          "Why divide by sqrt(d_k) before the softmax?",
          "With unit-variance q and k, q.k has variance d_k, so unscaled logits start with std sqrt(d_k) and a nearly "
          "one-hot softmax. The W_q, W_k gradient is largest at step 0; it collapses once attention locks onto one-hot "
          "patterns (the Jacobian diag(y) - yy^T vanishes), and the unscaled toy stays stuck. Dividing by sqrt(d_k) "
          "restores variance 1 under the footnote's assumptions; 1/d_k learned no slower in the toy (muP uses it).",
          "d_k and the scaling rule; the magnitude a in softmax([a, a, 2a])"),
    Entry("02_sin_cos_positions.ipynb", "qalib.topics.sin_cos_positions", "qalib.topics.sin_cos_positions_experiment",
          "Why sin AND cos in positional encoding, and why 10000?",
          "Pairs (sin, cos) of one frequency let a fixed rotation M_k map PE(p) to PE(p+k) for every p; sin alone "
          "cannot. 10000 stretches the wavelengths to ~2*pi*10^4, so a larger offset still means a more different "
          "encoding over thousands of positions (small bases stay distinct but lose that order). A learned table did as "
          "well in translation (Table 3 row E); BERT never compared the two.",
          "base, d_model and length; the offset k and its rotation"),
    Entry("03_embedding_scale.ipynb", "qalib.topics.embedding_scale", "qalib.topics.embedding_scale_experiment",
          "Why multiply the embeddings by sqrt(d_model)?",
          "The paper gives no reason. A reconstruction: tied embeddings initialised with std d^-1/2 (tensor2tensor, "
          "fairseq) have norm ~1 while a sinusoid has norm sqrt(d/2), so without the factor the token is lost in the "
          "sum. BERT (std 0.02, learned positions, LayerNorm) does not scale; T5 and LLaMA do not, Gemma does.",
          "d_model, initialisation and the factor on/off"),
    Entry("04_bert_embedding_sum.ipynb", "qalib.topics.embedding_sum", "qalib.topics.embedding_sum_experiment",
          "Why can BERT add its token, segment and position embeddings?",
          "The sum equals concatenated one-hots times stacked tables, and concat-then-project is itself a sum, "
          "with 3d^2 + d more parameters. Exact linear unmixing would need d >= V+S+P, yet in MiniLM linear probes "
          "read segment and position out of the sum, and the nearest word row gives the token.",
          "a sentence pair you type; d_model and table sizes"),
    Entry("05_shared_qk.ipynb", "qalib.topics.shared_qk", "qalib.topics.shared_qk_experiment",
          "Why do queries and keys use different weight matrices?",
          "With W_q = W_k the scores are a symmetric PSD matrix: each token's score with itself tends to win its "
          "row, and 'previous' scores like 'next', so in a one-layer toy with rotary (relative) positions a shared head "
          "fails the previous-token task that separate matrices solve.",
          "d, tokens, input kind and tied/separate"),
    Entry("06_layernorm_vs_batchnorm.ipynb", "qalib.topics.normalization", "qalib.topics.normalization_experiment",
          "Why LayerNorm and not BatchNorm?",
          "LayerNorm normalises each token over its features, so it ignores padding, batch size and neighbours; "
          "BatchNorm's statistics over batch and positions depend on all of them and differ between train and eval.",
          "batch size, padding, an outlier sentence; train/eval and momentum"),
    Entry("07_multi_head.ipynb", "qalib.topics.multi_head", "qalib.topics.multi_head_experiment",
          "Why several attention heads?",
          "At the same 4d^2 parameters, h heads give h separate attention distributions; one head returns one "
          "average per query, and on a two-neighbour task it stays far behind 2-8 heads. The price is d_k = d/h.",
          "layer and head of a real BERT; number of heads"),
    Entry("08_relative_positions.ipynb",
          "qalib.topics.relative_positions", "qalib.topics.relative_positions_experiment",
          "How do relative position embeddings work?",
          "They add a term depending on j - i to the attention score (Shaw, T5, ALiBi) or rotate q and k (RoPE). In a "
          "one-layer toy the clip must exceed the offset the task needs; Shaw (k = 3) and rotary keep their accuracy "
          "at twice the training length, symmetric ALiBi cannot express the task, and T5 was not run; running longer "
          "is not working longer (RoPE LMs need position interpolation or YaRN).",
          "clipping distance and method"),
    Entry("09_attention_random_walk.ipynb", "qalib.topics.random_walk", "qalib.topics.random_walk_experiment",
          "Is attention a random walk over the tokens?",
          "softmax(QK^T/sqrt(d)) has positive entries and rows summing to 1: a Markov transition matrix whose powers "
          "converge to a stationary distribution. Each layer averages tokens, so stacked attention without residuals "
          "collapses them to one vector (Dong et al. 2021 bound it doubly exponentially); here random stacks, a "
          "mini-BERT and MiniLM's own attention weights all collapse without it, and the residual path stops it.",
          "temperature and steps of the walk; depth, residual, MLP and LayerNorm of a collapsing stack"),
    Entry("10_residuals_ffn_masks.ipynb", "qalib.topics.block_parts", "qalib.topics.block_parts_experiment",
          "What do residuals, the FFN and the masks do, and what does attention cost?",
          "Residuals give every layer an identity path for activations and gradients (without them a post-LN stack "
          "sends the same gradient to every position, and a 6-layer one stayed near chance on a copy task in our budget); with fixed attention weights a layer is "
          "linear in V, so the FFN supplies the learned per-token nonlinearity; masks stop information from future "
          "or padded tokens; the scores cost O(T^2) memory and O(T^2 d) time, Linformer's fixed-k projection O(T k).",
          "sequence length and Linformer's k; mask type; depth, residuals and norm"),
    Entry("11_mlm_and_nsp.ipynb", "qalib.topics.pretraining", "qalib.topics.pretraining_experiment",
          "How is BERT pretrained: why 15% and 80/10/10, and what happened to NSP?",
          "15% of tokens are predicted: 80% shown as [MASK], 10% as a random token, 10% unchanged (12% / 1.5% / 1.5% "
          "of all tokens), because [MASK] never occurs at fine-tuning; in a toy, a 100% [MASK] model's head ignores "
          "visible tokens. NSP classifies whether segment B follows A; BERT found dropping it hurts, RoBERTa that with "
          "inputs packed to 512 tokens it matches or slightly improves, and that short single-sentence pairs hurt.",
          "masking probabilities on a sentence you type; segment ids of a sentence pair"),
    Entry("12_decoding.ipynb", "qalib.topics.decoding", "qalib.topics.decoding_experiment",
          "How does a decoder generate text?",
          "It predicts every next token in parallel in training (teacher forcing, made honest by the causal mask: "
          "without it the loss falls far below the language's entropy and the model then generates mostly impossible "
          "text) and generates one token per step. On a language with a known truth, greedy and beam gave fewer "
          "impossible tokens than sampling but token frequencies further from the truth's. The KV cache (2 x layers x "
          "kv_heads x d_head x T x bytes; 0.5 MiB per token for Llama 2 7B in fp16) makes each step O(T) instead of "
          "O(T^2) score entries; MQA/GQA divide it by heads/kv_heads, at no measurable loss on the toy.",
          "temperature, top-k and top-p on a real next-token distribution beside the truth; the causal mask on or off"),
]


def available() -> list[Entry]:
    return [e for e in CATALOG if e.exists]


def demo_factories() -> dict[str, list]:
    """{notebook stem: [demo factory, ...]}: the DEMOS of each entry's topic module, then of its experiment module
    (whose demos need its trained models). Imports every topic: call it from tests and tools, not at import time."""
    out = {}
    for entry in CATALOG:
        modules = [importlib.import_module(name) for name in (entry.topic, entry.experiment)]
        out[entry.file.removesuffix(".ipynb")] = [f for module in modules for f in getattr(module, "DEMOS", [])]
    return out
