"""Tooling around the collection, not teaching code: no notebook imports these modules.

    nbtools      -- execute, strip and read the ticks of notebooks (the tests, the bench and the site use it)
    site         -- `make site`: every notebook executed headless into an offline static HTML site
    bench        -- `make bench`: notebook times, redraw latencies of every control
    bench_model  -- model throughput against Hugging Face's BertForMaskedLM
    bench_timing -- the wall-clock statements of the notebooks, judged over several rounds
    robustness   -- `make robustness`: every notebook's claims under many seed offsets and CPU float paths, one row
                    per claim (pass rate, worst margin in units of its spread, failed runs)
    testing      -- for the tests and the benchmark: finite results, values to sweep a control over
    any_bert, cheatsheet, slides -- a notebook's claims on any BERT checkpoint; the cheat sheet; reveal.js decks
    present      -- `make present`: a topic notebook as a lecture for Voila (no live runs, checks, drill or references)
    core_sheet   -- the drills' core questions with their short answers on one printed page (`make cheatsheet`)
    anki_deck    -- `make anki`: every drill question as an Anki deck (stable note ids: re-importing updates them)
    anki_html    -- a drill's markdown as an Anki field: $...$ to Anki's MathJax \\( \\), the rest HTML-escaped
"""
