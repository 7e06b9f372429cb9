"""The collection's table of contents: one entry per notebook (its code is the package named after it), used by
00_start_here, the README test, the static site and the demo tests. The short answers here are the 30-second
versions; each notebook argues its own."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from qalib.notebook.paths import NOTEBOOKS


@dataclass(frozen=True)
class Entry:
    file: str        # the notebook, in notebooks/; its code is the package qalib.topics.nb<file's stem>
    question: str
    short_answer: str
    play_with: str
    formula: str = ""   # the key formula, in matplotlib mathtext ($...$ for math), for the cheat sheet
    number: str = ""    # the one number that goes with it, with its source when it is quoted


    @property
    def path(self) -> Path:
        return NOTEBOOKS / self.file

    @property
    def package(self) -> str:
        """Its code: qalib.topics.nb06_layernorm_vs_batchnorm for 06_layernorm_vs_batchnorm.ipynb."""
        return "qalib.topics.nb" + self.file.removesuffix(".ipynb")

    @property
    def topic(self) -> str:
        """Its compute module: compute functions and plots."""
        return self.package + ".compute"

    @property
    def experiment(self) -> str:
        """Its experiment module: the training runs."""
        return self.package + ".experiment"

    @property
    def demos(self) -> str:
        """Its demos module, the one module of the topic that imports ipywidgets."""
        return self.package + ".demos"

    @property
    def exists(self) -> bool:
        return self.path.is_file()


CATALOG = [
    Entry("01_scaled_attention.ipynb",
          "Why divide by sqrt(d_k) before the softmax?",
          "With unit-variance q and k, q.k has variance d_k, so unscaled logits start with std sqrt(d_k) and a nearly "
          "one-hot softmax, whose Jacobian diag(y) - yy^T vanishes. Dividing by sqrt(d_k) restores variance 1 under the "
          "footnote's assumptions, so the softmax starts at the same temperature whatever the head size. Which constant "
          "trains best depends on the initialisation (muP uses 1/d).",
          "d_k and the scaling rule; the magnitude a in softmax([a, a, 2a])",
          formula='$\\mathrm{Var}(q\\cdot k)=d_k$, so $\\mathrm{softmax}(QK^{\\top}/\\sqrt{d_k})\\,V$',
          number='d_k = 64: unscaled logits have std 8, scaled std 1 (unit-variance q, k)'),
    Entry("02_sin_cos_positions.ipynb",
          "Why sin AND cos in positional encoding, and why 10000?",
          "Pairs (sin, cos) of one frequency let a fixed rotation M_k map PE(p) to PE(p+k) for every p; sin alone "
          "cannot. 10000 stretches the wavelengths to ~2*pi*10^4, so a larger offset still means a more different "
          "encoding over 2048 positions (bases 20 and 100 keep positions distinct but lose that order). A learned table did as "
          "well in translation (Table 3 row E); BERT never compared the two.",
          "base, d_model and length; the offset k and its rotation",
          formula='$PE(p+k)=M_k\\,PE(p)$ with $\\omega_i=10000^{-2i/d}$',
          number='wavelengths from 2π to about 2π·10^4 positions'),
    Entry("03_embedding_scale.ipynb",
          "Why multiply the embeddings by sqrt(d_model)?",
          "The paper gives no reason. A reconstruction: tied embeddings initialised with std d^-1/2 (tensor2tensor, "
          "fairseq) have norm ~1 while a sinusoid has norm sqrt(d/2), so without the factor the token is lost in the "
          "sum. BERT (std 0.02, learned positions, LayerNorm) does not scale; T5 and LLaMA do not, Gemma does.",
          "d_model, initialisation and the factor on/off",
          formula='$\\sqrt{d}\\,e_t+PE(p)$ with $\\|e_t\\|\\approx 1$, $\\|PE(p)\\|=\\sqrt{d/2}$',
          number='d = 512: a std-d^-1/2 row has norm 1, a sinusoid 16'),
    Entry("04_bert_embedding_sum.ipynb",
          "Why can BERT add its token, segment and position embeddings?",
          "The sum equals concatenated one-hots times stacked tables, and concat-then-project is itself a sum, "
          "with 3d^2 + d more parameters. Exact linear unmixing is guaranteed from d = V+S+P-2, yet in MiniLM linear probes "
          "read segment and position out of the sum, and the nearest word row gives the token.",
          "a sentence pair you type; d_model and table sizes",
          formula='$E[t]+S[s]+P[p]=[\\mathbf{1}_t;\\mathbf{1}_s;\\mathbf{1}_p]^{\\top}[E;S;P]$',
          number='concat-then-project costs 3d²+d more parameters: 1.77 M at d = 768'),
    Entry("05_shared_qk.ipynb",
          "Why do queries and keys use different weight matrices?",
          "With W_q = W_k the scores are a symmetric PSD matrix: each token's score with itself tends to win its "
          "row, and 'previous' scores like 'next', so in a one-layer toy with rotary (relative) positions a shared head "
          "fails the previous-token task that separate matrices solve.",
          "d, tokens, input kind and tied/separate",
          formula='$W_q=W_k=W \\Rightarrow S=XWW^{\\top}X^{\\top}=S^{\\top}\\succeq 0$',
          number='sharing would save d² = 0.59 M parameters per BERT-base layer (of about 7 M)'),
    Entry("06_layernorm_vs_batchnorm.ipynb",
          "Why LayerNorm and not BatchNorm?",
          "LayerNorm normalises each token over its features, so it ignores padding, batch size and neighbours; "
          "BatchNorm's statistics over batch and positions depend on all of them and differ between train and eval.",
          "batch size, padding, an outlier sentence; train/eval and momentum",
          formula='$\\mathrm{LN}(x)=\\gamma\\odot\\frac{x-\\mu(x)}{\\sigma(x)}+\\beta$, statistics over the features of one token',
          number="BERT's eps = 1e-12 (its config.json)"),
    Entry("07_multi_head.ipynb",
          "Why several attention heads?",
          "At the same 4d^2 parameters, h heads give h separate attention distributions; one head returns one "
          "average per query, and it learns a two-neighbour task more slowly than 4-8 heads (mean over seeds). The price is d_k = d/h.",
          "layer and head of a real BERT; number of heads",
          formula='$d_k=d/h$; $W^Q,W^K,W^V,W^O$ hold $4d^2$ parameters for any $h$',
          number='BERT-base: 12 heads of d_k = 64'),
    Entry("08_relative_positions.ipynb",
          "How do relative position embeddings work?",
          "They add a term depending on j - i to the attention score (Shaw, T5, ALiBi) or rotate q and k (RoPE). In a "
          "one-layer toy the clip must exceed the offset the task needs; at d = 32 Shaw (k = 3) and rotary keep their "
          "accuracy at twice the training length (at d = 64 rotary lost much of it, Shaw did not), symmetric ALiBi "
          "cannot express the task, and T5 was not run; running longer "
          "is not working longer (RoPE LMs need position interpolation or YaRN).",
          "clipping distance and method",
          formula='$s_{ij}=q_i\\cdot k_j+q_i\\cdot a_{\\mathrm{clip}(j-i,\\,k)}$; RoPE: $q_m^{\\top}R_{n-m}\\,k_n$',
          number='Shaw et al. 2018, Table 2: dev BLEU 25.8 at k = 2, 25.8-25.9 up to k = 256 (little variation for k >= 2)'),
    Entry("09_attention_random_walk.ipynb",
          "Is attention a random walk over the tokens?",
          "softmax(QK^T/sqrt(d)) has positive entries and rows summing to 1: a Markov transition matrix whose powers "
          "converge to a stationary distribution. Each layer averages tokens, so stacked attention without residuals "
          "collapses them to one vector (Dong et al. 2021 bound it doubly exponentially); here random stacks, a "
          "mini-BERT and MiniLM's own attention weights all collapse without it, and the residual path stops it.",
          "temperature and steps of the walk; depth, residual, MLP and LayerNorm of a collapsing stack",
          formula='$P=\\mathrm{softmax}(QK^{\\top}/\\sqrt{d})$: $P\\mathbf{1}=\\mathbf{1}$, $\\pi^{\\top}P=\\pi^{\\top}$',
          number='without residuals, the rank collapses doubly exponentially with depth (Dong et al. 2021)'),
    Entry("10_residuals_ffn_masks.ipynb",
          "What do residuals, the FFN and the masks do, and what does attention cost?",
          "Residuals give every layer an identity path for activations and gradients (without them a post-LN stack "
          "sends the same gradient to every position, and a 6-layer one stayed near chance on a copy task in our budget); with fixed attention weights a layer is "
          "linear in V, so the FFN supplies the learned per-token nonlinearity; masks stop information from future "
          "or padded tokens; the scores cost O(T^2) memory and O(T^2 d) time, Linformer's fixed-k projection O(T k).",
          "sequence length and Linformer's k; mask type; depth, residuals and norm",
          formula='$x+F(x)$ has Jacobian $I+\\partial F/\\partial x$; scores cost $O(T^2 d)$',
          number='per layer: FFN about 8d² parameters, attention 4d²'),
    Entry("11_mlm_and_nsp.ipynb",
          "How is BERT pretrained: why 15% and 80/10/10, and what happened to NSP?",
          "15% of tokens are predicted: 80% shown as [MASK], 10% as a random token, 10% unchanged (12% / 1.5% / 1.5% "
          "of all tokens), because [MASK] never occurs at fine-tuning; in a toy, a 100% [MASK] model's head ignores "
          "visible tokens. NSP classifies whether segment B follows A; BERT found dropping it hurts, RoBERTa that with "
          "inputs packed to 512 tokens it matches or slightly improves, and that short single-sentence pairs hurt.",
          "masking probabilities on a sentence you type; segment ids of a sentence pair",
          formula='15% predicted: 80% [MASK], 10% random, 10% kept',
          number='12% / 1.5% / 1.5% of all tokens (computed from Devlin et al. 2019, sec. 3.1)'),
    Entry("12_decoding.ipynb",
          "How does a decoder generate text?",
          "In training it predicts every next token from the true prefix (teacher forcing) in one pass, since no layer "
          "reads its own earlier outputs; the causal mask makes that honest ("
          "without it the loss falls far below the language's entropy and the model then generates mostly impossible "
          "text). It generates one token per step. On a language with a known truth, greedy and beam gave fewer "
          "impossible tokens than sampling but token frequencies further from the truth's. The KV cache (2 x layers x "
          "kv_heads x d_head x T x bytes; 0.5 MiB per token for Llama 2 7B in fp16) makes each step O(T) instead of "
          "O(T^2) score entries; MQA/GQA divide it by heads/kv_heads, at a quality cost the short CPU run is too noisy "
          "to measure (the GPU budget shows our MQA model's, at 11% fewer weights: not at equal parameters).",
          "temperature, top-k and top-p on a real next-token distribution beside the truth; the causal mask on or off",
          formula=r"$p(x)=\prod_t p(x_t\mid x_{<t})$; cache bytes $=2\,L\,h_{kv}\,d_{head}\,T\,B\,b$",
          number="Llama 2 7B in fp16: 2 x 32 x 32 x 128 x 2 bytes = 0.5 MiB per token, 2 GiB per 4k-token sequence"),
    Entry("13_attention_vs_recurrence.ipynb",
          "Why did attention replace recurrence?",
          "Path length: an RNN's gradient to the token d steps back is a product of d Jacobians (at init a GRU's shrinks "
          "~0.6x per step, attention's is flat in d); in a 100-step toy a GRU at PyTorch's default gates fails a recall "
          "task at d = 64 that a tuned attention layer solves. Sequential steps: O(n) dependent products against O(1), "
          "so training parallelises over positions; generation stays one pass per token. Cost: Table 1's O(n^2 d) "
          "against O(n d^2) drops attention's own O(n d^2) projections; counted whole, attention costs more than a tanh "
          "RNN at every n, than a GRU once n > d and than an LSTM once n > 2d.",
          "temperature and query of a soft dictionary lookup; n and d of Table 1's cost",
          formula=r"$\partial h_t/\partial h_{t-d}=\prod_{i=0}^{d-1}\partial h_{t-i}/\partial h_{t-i-1}$; per layer $O(n^2 d)$ vs $O(n d^2)$",
          number="path length O(1) vs O(n), sequential operations O(1) vs O(n) (Vaswani et al. 2017, Table 1)"),
    Entry("14_cross_attention.ipynb",
          "Encoder-decoder: where do cross-attention's K and V come from, and what does it look at?",
          "Q comes from the decoder, K and V from the encoder's final output (the memory), which every decoder layer "
          "reads through its own W_K, W_V and which is projected once and cached while decoding (Vaswani sec. 3.1, "
          "3.2.3). In a toy encoder-decoder trained to reverse its input, a cross-attention head puts > 85% of its "
          "mass on the aligned source position in every seed; another sentence's memory makes it write that "
          "sentence's reversal. Label smoothing keeps the accuracy and, by its objective, worsens the held-out NLL "
          "(Vaswani Table 3 D: perplexity 4.67 -> 4.92); tying saves the V x d output matrix.",
          "decoder layer, head and sentence of a trained model; source/target lengths and source padding of the "
          "three masks; label smoothing's eps and vocabulary size",
          formula=r"$K_\ell = M\,W^K_\ell,\ V_\ell = M\,W^V_\ell$ with $M=\mathrm{Encoder}(x)$ for every decoder layer $\ell$",
          number="label smoothing 0.1: dev perplexity 4.67 -> 4.92, BLEU 25.3 -> 25.8 (Vaswani et al. 2017, Table 3 row D)"),
    Entry("15_tokenization.ipynb",
          "Tokenization: why subwords, and what does the vocabulary size trade?",
          "A word-level vocabulary still leaves > 1% of held-out words [UNK] with every training word kept; "
          "WordPiece, BPE and unigram stay under 0.02% at every size (only unseen characters remain), byte-level BPE "
          "has none. The size trades tokens per word (compute per word, mostly linear; only the scores go as n^2) "
          "against the V x d table. HF's WordPiece and BPE "
          "trainers pick the same pieces; their encoders differ.",
          "a typed sentence, split by every trained tokenizer and MiniLM's WordPiece, at each vocabulary size; "
          "the vocabulary size, width and tying, against the table's share and the tokens per word",
          formula=r"$n = \mathrm{words} \times \mathrm{tokens/word}(V)$, attention scores $\propto n^2$ (the rest $\propto n$), table $= V d$",
          number="BERT-base: 30,522 x 768 = 21.4% of its 109,482,240 parameters (from the config's shapes)"),
    Entry("16_objectives.ipynb",
          "BERT, GPT or T5: what does the training objective buy?",
          "BERT predicts 15% of positions from both sides, GPT every next token from the left, T5 sentinel-replaced "
          "spans (density 0.15, mean 3) with a decoder. In a one-size toy, in the seeds whose masked LM left its loss "
          "plateau, the encoder's frozen output lets a linear probe read the right neighbour, which the causal model's mask forbids; only the causal model gives "
          "p(next | prefix) directly (KL > 8x smaller than BERT through an appended [MASK], an input it never saw). The toy T5 did not learn to use its "
          "encoder at its budget, so it shows nothing about T5. ELECTRA learns from every token.",
          "objective, masking or noise rate, T5's mean span and the length of one corrupted sequence; training signals "
          "and FLOPs per sequence",
          formula=r"$\mathcal{L}_{MLM}=-\sum_{t\in M}\log p(x_t\mid\tilde x)$, $\mathcal{L}_{LM}=-\sum_t\log p(x_t\mid x_{<t})$",
          number="T5: noise_density 0.15, mean_noise_span_length 3.0 (t5 code, span_corruption)"),
    Entry("17_fine_tuning.ipynb",
          "Fine-tuning: what does [CLS] carry, and why does question answering not use it?",
          "[CLS] is one more position: its last-layer vector holds what attention mixed into it, and BERT's classifier "
          "(sec. 4.1) adds only W on top of it. In all-MiniLM-L6-v2, trained to output the mean of its tokens, a "
          "linear probe reads a sentence-pair relation from the frozen [CLS] (> 80%), as from the mean. An answer is "
          "a position, so BERT's span head scores every token (S.T_i + E.T_j, sec. 4.2); a head writing the position "
          "from [CLS] alone found far fewer exact answers. Fine-tuning (AdamW, 3e-4) moved every layer's weights by "
          "about the same fraction but the top layers' outputs most (Merchant et al. 2020: top layers change most); "
          "at lr 1e-3 accuracy ended lower and MiniLM's similarity structure on held-out prose was erased, less so "
          "when only the top layer trained.",
          "the learning rate and the layers trained, against what each layer moved; the span head or the [CLS] head "
          "on a held-out question",
          formula=r"class: $\mathrm{softmax}(C W^{\top})$; span: $\arg\max_{j \geq i}\, S\cdot T_i + E\cdot T_j$",
          number="BERT app. A.3: learning rate 5e-5, 3e-5 or 2e-5, batch 16 or 32, 2-4 epochs"),
    Entry("18_attention_explanation.ipynb",
          "Is attention an explanation?",
          "Not by itself: a weight says how much of a value was mixed into one position in one layer, not whether "
          "the output depends on it. In a toy whose label is one known token, a 100%-accurate 2-layer model's "
          "last-layer [CLS] attention can skip that token for a whole class, and it can be moved far (JSD > 0.3 nats) "
          "with |delta p| < 0.01 (Jain & Wallace's test). Rollout's (P + I)/2 product found the token in the toy but "
          "not in MiniLM; erasure and integrated gradients found it far above chance in both. Check attention "
          "against the output.",
          "a sentence and a reference you type, six attributions on MiniLM side by side; the adversarial bound on "
          "|delta p| and the sentence",
          formula=r"rollout $R=\prod_\ell \frac{1}{2}(\bar P_\ell+I)$; IG $(x-x')\cdot\int_0^1\nabla f(x'+\alpha(x-x'))\,d\alpha$",
          number="JSD between two distributions is at most ln 2 = 0.693 nats"),
]


def available() -> list[Entry]:
    return [e for e in CATALOG if e.exists]


def demo_factories() -> dict[str, list]:
    """{notebook stem: [demo factory, ...]}: the DEMOS of each entry's demos module. Imports every topic: call it
    from tests and tools, not at import time."""
    return {entry.file.removesuffix(".ipynb"): list(importlib.import_module(entry.demos).DEMOS) for entry in CATALOG}
