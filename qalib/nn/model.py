"""The mini-BERT: embeddings -> encoder layers -> heads, with a config switch for every design choice.

Ordered like the architecture diagram. Module names follow BERT's where BERT has a name, so loading
a real checkpoint is one mapping (qalib/nn/pretrained.py).

    model = MiniBert(MiniBertConfig())
    out = model(input_ids, token_type_ids, attention_mask, return_internals=True)
    out.last_hidden_state            # (B, T, d)
    out.internals["layer0.probs"]    # (B, H, T, T), attention probabilities before dropout

Without internals the attention runs through torch's fused scaled_dot_product_attention; with them,
through qalib.nn.attention.attention, which returns scores and probabilities. tests/test_model.py
checks that both paths agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from qalib.nn.attention import attention
from qalib.nn.config import MiniBertConfig, NormPlacement
from qalib.nn.norms import make_norm
from qalib.nn.positions import ABSOLUTE_POSITIONS, RELATIVE_POSITIONS, make_position
from qalib.nn.validate import int_in

__all__ = ["MiniBertConfig", "MiniBert", "MiniBertOutput", "Embeddings", "SelfAttention", "FeedForward", "EncoderLayer",
           "residual"]


@dataclass
class MiniBertOutput:
    last_hidden_state: torch.Tensor                    # (B, T, d)
    internals: dict[str, torch.Tensor] = field(default_factory=dict)  # empty unless return_internals=True
    # empty unless output_hidden_states=True: the embeddings' output, then each layer's output, (B, T, d) each
    # (as in Hugging Face's BERT; the same tensors as internals "embeddings.out", "layer{i}.hidden")
    hidden_states: tuple[torch.Tensor, ...] = ()


class Embeddings(nn.Module):
    """word + segment + position (BERT sec. 3, Fig. 2), then norm and dropout, in BERT's order."""

    def __init__(self, cfg: MiniBertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.word_embeddings = nn.Embedding(cfg.vocab_size, d)
        self.token_type_embeddings = nn.Embedding(cfg.n_segments, d)
        # an absolute scheme adds its table here; a relative one acts inside attention (SelfAttention.position)
        self.position_embeddings = make_position(cfg) if cfg.pos in ABSOLUTE_POSITIONS else None
        if cfg.embed_combine == "concat":
            self.combine = nn.Linear(3 * d, d)  # [word | segment | position] -> d
        self.norm = make_norm(cfg.norm if cfg.embed_norm else "none", d, cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        # Original Transformer (sec. 3.4) multiplies the (tied) embedding weights by sqrt(d_model); BERT does not.
        self.word_scale = math.sqrt(d) if cfg.embed_scale == "sqrt_d" else 1.0

    def position_table(self, t: int, device) -> torch.Tensor:
        """(T, d) absolute position vectors, or zeros when positions enter inside attention (relative)."""
        if self.position_embeddings is None:
            return torch.zeros(t, self.cfg.d_model, device=device)
        return self.position_embeddings.table(t, device)

    def forward(self, input_ids, token_type_ids, keep, internals=None):
        t = input_ids.shape[1]
        word = self.word_embeddings(input_ids) * self.word_scale  # (B, T, d)
        segment = self.token_type_embeddings(token_type_ids)       # (B, T, d)
        position = self.position_table(t, input_ids.device).to(word.dtype).expand_as(word)  # (B, T, d)
        if self.cfg.embed_combine == "sum":
            summed = word + segment + position
        else:
            summed = self.combine(torch.cat([word, segment, position], dim=-1))  # (B, T, 3d) -> (B, T, d)
        out = self.dropout(self.norm(summed, keep, internals, "embeddings.norm"))
        if internals is not None:
            internals.update({"embeddings.word": word, "embeddings.segment": segment, "embeddings.position": position,
                              "embeddings.sum": summed, "embeddings.out": out})
        return out


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused input projection ([q | k | v], or [q | v] when q and k are shared).

    With n_kv_heads < n_heads (MQA, GQA) k and v have n_kv_heads heads, each serving n_heads / n_kv_heads query
    heads. The steps are methods the decoder's attentions reuse (qalib/nn/decoder.py): project -> (positions) -> attend.
    The blocks of the fused projection are w_q, w_k, w_v and b_q, b_k, b_v: views of qkv.weight and qkv.bias, so
    reading W_q needs no slicing by hand (split_qkv does the same for a gradient).
    """

    def __init__(self, cfg: MiniBertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_proj = 2 if cfg.qk == "shared" else 3
        # the widths of [q | k | v]: n_heads query heads, then kv_heads key and value heads, d_head each
        self.widths = [cfg.d_model] + [cfg.kv_heads * cfg.d_head] * (self.n_proj - 1)
        self.qkv = nn.Linear(cfg.d_model, sum(self.widths))
        self.output = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout_p = cfg.dropout
        # a relative scheme, one per layer: (q, k, scale) -> (q, k, bias); absolute ones live in Embeddings
        self.position = make_position(cfg) if cfg.pos in RELATIVE_POSITIONS else None

    # -- the fused projection's blocks, as views ------------------------------------------------------------------
    def split_qkv(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Any tensor laid out like qkv.weight (rows, d) or qkv.bias (rows,), e.g. qkv.weight.grad -> its row blocks
        (q, k, v), views of t: q (d, ...), k and v (H_kv * dh, ...). With qk="shared" the rows are [q | v] and k is q
        (W_k = W_q), as project() returns them."""
        if t.dim() == 0 or t.shape[0] != sum(self.widths):
            raise ValueError(f"split_qkv needs a tensor shaped like qkv.weight or qkv.bias: dim 0 of size "
                             f"{sum(self.widths)} (the rows {self.widths}), got {tuple(t.shape)}")
        # split along dim 0: views (narrow), so they share t's storage and a gradient through them reaches t
        parts = t.split(self.widths, dim=0)
        if self.n_proj == 2:
            q, v = parts
            return q, q, v
        q, k, v = parts
        return q, k, v

    @property
    def w_q(self) -> torch.Tensor:
        """(d, d): W_q, rows [0, d) of qkv.weight; q = x @ w_q.T + b_q."""
        return self.split_qkv(self.qkv.weight)[0]

    @property
    def w_k(self) -> torch.Tensor:
        """(H_kv * dh, d): W_k, the rows after W_q; with qk="shared", W_q itself."""
        return self.split_qkv(self.qkv.weight)[1]

    @property
    def w_v(self) -> torch.Tensor:
        """(H_kv * dh, d): W_v, the last rows of qkv.weight."""
        return self.split_qkv(self.qkv.weight)[2]

    @property
    def b_q(self) -> torch.Tensor | None:
        """(d,): the query bias, or None when qkv has no bias."""
        return None if self.qkv.bias is None else self.split_qkv(self.qkv.bias)[0]

    @property
    def b_k(self) -> torch.Tensor | None:
        """(H_kv * dh,): the key bias (b_q with qk="shared"), or None when qkv has no bias."""
        return None if self.qkv.bias is None else self.split_qkv(self.qkv.bias)[1]

    @property
    def b_v(self) -> torch.Tensor | None:
        """(H_kv * dh,): the value bias, or None when qkv has no bias."""
        return None if self.qkv.bias is None else self.split_qkv(self.qkv.bias)[2]

    # -- the forward pass's steps --------------------------------------------------------------------------------
    def split_heads(self, y: torch.Tensor) -> torch.Tensor:
        """(B, T, n * d_head) -> (B, n, T, d_head), a view."""
        b, t, _ = y.shape
        return y.view(b, t, -1, self.cfg.d_head).transpose(1, 2)

    def project(self, x: torch.Tensor):
        """(B, T, d) -> q (B, H, T, dh), k and v (B, H_kv, T, dh): views into one fused projection."""
        # split, not indexing: its backward concatenates the gradients in one pass
        parts = [self.split_heads(p) for p in self.qkv(x).split(self.widths, dim=-1)]
        if self.n_proj == 2:
            q, v = parts
            return q, q, v  # shared W_q = W_k: the score matrix is symmetric
        q, k, v = parts
        return q, k, v

    def forward(self, x, keep, internals=None, name="attention"):
        cfg = self.cfg
        t = x.shape[1]
        q, k, v = self.project(x)
        bias = None
        if self.position is not None:
            q, k, bias = self.position(q, k, cfg.scale)
        mask = self._mask(keep, t, t, x.device)  # (B, 1, T, T) bool, True = may attend; None = everything
        return self.attend(q, k, v, mask, bias, internals, name)

    def attend(self, q, k, v, mask, bias=None, internals=None, name="attention"):
        """q (B, H, T_q, dh); k, v (B, H_kv, T_k, dh); mask (B, 1, T_q, T_k) bool or None -> (B, T_q, d).

        internals=None runs torch's fused kernel; a dict runs qalib.nn.attention.attention and stores q, k, v (k and v
        with their H_kv heads, as a KV cache holds them), scores and probabilities under `name`."""
        cfg = self.cfg
        b, _, t, _ = q.shape
        # (B, H, T_k, dh): each query head's keys and values. A transient copy under MQA/GQA; what is kept between
        # decoding steps (the KV cache) has H_kv heads, which is where MQA/GQA save memory
        k_all, v_all = repeat_kv(k, cfg.n_heads), repeat_kv(v, cfg.n_heads)
        if internals is None:
            attn_mask = mask
            if bias is not None:  # fold the bias into a float mask: one fused kernel handles both
                attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(
                q, k_all, v_all, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0, scale=cfg.scale
            )  # (B, H, T, dh)
        else:
            res = attention(q, k_all, v_all, mask=mask, scale=cfg.scale, bias=bias)
            probs = F.dropout(res.probs, self.dropout_p, self.training)
            out = torch.matmul(probs, v_all)  # (B, H, T, dh)
            internals[f"{name}.q"], internals[f"{name}.k"], internals[f"{name}.v"] = q, k, v
            internals[f"{name}.scores"], internals[f"{name}.probs"] = res.scores, res.probs
        out = out.transpose(1, 2).reshape(b, t, cfg.d_model)  # (B, H, T, dh) -> (B, T, d)
        return self.output(out)

    def _mask(self, keep, t_q, t_k, device):
        """(B, 1, T_q, T_k) bool, or None when nothing is masked (lets the fused kernel skip the mask).
        The queries are the last T_q of the T_k positions (T_q < T_k when earlier keys come from a KV cache)."""
        causal = self.cfg.causal and t_q > 1  # a single query, the newest position, may see every key
        if keep is None and not (causal or self.cfg.mask_self):
            return None
        mask = torch.ones(1, 1, 1, t_k, dtype=torch.bool, device=device) if keep is None else keep[:, None, None, :]
        q_pos = torch.arange(t_k - t_q, t_k, device=device)[:, None]  # (T_q, 1)
        k_pos = torch.arange(t_k, device=device)[None, :]              # (1, T_k)
        if causal:
            mask = mask & (k_pos <= q_pos)
        if self.cfg.mask_self:
            mask = mask & (k_pos != q_pos)
        return mask.expand(-1, 1, t_q, t_k)  # padding keys (and future / self, if asked) are never attended


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, H_kv, T, dh) -> (B, n_heads, T, dh): key/value head j serves query heads j*g .. j*g + g - 1,
    g = n_heads / H_kv (the grouping of Ainslie et al. 2023 and of HF's repeat_kv). The input itself when H_kv = n_heads."""
    b, h_kv, t, dh = x.shape
    if h_kv == n_heads:
        return x
    return x[:, :, None].expand(b, h_kv, n_heads // h_kv, t, dh).reshape(b, n_heads, t, dh)


# MiniBertConfig.activation -> the FFN's nonlinearity
ACTIVATIONS = {
    "gelu": F.gelu,                                # BERT's exact (erf) GELU
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's "gelu_new" (Hendrycks & Gimpel's tanh form)
    "relu": F.relu,                                # Vaswani et al. 2017, eq. 2
}


class FeedForward(nn.Module):
    def __init__(self, cfg: MiniBertConfig) -> None:
        super().__init__()
        self.intermediate = nn.Linear(cfg.d_model, cfg.d_ff)
        self.output = nn.Linear(cfg.d_ff, cfg.d_model)
        self.activation = ACTIVATIONS[cfg.activation]

    def forward(self, x):
        return self.output(self.activation(self.intermediate(x)))


def residual(x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor], norm: nn.Module, *,
             dropout: nn.Module, placement: NormPlacement, add_input: bool = True, keep: torch.Tensor | None = None,
             internals: dict[str, torch.Tensor] | None = None, name: str = "") -> torch.Tensor:
    """One sublayer f (attention, cross-attention or FFN) with its dropout, residual connection and norm: the wiring
    of every sublayer of EncoderLayer and of DecoderLayer (qalib/nn/decoder.py). x (B, T, d) -> (B, T, d).

        placement="post" (BERT, Vaswani et al. 2017):  norm(x + dropout(f(x)))
        placement="pre"  (GPT-2, Xiong et al. 2020):   x + dropout(f(norm(x)))

    add_input=False is the no-residual ablation (MiniBertConfig.residual): dropout(f(.)) without the `x +`.
    The norm reads keep ((B, T) bool, True at real tokens; a padding-aware norm leaves pads out) and records its
    statistics in internals under `name`."""
    if placement == "pre":
        h = dropout(sublayer(norm(x, keep, internals, name)))
        return x + h if add_input else h
    h = dropout(sublayer(x))
    return norm(x + h if add_input else h, keep, internals, name)


class EncoderLayer(nn.Module):
    """Self-attention, then the FFN, each wired by `residual`: post-norm (BERT, original Transformer)
    x = norm(x + sublayer(x)), or pre-norm (Xiong et al. 2020) x = x + sublayer(norm(x))."""

    def __init__(self, cfg: MiniBertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.attention = SelfAttention(cfg)
        self.attention_norm = make_norm(cfg.norm, cfg.d_model, cfg.layer_norm_eps)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = make_norm(cfg.norm, cfg.d_model, cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, keep, internals=None, name="layer0"):
        sublayer = partial(residual, dropout=self.dropout, placement=self.cfg.norm_placement,
                           add_input=self.cfg.residual, keep=keep, internals=internals)
        x = sublayer(x, lambda h: self.attention(h, keep, internals, name), self.attention_norm,
                     name=f"{name}.attention_norm")
        x = sublayer(x, self.ffn, self.ffn_norm, name=f"{name}.ffn_norm")
        if internals is not None:
            internals[f"{name}.hidden"] = x
        return x


class MiniBert(nn.Module):
    def __init__(self, cfg: MiniBertConfig) -> None:
        super().__init__()
        if not isinstance(cfg, MiniBertConfig):
            raise TypeError(f"MiniBert needs a MiniBertConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        d = cfg.d_model
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        # Pre-norm leaves the residual stream unnormalised: a final norm is standard (Xiong et al. 2020).
        self.final_norm = make_norm(cfg.norm if cfg.norm_placement == "pre" else "none", d, cfg.layer_norm_eps)
        # MLM head as in BERT: dense + GELU + norm, then the decoder tied to the word embeddings (+ bias).
        self.mlm_transform = nn.Linear(d, d)
        self.mlm_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        # Classification on [CLS] (position 0): BERT's pooler (dense + tanh), then a linear classifier.
        self.pooler = nn.Linear(d, d)
        self.classifier = nn.Linear(d, cfg.n_classes)
        self.apply(self._init_weights)
        if cfg.embed_init_std is not None:
            nn.init.normal_(self.embeddings.word_embeddings.weight, std=cfg.embed_init_std)

    def _init_weights(self, module):
        init_weights(module, self.cfg.init_std)

    # -- inputs --------------------------------------------------------------------------------
    def check_inputs(self, input_ids, token_type_ids=None, attention_mask=None):
        """forward's argument checks -> (token_type_ids, keep): token_type_ids a (B, T) tensor (zeros when None),
        keep (B, T) bool, True at real tokens, or None when every token is real (the fused kernel then skips the
        mask). ValueError naming the argument otherwise. forward_unchecked takes exactly these two values."""
        check_ids("input_ids", input_ids, self.cfg.vocab_size)
        b, t = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        elif token_type_ids.shape != input_ids.shape:
            raise ValueError(f"token_type_ids shape {tuple(token_type_ids.shape)} != input_ids shape {(b, t)}")
        elif int(token_type_ids.min()) < 0 or int(token_type_ids.max()) >= self.cfg.n_segments:
            raise ValueError(f"token_type_ids must lie in [0, n_segments={self.cfg.n_segments})")
        if attention_mask is None:
            keep = None  # every token is real
        else:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {(b, t)}")
            keep = attention_mask.bool()
            empty = (~keep.any(dim=1)).nonzero().flatten().tolist()
            if empty:
                raise ValueError(f"sequence(s) {empty} have attention_mask all 0: no real token to attend to")
            if keep.all():
                keep = None
        return token_type_ids, keep

    # -- forward -------------------------------------------------------------------------------
    def forward(self, input_ids, token_type_ids=None, attention_mask=None, return_internals=False,
                output_hidden_states=False, stop_at_layer: int | None = None) -> MiniBertOutput:
        """return_internals: every named intermediate (scores, probabilities, norm statistics; attention then runs
        unfused). output_hidden_states: only the residual stream after the embeddings and after each layer, on the
        fused path. stop_at_layer=n runs only layers 0 .. n-1 (0: the embeddings alone), then the final norm: the
        stack cut after n layers, with the same weights (as TransformerLens's stop_at_layer)."""
        token_type_ids, keep = self.check_inputs(input_ids, token_type_ids, attention_mask)
        n_run = self.cfg.n_layers
        if stop_at_layer is not None:
            n_run = int_in("stop_at_layer", stop_at_layer, 0, self.cfg.n_layers)
        return self.forward_unchecked(input_ids, token_type_ids, keep, return_internals, output_hidden_states, n_run)

    def forward_unchecked(self, input_ids, token_type_ids, keep, return_internals=False, output_hidden_states=False,
                          n_run: int | None = None) -> MiniBertOutput:
        """forward without its argument checks, for callers that checked the inputs themselves (check_inputs):
        token_type_ids a (B, T) long tensor, keep (B, T) bool or None (every token real), n_run the number of
        layers to run (None: all). The checks read tensor values on the host (.min(), .any()): a host-device sync
        on a GPU, and what torch.func.vmap cannot trace (qalib.lab.train_batched runs this under vmap)."""
        n_run = self.cfg.n_layers if n_run is None else n_run
        internals: dict[str, torch.Tensor] | None = {} if return_internals else None
        x = self.embeddings(input_ids, token_type_ids, keep, internals)
        hidden = [x]
        for i, layer in enumerate(self.layers[:n_run]):
            x = layer(x, keep, internals, f"layer{i}")
            hidden.append(x)
        x = self.final_norm(x, keep, internals, "final_norm")
        return MiniBertOutput(x, internals if internals is not None else {}, tuple(hidden) if output_hidden_states else ())

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, vocab): the decoder shares its weights with the word embeddings."""
        h = self.mlm_norm(F.gelu(self.mlm_transform(hidden)))
        return F.linear(h, self.embeddings.word_embeddings.weight, self.mlm_bias)

    def class_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, n_classes), from the [CLS] position."""
        return self.classifier(torch.tanh(self.pooler(hidden[:, 0])))

    def num_parameters(self, include_heads: bool = False) -> int:
        skip = () if include_heads else ("mlm_", "pooler", "classifier")
        return sum(p.numel() for n, p in self.named_parameters() if not n.startswith(skip))


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation (here plain normal, not truncated): weights N(0, std), biases 0. Use with model.apply."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def check_ids(name: str, ids, vocab_size: int) -> None:
    """A (B, T) long tensor of token ids in [0, vocab_size), not empty; otherwise ValueError naming `name`."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"{name} must be a (B, T) long tensor, got {getattr(ids, 'shape', type(ids))}")
    b, t = ids.shape
    if b == 0 or t == 0:
        raise ValueError(f"{name} is empty (shape {(b, t)}): there is nothing to encode")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name} must lie in [0, vocab_size={vocab_size}), got values in [{lo}, {hi}]")
