"""Notebook 09, notebooks/09_attention_random_walk.ipynb: the code it calls.

    compute     Attention as a Markov chain, the Gaussian-kernel identity, and rank collapse.
    experiment  Rank collapse in a trained mini-BERT and in all-MiniLM-L6-v2.
    demos       markov_demo, collapse_demo (DEMOS)
"""
