"""What a notebook stands on besides the model: its statements, its figures, its demos and its place in the
collection.

    claims       -- the three kinds of statement: check (✓ a measurement), identity (≡), quote (❝)
    quiet        -- how a statement shows in Jupyter: one line, its details one click away
    drawing      -- matplotlib only: live artists, limits, labels, bars and the axis helpers plots share
    widgets      -- Demo: compute function -> plot function -> ipywidgets controls
    style        -- use_style(): the figures' look (QALIB_STYLE=talk for class)
    catalog      -- the registry: each notebook with its question, short answer, topic and experiment module
    paths        -- where the project's files are (the catalog finds the notebooks through it)

May import: qalib.nn and qalib.lab (drawing: nothing of qalib). Never qalib.topics, qalib.practice or
qalib.tools (tests/test_layers.py).
"""
