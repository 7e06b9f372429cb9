"""Practice for interviews: the drills as data, the quiz that shows them, the mock interview and the exercises.

    drills/      -- one TOML file per notebook: follow-ups with their answers, and a self-check quiz
    quiz         -- reads and checks a drill file; quiz("<notebook>") shows it with hidden answers
    interview    -- the mock interview: questions from every drill, asked in spaced-repetition order
    progress     -- the mock interview's Leitner boxes in one local file (atomic, filelock-locked, bad files set aside)
    exercises/   -- write-it-yourself exercises: stubs, a checker with graded hints, solutions on request

May import: qalib.nn, qalib.lab and each other, and ipywidgets for its views. Never qalib.topics or qalib.tools
(tests/test_layers.py).
"""
