"""Notebook 18, notebooks/18_attention_explanation.ipynb: the code it calls.

    compute     A task whose explanation is known, five attribution methods read from one model, how well each finds
                the known token, how much they agree, and Jain & Wallace's adversarial attention. Compute functions
                are pure (tensors in, tensors or dicts out); plots take (fig, data).
    experiment  The training runs and real-model measurements: the key-token classifier trained over seeds (one
                batched run, qalib.lab.train_batched), each model's accuracy against the task's floor, every
                attribution method's hits on the known token, the methods' agreement, Jain & Wallace's adversarial
                attention, and the same methods on all-MiniLM-L6-v2 for sentences with a planted word.
    demos       typing_demo, adversarial_demo (DEMOS)
"""
