"""Notebook 18, notebooks/18_attention_explanation.ipynb: the code it calls.

    compute     A task whose explanation is known, the truth by intervention (key_intervention), five attribution
                methods read from one model, how well each finds the decisive token, how much they agree, Jain &
                Wallace's adversarial attention and Wiegreffe & Pinter's uniform baseline. Compute functions are pure
                (tensors in, tensors or dicts out); plots take (fig, data).
    experiment  The training runs and real-model measurements: the key-token classifier trained over seeds (one
                batched run, qalib.lab.train_batched) on labels with 10% noise, the learned-or-not gate, each
                method's hits on decisive keys and its weight on unused ones, the methods' agreement, the adversarial
                search, the reference run (REFERENCES: 16 seeds at 150, 600 and 2400 steps), and the same methods on
                all-MiniLM-L6-v2 for sentences with a planted word.
    demos       typing_demo, adversarial_demo (DEMOS)
"""
