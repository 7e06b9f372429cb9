"""Notebook 15, notebooks/15_tokenization.ipynb: the code it calls.

    compute     What subword tokenization buys, and what the vocabulary size trades.
    experiment  Word-level, WordPiece, BPE, unigram and byte-level BPE at each vocabulary size, on the stdlib
                corpus, with their held-out statistics; and the demo that types into them.
    demos       tokenizer_demo, table_demo (DEMOS)
"""
