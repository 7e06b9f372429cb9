"""Practice for interviews: the drills as data, the quiz that shows them, the mock interview and the exercises.

    drills/      -- one TOML file per notebook: follow-ups with their answers, and a self-check quiz
    quiz         -- reads and checks a drill file; quiz("<notebook>") shows it with hidden answers
    interview    -- the mock interview: questions from every drill, rated Again / Hard / Good / Easy, in FSRS order
    schedule     -- FSRS scheduling (the fsrs package): ratings, a card's state after an answer, which card comes next
    progress     -- the mock interview's FSRS states in one local file (atomic, filelock-locked, bad files set aside)
    leitner      -- version 1 of that file (Leitner boxes) carried over to FSRS, with the mapping and why
    progress_chart -- what FSRS knows per notebook: due now, learning, review by stability (counts and the plot)
    exercises/   -- write-it-yourself exercises: stubs, a checker with graded hints, solutions on request

May import: qalib.nn, qalib.lab and each other; ipywidgets for its views, fsrs and filelock for the interview's
schedule and file. Never qalib.topics or qalib.tools (tests/test_layers.py).
"""
