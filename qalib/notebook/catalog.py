"""The collection's table of contents: one entry per notebook (its code is the package named after it), used by
00_start_here, the README test, the static site and the demo tests. The short answers here are the 30-second
versions, in plain text; longer_answer is the notebook's own longer answer, word for word as its first
cell has it (markdown, $...$ for math); each notebook argues its own."""

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
    longer_answer: str = ""  # the notebook's longer answer, as its cell 0 words it (markdown, $...$ for math)


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
          "If q and k have independent components of mean 0 and variance 1, q.k has variance d_k (Vaswani et al. "
          "2017, footnote 4). At d_k = 64 the logits then have standard deviation 8 and the softmax starts nearly "
          "one-hot, where its gradient is small. Dividing by sqrt(d_k) restores variance 1: the same starting "
          "temperature for every head size.",
          "d_k and the scaling rule; the magnitude a in softmax([a, a, 2a])",
          formula='$\\mathrm{Var}(q\\cdot k)=d_k$, so $\\mathrm{softmax}(QK^{\\top}/\\sqrt{d_k})\\,V$',
          number='d_k = 64: unscaled logits have std 8, scaled std 1 (unit-variance q, k)',
          longer_answer=r"$q\cdot k$ is a sum of $d_k$ products of variance 1, so unscaled logits grow like "
                        r"$\sqrt{d_k}$. The softmax's Jacobian, $\mathrm{diag}(y) - yy^\top$, goes to zero as $y$ "
                        "becomes one-hot, and Vaswani et al. suspect (sec. 3.2.1) that large dot products push the "
                        "softmax into regions with extremely small gradients. Of the powers of $d_k$, only "
                        r"$1/\sqrt{d_k}$ keeps the softmax in the same regime for every head size: no scaling drives "
                        "it towards one-hot, $1/d_k$ towards uniform. The factor is a fixed temperature, not a "
                        "guarantee. It gives unit variance only under the footnote's assumptions, and learned "
                        "projections move the variance away from 1: in the trained MiniLM the scaled scores have "
                        "variance between about 2 and 14. Which constant trains best depends on the initialisation; "
                        "muP, for one, uses $1/d$ with zero-initialised queries. This notebook measures the "
                        "saturation as $d_k$ grows and trains a one-head retrieval toy with each of the three "
                        "scalings."),
    Entry("02_sin_cos_positions.ipynb",
          "Why sin AND cos in positional encoding, and why 10000?",
          "Each (sin, cos) pair turns on a circle at its own speed, so a shift by k is one fixed rotation, PE(p+k) = "
          "M_k·PE(p) for every p; sine alone cannot do that. The base 10000 stretches the wavelengths up to about "
          "10000·2π, so encodings grow further apart with the offset. A learned table (BERT's choice) did as well in "
          "translation.",
          "base, d_model and length; the offset k and its rotation",
          formula='$PE(p+k)=M_k\\,PE(p)$ with $\\omega_i=10000^{-2i/d}$',
          number='wavelengths from 2π to about 2π·10^4 positions',
          longer_answer=r"Pair $i$ turns at $\omega_i = 10000^{-2i/d}$, like the digits of a counter that tick at "
                        "different rates: fast pairs tell neighbours apart, slow pairs far-apart positions. By the "
                        "angle-addition formulas $M_k$ is block-diagonal, one rotation per pair that depends on $k$ "
                        r"only. From $\sin\omega p$ alone even the next step is not determined, so no "
                        "position-independent linear map exists. Dot products depend only on the offset, "
                        r"$PE(p)\cdot PE(q)=\sum_i\cos(\omega_i(p-q))$, but not on its sign. The base sets the slowest "
                        "wavelength: with a base of 20 or 100 positions stay distinct, yet beyond the slowest pair's "
                        "first turn far positions look no more different than near ones. Learned or fixed: in the "
                        "Transformer's Table 3 (row E) a learned table scored 25.7 dev BLEU against the sinusoid's "
                        "25.8; BERT learns its table and never compared the two. A table has no row for a position it "
                        "never had; the formula can be evaluated anywhere, but in this notebook's experiment a model "
                        'trained on 12 positions loses its accuracy on the positions beyond them: "runs" is not '
                        '"works".'),
    Entry("03_embedding_scale.ipynb",
          "Why multiply the embeddings by sqrt(d_model)?",
          "The paper gives no reason; this is a reconstruction. The table doubles as the output layer and starts at "
          "std d^-1/2 in the reference code: a token row has norm about 1, a sinusoid sqrt(d/2). Times sqrt(d), the "
          "token is no longer a small ripple on the position. BERT, with learned positions and a normalised sum, does "
          "not scale.",
          "d_model, initialisation and the factor on/off",
          formula='$\\sqrt{d}\\,e_t+PE(p)$ with $\\|e_t\\|\\approx 1$, $\\|PE(p)\\|=\\sqrt{d/2}$',
          number='d = 512: a std-d^-1/2 row has norm 1, a sinusoid 16',
          longer_answer="Section 3.4 ties the input embedding to the pre-softmax layer and says only that the weights "
                        r"are multiplied by $\sqrt{d_{model}}$. tensor2tensor and fairseq start that shared table at "
                        "std $d^{-1/2}$, which keeps the initial output logits near variance 1. A row then has norm "
                        "about 1 against the sinusoid's 16 at $d = 512$, and a read-out by the nearest row loses most "
                        r"tokens, however wide the model. Times $\sqrt d$ the token row has norm $\sqrt d$, about "
                        r"$\sqrt 2$ times the position, and both survive. Why not initialise the table bigger? Because "
                        "it is also the output layer, where large weights would start the softmax saturated: one "
                        "matrix, two wishes. The factor belongs to that initialisation; with std 0.02 or Xavier it no "
                        'longer "makes the variance 1". BERT starts every table at std 0.02, learns its positions and '
                        "puts a LayerNorm after the sum, so it needs no factor; switched on in MiniLM, the factor "
                        "leaves the model nearly blind to word order. Later models differ too: T5 and LLaMA add no "
                        r"factor, Gemma multiplies by $\sqrt d$."),
    Entry("04_bert_embedding_sum.ipynb",
          "Why can BERT add its token, segment and position embeddings?",
          "A sum of three lookups is one linear layer on the one-hot codes side by side: E[t]+S[s]+P[p] = "
          "[1_t|1_s|1_p][E;S;P]. Concatenating and projecting back to d is itself a sum of projected tables: no more "
          "expressive, only larger. In high dimension random rows are nearly orthogonal, so the sums stay distinct "
          "and the parts can be told apart.",
          "a sentence pair you type; d_model and table sizes",
          formula='$E[t]+S[s]+P[p]=[\\mathbf{1}_t;\\mathbf{1}_s;\\mathbf{1}_p]^{\\top}[E;S;P]$',
          number='concat-then-project costs 3d²+d more parameters: 1.77 M at d = 768',
          longer_answer="Block multiplication gives the identity: BERT's input layer is a single linear layer without "
                        "bias on the concatenated one-hot codes, and Google's code even writes the segment lookup as "
                        r"`one_hot @ table`. Concatenating and projecting with $W=[\,W_E\mid W_S\mid W_P\,]$ gives "
                        "$(W_Ee+b)+W_Ss+W_Pp$, a sum of re-parameterised tables of which BERT's is the case "
                        r"$W=[\,I\mid I\mid I\,]$; it costs $3d^2+d$ more parameters, 1.77 M at BERT-base sizes. Exact "
                        r"*linear* unmixing of the sum is guaranteed only once $d \ge V+S+P$, far more than BERT has, "
                        r"but that bound is not what matters: random rows have cosines of order $1/\sqrt d$, the "
                        "possible sums stay distinct points, and a decoder that searches over them can tell them "
                        "apart far below it. In all-MiniLM-L6-v2 a linear probe reads the segment and (roughly) the "
                        "position back out of LayerNorm(sum), and the nearest word row gives back the token. In the "
                        r"backward pass each of the three rows receives the same gradient $\partial L/\partial x$."),
    Entry("05_shared_qk.ipynb",
          "Why do queries and keys use different weight matrices?",
          "With one matrix W the scores S = XWW^TX^T are symmetric and positive semi-definite: a token's score with "
          "itself tends to win its row (Cauchy-Schwarz), and 'i looks at j' scores exactly like 'j looks at i'. So "
          "without an extra mask or position trick, a head cannot express 'attend to the previous token'. Separate "
          "W_q, W_k can.",
          "d, tokens, input kind and tied/separate",
          formula='$W_q=W_k=W \\Rightarrow S=XWW^{\\top}X^{\\top}=S^{\\top}\\succeq 0$',
          number='sharing would save d² = 0.59 M parameters per BERT-base layer (of about 7 M)',
          longer_answer=(("$S_{ii} = \\lVert q_i\\rVert^2$ while $S_{ij} = q_i\\cdot q_j \\le \\lVert q_i\\rVert\\,\\lVert q_j\\rVert$, "
                          "so the diagonal loses only to a longer query pointing the same way: it is the usual row maximum, "
                          "though how much of the softmax mass it takes depends on the scale of the scores. Symmetry is the "
                          "deeper problem. Whatever raises \"$i$ attends to $i-1$\" raises \"$i-1$ attends to $i$\" by as much, so "
                          "the back-over-forward margins telescope along a sequence, and rotary positions do not help: a "
                          "shared, rotated score is still symmetric. Separate matrices give a general bilinear form "
                          "$W_qW_k^\\top$ of rank at most $d_k$, which can be asymmetric and indefinite. Here, with rotary "
                          "positions, a shared head never learns to look back at any budget: only with 16 to 64 times the steps "
                          "does it solve a previous-token task, by other means, and never solves a 2-back task that separate "
                          "matrices learn in 150 steps. Every head of all-MiniLM-L6-v2 is far from symmetric. Reformer does "
                          "share them: it masks attention to self, and its evidence that sharing costs nothing comes from "
                          "autoregressive tasks, where the causal mask already supplies the direction."))),
    Entry("06_layernorm_vs_batchnorm.ipynb",
          "Why LayerNorm and not BatchNorm?",
          "Both normalise with a mean and a standard deviation, taken over different sets. BatchNorm pools each "
          "feature over the batch and every position, so a token's output depends on its neighbours, their padding "
          "and the batch size, and inference needs running statistics. LayerNorm normalises each token over its own "
          "d features: the same function in training and inference.",
          "batch size, padding, an outlier sentence; train/eval and momentum",
          formula='$\\mathrm{LN}(x)=\\gamma\\odot\\frac{x-\\mu(x)}{\\sigma(x)}+\\beta$, statistics over the features of one token',
          number="BERT's eps = 1e-12 (its config.json)",
          longer_answer=("BatchNorm's statistics mix tokens of other sentences and, unless masked, the `[PAD]` positions, so "
                         "padding a batch further changes every real token's output. At inference it switches to running "
                         "averages collected in training, a train/eval mismatch, and a sentence processed alone is normalised "
                         "against itself. It also sees later tokens, which a causal decoder must not. LayerNorm's mean and "
                         "variance come from one token (Ba et al. 2016, eq. 3), so each token is normalised on its own, and "
                         "before $\\gamma$ and $\\beta$ every token lies on a sphere of radius $\\sqrt d$ ($\\sqrt{768} = 27.7$ in "
                         "BERT-base). Shen et al. (2020, sec. 3) found that batch statistics fluctuate a lot in NLP "
                         "Transformers, which their PowerNorm addresses. In this notebook's small model BatchNorm with pads "
                         "masked even trains faster than LayerNorm; its costs appear outside the training batch, and the "
                         "notebook measures each of them.")),
    Entry("07_multi_head.ipynb",
          "Why several attention heads?",
          "One head gives each query one softmax distribution, hence one weighted average of the values; when a token "
          "needs two things from two places, that average mixes them. h heads give h distributions, each with its own "
          "value projection, for the same 4d^2 parameters. The price is d_k = d/h: each head's score matrix has rank "
          "at most d_k.",
          "layer and head of a real BERT; number of heads",
          formula='$d_k=d/h$; $W^Q,W^K,W^V,W^O$ hold $4d^2$ parameters for any $h$',
          number='BERT-base: 12 heads of d_k = 64',
          longer_answer=("Stacking the heads' $W^Q_i$ side by side gives one $d \\times d$ matrix, so $W^Q, W^K, W^V, W^O$ hold "
                         "$4d^2$ weights whatever $h$ is, and the score FLOPs, $T^2 d$, do not change either; only the number "
                         "of softmax entries grows with $h$. Concatenation followed by $W^O$ is a sum over heads, each writing "
                         "its own contribution. With two neighbours to read, one head that weighs them alike loses their "
                         "order, and any other mix must be unmixed later; two different mixes already recover both. In this "
                         "notebook's toy, one head learns such a two-neighbour task more slowly than four or eight, but given "
                         "1,000 steps it solves it too. More is not always better: Vaswani et al. (Table 3, row A, one dev-set "
                         "run per setting) found 1 head 0.9 BLEU worse than 8, and 32 heads 0.4 worse; that small heads hit a "
                         "low-rank bottleneck is Bhojanapalli et al.'s (2020) hypothesis. Trained heads are partly redundant: "
                         "many can be removed at test time (Michel et al. 2019).")),
    Entry("08_relative_positions.ipynb",
          "How do relative position embeddings work?",
          "Instead of adding a position vector to each token, a relative scheme makes the score of query i and key j "
          "depend on their positions only through the offset j - i: a learned vector per clipped offset (Shaw et "
          "al.), a learned scalar per bucket (T5), a fixed distance penalty (ALiBi), or a rotation of q and k (RoPE).",
          "clipping distance and method",
          formula='$s_{ij}=q_i\\cdot k_j+q_i\\cdot a_{\\mathrm{clip}(j-i,\\,k)}$; RoPE: $q_m^{\\top}R_{n-m}\\,k_n$',
          number='Shaw et al. 2018, Table 2: dev BLEU 25.8 at k = 2, 25.8-25.9 up to k = 256 (little variation for k >= 2)',
          longer_answer=("Self-attention without positions is blind to order. Shaw et al. add a learned vector to the key, "
                         "$e_{ij} \\propto q_i\\cdot(k_j + w_{\\mathrm{clip}(j-i,\\,k)})$, with $2k+1$ vectors; T5 adds one "
                         "learned scalar per head and log-spaced bucket, shared across layers; ALiBi subtracts $m_h(i-j)$ on "
                         "past keys in the paper's causal model, or $m_h|j-i|$ in encoder adaptations, and learns nothing; "
                         "RoPE rotates pairs of $q$ and $k$ so that $q_m\\cdot k_n$ depends on $n-m$. For translation Shaw et "
                         "al. found a small clip enough: dev BLEU 25.8-25.9 for every $k$ from 2 to 256 (Table 2). In this "
                         "notebook's one-layer toy the clip must exceed the offset the task needs, and one layer of symmetric "
                         "ALiBi, which cannot tell left from right, fails it (two layers learn it, but not beyond the trained "
                         "length). Running on longer inputs is not working there: RoPE language models degrade beyond their "
                         "training length, which is why position interpolation and YaRN exist. A real BERT's absolute table "
                         "(all-MiniLM-L6-v2) has learned a partly relative structure on its own.")),
    Entry("09_attention_random_walk.ipynb",
          "Is attention a random walk over the tokens?",
          "Yes: every entry of the attention matrix P is positive and every row sums to 1, so P is a Markov "
          "transition matrix whose powers converge to one stationary distribution. The consequence is rank collapse: "
          "each layer averages the tokens, so attention stacked without residual connections drives them to one "
          "vector, doubly exponentially in depth (Dong et al. 2021).",
          "temperature and steps of the walk; depth, residual, MLP and LayerNorm of a collapsing stack",
          formula='$P=\\mathrm{softmax}(QK^{\\top}/\\sqrt{d})$: $P\\mathbf{1}=\\mathbf{1}$, $\\pi^{\\top}P=\\pi^{\\top}$',
          number='without residuals, the rank collapses doubly exponentially with depth (Dong et al. 2021)',
          longer_answer=("$P^t$ converges to the rank-one matrix $\\mathbf 1\\pi^\\top$ at the rate $|\\lambda_2|^t$: a walker "
                         "forgets where it started, the diffusion-maps picture. The logit is also a Gaussian kernel in "
                         "disguise, $e^{q\\cdot k/s} = e^{-\\lVert q-k\\rVert^2/2s}\\,e^{\\lVert q\\rVert^2/2s}\\,e^{\\lVert "
                         "k\\rVert^2/2s}$: the query factor cancels in each row, the key factor does not, so attention is a "
                         "pure Gaussian kernel only when all keys have the same norm, and MiniLM's heads are far from that. An "
                         "attention output is a convex combination of value vectors, so without an identity path every layer "
                         "shrinks the differences between tokens. Here a random-weight stack of attention alone collapses "
                         "within three layers, adding MLPs alone or LayerNorms alone does not stop it, a mini-BERT without "
                         "residuals beat the best constant prediction only from a larger initialisation than BERT's, and "
                         "MiniLM's own attention weights collapse when stacked without their residual path. The heavier claims "
                         "sometimes attached to this picture (tokens perform Brownian motion, so Transformers need a "
                         "second-order optimiser) are analogies or conjectures, not results.")),
    Entry("10_residuals_ffn_masks.ipynb",
          "What do residuals, the FFN and the masks do, and what does attention cost?",
          "A residual computes x + F(x), so each layer's Jacobian is I + dF/dx: an identity path carries every "
          "token's signal and gradient through any depth. Attention returns weighted averages of value vectors, so "
          "the FFN supplies the learned per-token nonlinearity. Masks set forbidden scores to -inf, so their weights "
          "are exactly 0. The T×T scores cost O(T^2 d) time.",
          "sequence length and Linformer's k; mask type; depth, residuals and norm",
          formula='$x+F(x)$ has Jacobian $I+\\partial F/\\partial x$; scores cost $O(T^2 d)$',
          number='per layer: FFN about 8d² parameters, attention 4d²',
          longer_answer=("Without the identity path a post-LN stack at initialisation averages the tokens together in every "
                         "attention layer: LayerNorm keeps the gradient's size, but below the top layer it is the same at "
                         "every position. Here a 6-layer model without residuals, from BERT's initialisation, stayed at chance "
                         "even after 2,000 steps on a task that only asks it to pass tokens through (from std 0.2 it learned, "
                         "slowly). The softmax makes attention nonlinear only in how much of each value vector it takes; the "
                         "position-wise FFN, $W_2\\,\\mathrm{GELU}(W_1 x)$ with $d_{ff} = 4d$, learns a feature map of each "
                         "token and holds about 2/3 of a layer's parameters. With a causal mask, changing a future token "
                         "changes no earlier output; with a padding mask, changing a pad changes no real output (in practice "
                         "the $-\\infty$ is a large negative number). The score matrix is $T \\times T$ per head, so its memory "
                         "grows as $O(T^2)$. Linformer (Wang et al. 2020) projects the length axis of $K$ and $V$ to a fixed "
                         "$k$ rows, making both $O(Tk)$: an approximation that cannot take a causal mask.")),
    Entry("11_mlm_and_nsp.ipynb",
          "How is BERT pretrained: why 15% and 80/10/10, and what happened to NSP?",
          "BERT predicts 15% of the word pieces: 80% of those become [MASK], 10% a random token, 10% stay: 12% of "
          "the input is [MASK], 1.5% silently wrong. [MASK] never occurs in fine-tuning, so the kept and random "
          "targets teach the model to use the visible token too. NSP asks whether segment B follows A; RoBERTa "
          "found it unnecessary.",
          "masking probabilities on a sentence you type; segment ids of a sentence pair",
          formula='15% predicted: 80% [MASK], 10% random, 10% kept',
          number='12% / 1.5% / 1.5% of all tokens (computed from Devlin et al. 2019, sec. 3.1)',
          longer_answer=("Devlin et al. give the mismatch as the reason (sec. 3.1): a model trained only on `[MASK]` targets "
                         "is never asked about a token it can see, yet at fine-tuning every token is visible; and since any "
                         "visible token may be a target, the model must keep a representation of every token (appendix A.1). "
                         "Their Table 8 (dev sets, no error bars) shows almost no difference when fine-tuning (MNLI 84.2 vs "
                         "84.3 with 100% `[MASK]`) and the largest for frozen features (NER 94.9 vs 94.0). In this notebook's "
                         "toy, a 100% `[MASK]` model's head ignores the token in front of it, and 80/10/10 learns the task "
                         "faster. NSP trains `[CLS]` on \"is B the next segment after A?\" (50% true). BERT's Table 5 found that "
                         "dropping it hurts (QNLI 88.4 → 84.9); RoBERTa's Table 2 found that on inputs packed with full "
                         "sentences dropping it matches or slightly improves results, and that short single-sentence pairs are "
                         "what hurt.")),
    Entry("12_decoding.ipynb",
          "How does a decoder generate text?",
          "A decoder factorises p(x) = prod_t p(x_t|x_<t). Training predicts every next token from the true prefix in "
          "one pass (teacher forcing); the causal mask hides from each position the token it predicts. Generation "
          "takes one step per token, feeding each choice back in; the KV cache keeps earlier keys and values, so a "
          "step computes one new row of scores.",
          "temperature, top-k and top-p on a real next-token distribution beside the truth; the causal mask on or off",
          formula=r"$p(x)=\prod_t p(x_t\mid x_{<t})$; cache bytes $=2\,L\,h_{kv}\,d_{head}\,T\,B\,b$",
          number="Llama 2 7B in fp16: 2 x 32 x 32 x 128 x 2 bytes = 0.5 MiB per token, 2 GiB per 4k-token sequence",
          longer_answer="Training is parallel because no layer reads its own outputs at earlier positions. Without "
                        "the mask position $t$ reads token $t+1$: the training loss falls far below the entropy of "
                        "the language, and the model then generates mostly impossible text, since at generation time "
                        "there is no next token to read. Trained on true prefixes but run on its own, a model meets "
                        "contexts it never saw in training: exposure bias (Ranzato et al. 2016). Greedy and beam "
                        "search follow the most probable tokens and avoid the unreliable tail, but in long open-ended "
                        "text they can get stuck in repetitive loops (Holtzman et al. 2020); sampling reproduces the "
                        "model, errors included, and top-k or top-p trades some errors for less diversity. The cache "
                        "holds "
                        r"$2 \times \text{layers} \times \text{kv\_heads} \times d_{head} \times T \times \text{bytes}$: "
                        "0.5 MiB per token for Llama 2 7B in fp16, so 16 GiB at batch 8 and 4k context, more than its "
                        "weights. MQA and GQA share keys and values across query heads, shrinking the cache by "
                        r"$n_{heads}/n_{kv\_heads}$; for MQA Shazeer (2019) reports only minor quality degradation."),
    Entry("13_attention_vs_recurrence.ipynb",
          "Why did attention replace recurrence?",
          "Three rows of Vaswani et al.'s Table 1. Path length: a recurrent layer passes a token's signal through "
          "one state update per step, so its gradient is a product of d Jacobians, while self-attention links every "
          "pair of tokens directly. Sequential operations: O(n) against O(1), so training is parallel over "
          "positions. The price: O(n^2 d) per layer.",
          "temperature and query of a soft dictionary lookup; n and d of Table 1's cost",
          formula=r"$\partial h_t/\partial h_{t-d}=\prod_{i=0}^{d-1}\partial h_{t-i}/\partial h_{t-i-1}$; per layer $O(n^2 d)$ vs $O(n d^2)$",
          number="path length O(1) vs O(n), sequential operations O(1) vs O(n) (Vaswani et al. 2017, Table 1)",
          longer_answer=("For a tanh RNN the product of Jacobians shrinks or grows geometrically with the distance; gated "
                         "cells keep it near 1 only while their gates hold the state, and at PyTorch's default initialisation "
                         "they do not: here it shrinks by a factor of 0.55-0.72 per step, so 256 steps back it is more than "
                         "$10^{36}$ times smaller than at the previous token. How fast it decays is a setting of the gate "
                         "biases: chrono gates hold it near 0.99 per step. On a recall task this notebook measures the steps "
                         "each model needs against the distance. Training is parallel because no attention layer's output at "
                         "position $t$ depends on that layer's own outputs at earlier positions; an RNN's $h_t$ needs "
                         "$h_{t-1}$. Generation is sequential for both, and per token attention costs $O(t\\,d)$ with a growing "
                         "cache, an RNN a constant. Counted as whole layers, attention costs more FLOPs than a tanh RNN at "
                         "every length, more than a GRU ($12nd^2$) once $n > d$ and more than an LSTM ($16nd^2$) once $n > "
                         "2d$.")),
    Entry("14_cross_attention.ipynb",
          "Encoder-decoder: where do cross-attention's K and V come from, and what does it look at?",
          "Queries come from the decoder; keys and values from the memory, the encoder's final output, which every "
          "decoder layer reads through its own W_K, W_V (Vaswani et al. 2017, secs. 3.1 and 3.2.3). The memory is "
          "fixed while decoding, so its keys and values are computed once and cached. Cross-attention has no causal "
          "mask; where it looks is learned.",
          "decoder layer, head and sentence of a trained model; source/target lengths and source padding of the "
          "three masks; label smoothing's eps and vocabulary size",
          formula=r"$K_\ell = M\,W^K_\ell,\ V_\ell = M\,W^V_\ell$ with $M=\mathrm{Encoder}(x)$ for every decoder layer $\ell$",
          number="label smoothing 0.1: dev perplexity 4.67 -> 4.92, BLEU 25.3 -> 25.8 (Vaswani et al. 2017, Table 3 row D)",
          longer_answer="So decoder layer 3 does not read encoder layer 3: every layer reads the same $(B, S, d)$ "
                        "memory and projects it differently. The original model has three attentions: encoder "
                        "self-attention (every source token sees every source token, pads hidden), masked decoder "
                        r"self-attention (target position $i$ sees positions $\le i$) and cross-attention (every "
                        "target position sees every real source position; in offline seq2seq the whole source is "
                        "known before decoding starts). In this notebook's toy encoder-decoder trained to reverse its "
                        "input, a cross-attention head puts more than 85% of its mass on the aligned source position "
                        "in every seed, and given another sentence's memory the decoder writes that sentence's "
                        "reversal. Two output-layer choices of the original model come with it: label smoothing "
                        r"($\epsilon = 0.1$, sec. 5.4) makes perplexity worse (4.67 → 4.92, Table 3 row D) but "
                        r"improves BLEU, and weight tying (sec. 3.4) shares one $V \times d$ matrix among the "
                        "embeddings and the output layer."),
    Entry("15_tokenization.ipynb",
          "Tokenization: why subwords, and what does the vocabulary size trade?",
          "A word-level vocabulary maps every unseen word to [UNK]. Subwords spell any word out of pieces, so only "
          "unseen characters can produce [UNK]; byte-level BPE, built on the 256 bytes, has none. The size then "
          "trades sequence length against parameters: a bigger vocabulary gives fewer tokens per word but a larger V "
          "x d table, 21.4% of BERT-base's parameters.",
          "a typed sentence, split by every trained tokenizer and MiniLM's WordPiece, at each vocabulary size; "
          "the vocabulary size, width and tying, against the table's share and the tokens per word",
          formula=r"$n = \mathrm{words} \times \mathrm{tokens/word}(V)$, attention scores $\propto n^2$ (the rest $\propto n$), table $= V d$",
          number="BERT-base: 30,522 x 768 = 21.4% of its 109,482,240 parameters (from the config's shapes)",
          longer_answer="A word list keeps the most frequent training words, and held-out text brings words it never "
                        "had: trained here on Python's own documentation, a word-level vocabulary still maps more "
                        "than 1% of held-out words to `[UNK]` with every training word kept. WordPiece, BPE and "
                        "unigram vocabularies keep the `[UNK]` rate near zero at every size, and BERT's WordPiece "
                        "drops a whole word when one of its characters is unknown. A bigger vocabulary gives fewer "
                        "tokens per word, with diminishing returns. Only the attention scores fall with the square of "
                        "the length; at BERT-base's sizes the projections and the FFN cost far more per token, so "
                        r"compute falls about linearly. The table grows as $V \times d$: BERT-base's "
                        r"$30{,}522 \times 768$ is 21.4% of its parameters, an untied output layer adds as many again, "
                        r"and any output layer costs $V \cdot d$ multiply-adds per predicted token. In the library "
                        "used here, WordPiece and BPE train alike (merges by pair frequency, the same pieces); they "
                        "differ in how they encode: WordPiece by greedy longest match with `##` continuations, BPE by "
                        "replaying its merges."),
    Entry("16_objectives.ipynb",
          "BERT, GPT or T5: what does the training objective buy?",
          "They differ in what each position may see and what carries a loss: BERT's masked LM predicts 15% of the "
          "positions from both sides, GPT's causal LM every next token from the left, and T5's decoder writes the "
          "spans that sentinels replaced. Bidirectional encoders suit classification and tagging; generation needs "
          "p(next | prefix), which a causal decoder gives directly.",
          "objective, masking or noise rate, T5's mean span and the length of one corrupted sequence; training signals "
          "and FLOPs per sequence",
          formula=r"$\mathcal{L}_{MLM}=-\sum_{t\in M}\log p(x_t\mid\tilde x)$, $\mathcal{L}_{LM}=-\sum_t\log p(x_t\mid x_{<t})$",
          number="T5: noise_density 0.15, mean_noise_span_length 3.0 (t5 code, span_corruption)",
          longer_answer=("BERT corrupts 15% of the positions (80% [MASK], 10% random, 10% unchanged) and predicts only those; "
                         "GPT's causal LM predicts every next token from the left context alone; T5's span corruption (noise "
                         "density 0.15, mean span length 3 in its code) hides spans from a bidirectional encoder and has a "
                         "causal decoder write only the spans. So BERT and T5 put a loss on about 15% of the tokens, GPT on "
                         "all of them. ELECTRA keeps the bidirectional encoder but labels every token original or replaced, so "
                         "it learns from all of them. In this notebook's toy, a masked LM that learned its task holds the "
                         "token to its right where a linear probe can read it, which the causal model's mask forbids; in "
                         "return the causal model predicts the next token far better than the masked model can through an "
                         "appended [MASK], an input it never saw in training. The small T5 learned to read its encoder only "
                         "after a long plateau, several times the masked LM's budget.")),
    Entry("17_fine_tuning.ipynb",
          "Fine-tuning: what does [CLS] carry, and why does question answering not use it?",
          "[CLS] is one more position: its last-layer vector holds whatever attention mixed into it, and BERT's "
          "classifier adds only a matrix W on top (Devlin et al. 2019, sec. 4.1). An answer is a position, so "
          "BERT's SQuAD head scores every token with a start and an end vector, S.T_i + E.T_j. Fine-tune at 2e-5 to "
          "5e-5 for 2-4 epochs.",
          "the learning rate and the layers trained, against what each layer moved; the span head or the [CLS] head "
          "on a held-out question",
          formula=r"class: $\mathrm{softmax}(C W^{\top})$; span: $\arg\max_{j \geq i}\, S\cdot T_i + E\cdot T_j$",
          number="BERT app. A.3: learning rate 5e-5, 3e-5 or 2e-5, batch 16 or 32, 2-4 epochs",
          longer_answer=("all-MiniLM-L6-v2 was trained to output the *mean* of its tokens, not [CLS], yet a linear probe reads "
                         "this notebook's sentence-pair relation from its frozen [CLS] vector as well as from the mean, while "
                         "an encoder that was never pretrained lets the same probe read little. Holding information is not the "
                         "same as being a good sentence embedding. For a span, each token judges itself with the same two "
                         "vectors; a head that must write the position from [CLS] alone found the exact answer far less often. "
                         "Merchant et al. (2020) report that fine-tuning mostly changes BERT's top layers. Here, training all "
                         "six layers (the embeddings frozen), the top layer's *output* moved most at every budget; its "
                         "*weights* moved like the others' in the first 20 steps, and over 1.4 times the bottom layer's at "
                         "BERT's recipe. A run that learns the task also loses part of what pretraining built, on text the "
                         "task never showed: more with longer training and higher rates. At 33x BERT's rate most runs "
                         "collapsed. Freezing the lower layers kept more at a moderate rate.")),
    Entry("18_attention_explanation.ipynb",
          "Is attention an explanation?",
          "Not by itself. An attention weight says what was mixed into one position in one layer, not whether "
          "the output depends on it. Jain & Wallace: attention often disagrees with gradients, and different "
          "attention can give the same prediction. Wiegreffe & Pinter: that does not make attention "
          "meaningless; test it. To test a word, replace it and watch the output.",
          "a sentence and a reference you type, six attributions on MiniLM side by side; the adversarial bound on "
          "|delta p| and the sentence",
          formula=r"rollout $R=\prod_\ell \frac{1}{2}(\bar P_\ell+I)$; IG $(x-x')\cdot\int_0^1\nabla f(x'+\alpha(x-x'))\,d\alpha$",
          number="JSD between two distributions is at most ln 2 = 0.693 nats",
          longer_answer=("Attention is a cheap hypothesis about what mattered; a test of it must go through "
                         "the output. Erasure removes a token and measures the change in the prediction; "
                         "integrated gradients (Sundararajan et al. 2017) attribute the output along a path "
                         "from a baseline, and must be checked for completeness. Rollout (Abnar & Zuidema "
                         "2020) multiplies the layers' $(P + I)/2$ but still reads only attention. Jain & "
                         "Wallace and Wiegreffe & Pinter studied a BiLSTM's attention; here it is a "
                         "Transformer's. The notebook trains a toy whose label is set by one key token, and "
                         "asks the model which keys it uses: a key is *decisive* if replacing it flips the "
                         "prediction. Most models learned a default class whose key they ignore. Erasure and "
                         "integrated gradients found the decisive keys and ignored the unused ones. Last-layer "
                         "attention often missed the decisive key; the layer mean and rollout found it, but "
                         "also pointed at keys the model ignores. MiniLM with a planted word is the real-model "
                         "check.")),
    Entry("19_long_context.ipynb",
          "Why is BERT capped at 512 tokens, and how do sparse attention patterns get past it?",
          "BERT learns one position vector per position, and its table has 512 rows: token 513 has none. It trained at 128 tokens for 90% of its steps, at 512 for the rest, because attention's $n\\times n$ scores make long inputs expensive. Sparse patterns score each token against a window, global tokens and random keys: $O(n\\,w)$ scores instead of $n^2$.",
          "the pattern (window, global tokens, random keys, layers) and where token 1 reaches; the cost of scores "
          "against the rest of a layer",
          formula=r"full: $n^2$ scores; window $\pm r$: $n(2r+1)$; reach after $L$ layers: $L\,r$; via a global token: 2 hops",
          number="BERT, Appendix A.2: length 128 for 90% of the steps, 512 for the rest, 'to learn the positional embeddings'",
          longer_answer=("The 512 is the size of a table. BERT adds a learned vector for each position, and its checkpoint holds 512 rows (MiniLM's too, checked here). BERT trained at 128 tokens for 90% of its steps and at 512 for the rest, citing attention's quadratic cost (Appendix A.2). Yet at 512 the $n\\times n$ products are about a tenth of a BERT-base layer's multiply-adds ($n/6d$); what grows fastest is the memory of the stored scores, which a fused kernel such as FlashAttention removes while the FLOPs stay $2n^2d$. Longformer and BigBird cut the arithmetic itself: a sliding window, global tokens such as [CLS], and in BigBird random keys, $O(n)$ scores for fixed sizes, with position rows trained on long documents. A window of $\\pm r$ moves information $r$ positions per layer; a global token joins any two positions in two layers. In this notebook's toy, two windowed layers learned exactly the 8 positions their mask reaches, and a window plus [CLS] carried a token 31 positions in two layers, though not in every seed.")),
    Entry("20_patches_as_tokens.ipynb",
          "Can a Transformer read an image? Patches as tokens",
          "Yes, if a token is a patch. ViT cuts the image into 16x16 patches, maps each linearly to one vector, adds learned position vectors and a [CLS] token, and runs a standard encoder: 196 tokens at 224x224, where pixels would give 50,176, and $n^2$ scores. Without a CNN's locality it trailed ResNets on ImageNet, and led with 14M-300M images.",
          "a digit cut into patches and where a trained ViT's [CLS] looks; tokens, score entries and the scores' share "
          "of a layer against the patch size; which patches a position table treats as neighbours",
          formula=r"$n = HW/p^2$ tokens, $n^2$ scores per head; ViT-B/16 at $224^2$: $n = 196$",
          number="ViT (Dosovitskiy et al. 2021), sec. 4.3, Fig. 3: behind BiT ResNets when pre-trained on ImageNet, ahead after JFT-300M",
          longer_answer='A picture of $H\\times W$ pixels cut into $p\\times p$ patches is $n = HW/p^2$ tokens, and attention scores $n^2$ pairs per head and layer: halving $p$ multiplies them by 16. ViT (Dosovitskiy et al. 2021, sec. 3.1) maps each flattened patch with one shared matrix (a strided convolution), prepends a learned [CLS] token whose final state is classified, and adds a learned 1-D position table. Attention ignores order: without positions a ViT reads a bag of patches, unchanged by any shuffle. The learned rows come to mirror the 2-D grid (Fig. 7), and 2-D-aware tables did about as well (Appendix D.4). A CNN builds in locality and translation equivariance; a ViT must learn them, which costs data: pre-trained on ImageNet it trailed BiT ResNets, on JFT-300M it led (sec. 4.3). On 8x8 digits, pixels as tokens cost over twice the time per step and were no more accurate than 2x2 patches; dropping positions cost a quarter of the accuracy; the learned table moved toward the grid; a CNN of the same size led from 100 to 1,300 images, by less as they grew.'),
]


def available() -> list[Entry]:
    return [e for e in CATALOG if e.exists]


def demo_factories() -> dict[str, list]:
    """{notebook stem: [demo factory, ...]}: the DEMOS of each entry's demos module. Imports every topic: call it
    from tests and tools, not at import time."""
    return {entry.file.removesuffix(".ipynb"): list(importlib.import_module(entry.demos).DEMOS) for entry in CATALOG}
