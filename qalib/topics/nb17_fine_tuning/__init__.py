"""Notebook 17, notebooks/17_fine_tuning.ipynb: the code it calls.

    compute     What does [CLS] carry, and why does question answering not use it?": two tasks whose truth is known,
                built from MiniLM's own word pieces; the heads BERT puts on an encoder (a classifier on [CLS],
                BERT's span head, and a span head that reads [CLS] alone); BERT's fine-tuning recipe on the
                pretrained weights with the bottom layers frozen or not; and what a run moved (per-layer weight
                change, CKA to the start, the similarity structure of held-out text). Compute functions are pure.
    experiment  All-MiniLM-L6-v2 fine-tuned over seeds on the two tasks of qalib.topics.nb17_fine_tuning.compute.
    demos       movement_demo, span_demo (DEMOS)
"""
