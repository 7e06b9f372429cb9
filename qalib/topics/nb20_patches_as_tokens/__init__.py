"""Notebook 20, notebooks/20_patches_as_tokens.ipynb: the code it calls.

    compute     Can a Transformer read an image? Patches as tokens: the digits, patchify, a small ViT, a CNN, costs
    experiment  ViTs against patch size, position scheme and a CNN at three training-set sizes; its reference run.
    demos       patch_demo, cost_demo, position_demo (DEMOS)
    digits.csv.gz  UCI handwritten digits (Alpaydin & Kaynak 1998, CC BY 4.0): see DATA.md
"""
