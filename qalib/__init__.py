"""qalib: the shared library behind the notebooks. One purpose per module, one layer per folder; each package's
docstring is its map, and ARCHITECTURE.md says what may import what.

    nn/        -- the model: config, attention, positions, norms, MiniBert, decoders, KV cache, generation,
                  pretrained weights (torch only; what a reader compares with nanoGPT or HF's modeling_bert)
    lab/       -- experiments: synthetic data, training (one seed or many at once), presets, probes, seeds,
                  devices, fits and statistics over seeds
    notebook/  -- what a notebook stands on: claims (✓ ≡ ❝), drawing, widgets (Demo), style, the catalog
    practice/  -- drills, the quiz, the mock interview and its progress file, exercises
    topics/    -- one package per notebook (nb06_layernorm_vs_batchnorm/ for 06): compute, experiment, demos
    tools/     -- around the collection, imported by no lesson: notebook runner, site, slides, cheat sheet,
                  benchmarks, the robustness sweep, test helpers

`import qalib` gives the names every notebook's first cell uses: get_device, seeds, seed, scale, seed_everything,
check, check_all, check_close, the conditions a check takes (above, at_least, below, at_most, between), identity,
identity_close, quote, ClaimFailed, use_style.
"""

__version__ = "0.1.0"

from qalib.lab.device import get_device
from qalib.lab.seeding import scale, seed, seed_everything, seeds
from qalib.notebook.claims import (check, check_all, check_close, above, at_least, below, at_most, between, identity,
                                   identity_close, quote, ClaimFailed)
from qalib.notebook.style import use_style

__all__ = ["get_device", "seed_everything", "seeds", "seed", "scale", "check", "check_all", "check_close", "above", "at_least",
           "below", "at_most", "between", "identity", "identity_close", "quote", "ClaimFailed", "use_style", "__version__"]
