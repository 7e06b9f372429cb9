"""Notebook 13, notebooks/13_attention_vs_recurrence.ipynb: the code it calls.

    compute     Why attention replaced recurrence (path length, sequential steps, cost per layer, soft lookup).
    experiment  A GRU and a one-layer attention model trained on MarkedRecall at each distance.
    demos       lookup_demo, cost_demo (DEMOS)
"""
