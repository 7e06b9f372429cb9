"""Notebook 11, notebooks/11_mlm_and_nsp.ipynb: the code it calls.

    compute     BERT's pre-training objectives, masked-LM (15%, 80/10/10) and next-sentence prediction.
    experiment  Pre-train the mini-BERT with 100/0/0 and 80/10/10 masking, then look at the tokens that were NOT
                masked, as fine-tuning will (no [MASK] anywhere in the input).
    demos       masking_demo, segment_demo (DEMOS)
"""
