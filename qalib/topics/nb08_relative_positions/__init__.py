"""Notebook 08, notebooks/08_relative_positions.ipynb: the code it calls.

    compute     How do relative position embeddings work?
    experiment  Clip sweep, length extrapolation, the seed paper's observations, costs.
    demos       bias_demo, rotary_demo, slopes_demo (DEMOS)
"""
