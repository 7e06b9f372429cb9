"""Notebook 06, notebooks/06_layernorm_vs_batchnorm.ipynb: the code it calls.

    compute     Why LayerNorm and not BatchNorm? The concepts, and the views behind the two demos.
    experiment  The mini-BERT trained with each norm on padded masked-LM batches, Post-LN vs Pre-LN gradients at
                initialisation, and the LayerNorms of the pretrained MiniLM.
    demos       padding_demo, running_stats_demo (DEMOS)
"""
