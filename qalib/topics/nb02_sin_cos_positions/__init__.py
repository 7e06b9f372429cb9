"""Notebook 02, notebooks/02_sin_cos_positions.ipynb: the code it calls.

    compute     Why sin AND cos in the positional encoding, why 10000, and encoding versus learned embedding.
    experiment  Learned vs sinusoidal vs no positions on an order-sensitive task, then longer inputs.
    demos       pe_demo, rotation_demo (DEMOS)
"""
