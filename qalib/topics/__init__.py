"""The code of each topic notebook: one package per notebook, named after it (notebooks/06_layernorm_vs_batchnorm.ipynb
-> qalib/topics/nb06_layernorm_vs_batchnorm/). Each package's __init__ is its map, and holds three modules:

    compute.py     -- compute functions (pure, seeded) and the plot functions that draw their results; no widgets
    experiment.py  -- the training runs (through qalib.lab.train.fit or train_seeds), and the trained models the
                      notebook measures
    demos.py       -- the demo factories, listed in DEMOS: each wires a compute function to a plot function and its
                      ipywidgets controls (a `Demo`). The notebook displays them; the tests and `make bench` drive
                      every control of every demo (qalib.notebook.catalog.demo_factories)

The import rule, stated here once (tests/test_topic_imports.py checks it): inside a package, experiment may import
compute, and demos may import compute and experiment; nothing imports demos, and compute imports neither. No package
imports another topic's package, and no module imports a `_`-prefixed name from another module: what two notebooks
share lives in the library below (qalib.lab, qalib.nn, qalib.notebook). Only demos.py imports ipywidgets, and no
module here steps an optimizer itself.
"""
