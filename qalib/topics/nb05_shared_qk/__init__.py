"""Notebook 05, notebooks/05_shared_qk.ipynb: the code it calls.

    compute     Why do queries and keys use different weight matrices?
    experiment  Train the mini-BERT on directed probe tasks with separate, shared and shared + self-masked
                (Reformer) query/key projections, over several seeds.
    demos       diagonal_demo, directed_demo (DEMOS)
"""
