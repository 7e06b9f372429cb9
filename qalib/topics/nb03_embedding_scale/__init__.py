"""Notebook 03, notebooks/03_embedding_scale.ipynb: the code it calls.

    compute     Why does the original Transformer multiply its embeddings by sqrt(d_model)?
    experiment  Train with and without sqrt(d_model); read the pretrained MiniLM's tables.
    demos       setting_demo, factor_demo, tied_demo (DEMOS)
"""
