"""One topic module per notebook (its compute functions, plots and demos) and one experiment module (its
training runs), paired by the notebook's entry in qalib.catalog.

A topic module defines DEMOS, a list of functions that build the notebook's interactive demos (`Demo` objects);
an experiment module does too where a demo needs its trained models. The notebook displays them; the tests and
`make bench` drive every control of every demo (qalib.catalog.demo_factories).

The import rule (tests/test_topic_imports.py checks it): an experiment module may import its own topic module,
never the reverse. No module here imports an experiment module, or another topic's private (`_`-prefixed) names:
what several topics share lives in the library (qalib.probes, qalib.validate, qalib.pretrained, ...).
"""
