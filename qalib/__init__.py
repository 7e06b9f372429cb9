"""qalib: the shared library behind the notebooks.

Layout (one purpose per module):
    device, seeding, style   -- set-up helpers every notebook calls first
    claims                   -- `check(...)`: a claim in prose, verified by the cell right after it
    drawing                  -- matplotlib only: what a demo's update redraws (live artists, limits, labels, bars)
                                and the axes helpers plots share (log ticks, margins, seed bands)
    widgets                  -- `Demo`: compute function -> plot function -> ipywidgets controls
    testing                  -- for the tests and the benchmark: finite results, values to sweep a control over
    attention, positions, norms, model
                             -- the mini-BERT and its parts, one design choice per typed config field
    decoder, kv_cache, generate, gpt2
                             -- a GPT-style decoder and Vaswani's encoder-decoder from the same parts; the KV cache
                                as a value passed and returned; greedy / top-k / top-p / beam generation; the name
                                table to transformers.GPT2LMHeadModel
    pretrained               -- all-MiniLM-L6-v2 from the PyPI package, no network
    data, train              -- synthetic tasks with known ground truth; a small training loop
    topics/                  -- compute + plot + demo functions for each notebook
"""

__version__ = "0.1.0"

from qalib.device import get_device
from qalib.seeding import seed_everything
from qalib.claims import check, check_all, check_close, identity, identity_close, quote, ClaimFailed
from qalib.style import use_style

__all__ = ["get_device", "seed_everything", "check", "check_all", "check_close", "identity", "identity_close", "quote",
           "ClaimFailed", "use_style", "__version__"]
