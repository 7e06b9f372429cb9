"""The code of each topic notebook: three modules per notebook, paired by its entry in qalib.notebook.catalog.

    <topic>.py            -- compute functions (pure) and plot functions; no widgets
    <topic>_experiment.py -- the training runs, and the trained models the notebook measures
    <topic>_demos.py      -- the demo factories, listed in DEMOS: each wires a compute function to a plot function
                             and its ipywidgets controls (a `Demo`); the one module of the topic that imports
                             ipywidgets. The notebook displays them; the tests and `make bench` drive every control
                             of every demo (qalib.notebook.catalog.demo_factories).

The import rule (tests/test_topic_imports.py checks it): an experiment module may import its own topic module,
never the reverse; a demos module may import its own topic and experiment modules, and no module imports a demos
module. No module here imports another topic's experiment module, or another topic's private (`_`-prefixed) names:
what several topics share lives in the library (qalib.lab.probes, qalib.nn.validate, qalib.nn.pretrained, ...).
"""
