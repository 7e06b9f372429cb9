"""Notebook 15's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.nn.validate import choice
from qalib.notebook.widgets import Demo
from qalib.topics.nb15_tokenization.compute import pieces_view, plot_pieces, plot_table_tradeoff, table_tradeoff
from qalib.topics.nb15_tokenization.experiment import DEMO_TEXT, Sweep, small_sweep


def tokenizer_demo(sweep: Sweep | None = None, real_tokenizer=None) -> Demo:
    """Type a sentence; see its pieces under every trained tokenizer at the chosen size (and under the real model's
    WordPiece, if given), with the token counts. The tokenizers are trained once, before: the callback only encodes.
    Without a sweep, a small one (two sizes) is trained once per process (for the tests and the benchmark)."""

    sweep = sweep if sweep is not None else small_sweep()

    def compute(text: str, size: int) -> dict:
        size = choice("size", size, sweep.sizes)
        chosen = {kind: sweep.tokenizers[(kind, size)] for kind in sweep.kinds}
        if real_tokenizer is not None:
            chosen["MiniLM (30,522)"] = real_tokenizer
        return pieces_view(text, chosen, caption=f"trained tokenizers asked for {size:,} entries")

    controls = {"text": W.Text(value=DEMO_TEXT, description="sentence", layout=W.Layout(width="60%")),
                "size": W.Dropdown(options=list(sweep.sizes), value=sweep.sizes[len(sweep.sizes) // 2],
                                   description="size asked")}
    return Demo(compute, plot_pieces, controls, title="One sentence, every tokenizer", figsize=(10, 3.2))


def table_demo(sweep: Sweep | None = None) -> Demo:
    """Move the vocabulary size and the width: the word table's share of a 12-layer BERT-style model, and the
    tokens per word WordPiece measured near that size (the sweep's sizes; without one, the small sweep's)."""

    sweep = sweep if sweep is not None else small_sweep()
    tpw = sweep.tokens_per_word["wordpiece"].mean(1)

    def compute(vocab_size: float, d: int, tied: bool) -> dict:
        return table_tradeoff(int(round(vocab_size)), d, tied, sweep.sizes, tpw)

    controls = {"vocab_size": W.FloatLogSlider(value=30522, base=2, min=8, max=18, step=0.5,
                                               description="vocabulary size", readout_format=",d"),
                "d": W.Dropdown(options=[128, 256, 384, 768, 1024, 4096], value=768, description="width d"),
                "tied": W.Checkbox(value=True, description="output layer tied to the table")}
    return Demo(compute, plot_table_tradeoff, controls, title="The table against the body, and the sequence length",
                figsize=(10, 3.4))


DEMOS = [tokenizer_demo, table_demo]
