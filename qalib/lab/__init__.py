"""The laboratory: data with known truth, training, seeds and the statistics the experiments report.

    data          -- synthetic tasks with known ground truth, BERT's masking
    train         -- fit: the one training loop (AdamW, warm-up and decay, clipping, logging); train: fit on a task
    train_batched -- train_seeds: one model per seed, all trained as one batched computation (torch.func)
    stacked       -- the batched computation for any models of one architecture (what train_seeds runs on)
    gate          -- learned(): did a run beat a stated baseline by a stated margin? (nothing is read from one that did not)
    reference     -- reference runs: their specs (budget ladder, seeds) and their stored files (references/)
    presets       -- small settings that train in seconds on 2 CPU cores
    probes        -- linear probes: can a linear map read a property out of vectors?
    parallel      -- independent runs (seeds, variants) on every CPU core at once
    fits          -- power laws fitted to measured curves (the exponent of time against length)
    stats         -- statistics over seeds: the paired 95% interval a 'no difference' statement needs; binomial tolerance
    language_truth -- a synthetic language's known next-token distribution, and text judged against it (12, 16)
    seeding       -- seeds(n), seed(i), scale(device): the one seed source (QALIB_SEED_OFFSET, QALIB_SCALE)
    device        -- get_device(): CUDA, then MPS, then CPU (QALIB_DEVICE overrides); describe()

May import: torch, numpy, qalib.nn. No plotting, no widgets (tests/test_layers.py).
"""
