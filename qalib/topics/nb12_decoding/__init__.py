"""Notebook 12, notebooks/12_decoding.ipynb: the code it calls.

    compute     How a decoder generates text, judged against a language whose next-token distribution is known.
    experiment  Tiny decoders on the synthetic language, with and without the causal mask, and with 4, 2 or 1
                key/value heads; then what each one generates, judged against the truth.
    demos       sampling_demo, mask_demo (DEMOS)
"""
