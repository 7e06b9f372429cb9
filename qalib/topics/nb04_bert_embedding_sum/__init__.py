"""Notebook 04, notebooks/04_bert_embedding_sum.ipynb: the code it calls.

    compute     Why BERT can add its token, segment and position embeddings.
    experiment  The pretrained tables (subspaces, probes, TUPE's four score terms), and summed vs concatenated-and-
                projected embeddings trained on a sentence-pair task.
    demos       pair_demo, probe_demo (DEMOS)
"""
