"""Notebook 16, notebooks/16_objectives.ipynb: the code it calls.

    compute     BERT's, GPT's and T5's training objectives on one model size and one synthetic language.
    experiment  One model size, one language, three objectives (masked LM, causal LM, span corruption), several
                seeds; then what each frozen network's output holds (linear probes) and how well each predicts the
                next token, against the language's true distribution.
    demos       corruption_demo, signals_demo (DEMOS)
"""
