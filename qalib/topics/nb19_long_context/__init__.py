"""Notebook 19, notebooks/19_long_context.ipynb: the code it calls.

    compute     Why is BERT capped at 512 tokens, and how do sparse attention patterns get past it?
    experiment  The first-token task under full, windowed, global and random patterns; its reference runs.
    demos       pattern_demo, cost_demo (DEMOS)
"""
