"""Notebook 10, notebooks/10_residuals_ffn_masks.ipynb: the code it calls.

    compute     Residual connections, the feed-forward layer, masking and the cost of attention.
    experiment  A deep mini-BERT with and without residuals; MiniLM's blocks.
    demos       cost_demo, mask_demo, residual_demo (DEMOS)
"""
