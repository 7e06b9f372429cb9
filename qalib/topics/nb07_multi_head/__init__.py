"""Notebook 07, notebooks/07_multi_head.ipynb: the code it calls.

    compute     Why do Transformers need several heads?
    experiment  A token task that needs two relations at once, trained with 1, 2, 4, 8 heads.
    demos       attention_demo, readout_demo, heads_demo (DEMOS)
"""
