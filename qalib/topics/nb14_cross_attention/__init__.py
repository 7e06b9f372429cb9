"""Notebook 14, notebooks/14_cross_attention.ipynb: the code it calls.

    compute     The encoder-decoder's three attentions, where cross-attention's K and V come from, label smoothing.
    experiment  Reversal models (tied / untied, with / without label smoothing), what their cross-attention looks
                at, what their memory holds, and what breaks when the memory is tampered with.
    demos       masks_demo, smoothing_demo, alignment_demo (DEMOS)
"""
