"""Notebook 01, notebooks/01_scaled_attention.ipynb: the code it calls.

    compute     Why divide q.k by sqrt(d_k) before the softmax? (Vaswani et al. 2017, sec. 3.2.1, footnote 4)
    experiment  Train a one-layer attention model with three logit scales on a retrieval task.
    demos       attention_demo, saturation_demo (DEMOS)
"""
