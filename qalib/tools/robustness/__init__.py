"""The robustness sweep: every topic notebook's claims re-run under many seed sets and CPU float paths, so that
thresholds are set from a distribution and not from the one run they were tuned on. Not part of `make test`.

    python -m qalib.tools.robustness                       # every topic notebook, 10 offsets x this machine's variants
    python -m qalib.tools.robustness --topic 07 11 --offsets 0,100,200 --variants avx512-t1,avx2-t1
    python -m qalib.tools.robustness --scale 4             # the GPU's budget (QALIB_SCALE=4), on the CPU
    make robustness NB=07 OFFSETS=20 SCALE=4

    plan      -- what runs: notebooks x seed offsets x CPU variants at one scale; which runs are already finished
    execute   -- one run: a fresh kernel with the run's environment, its claims logged, its result file written
    sweep     -- the pending runs side by side, one per core, with progress and ETA; Ctrl-C keeps what finished
    summary   -- one row per claim: pass rate, worst margin in units of its spread, failed runs; notes

Results: <out>/runs/<notebook>/x<scale>-o<offset>-<variant>.json (one per run; a rerun skips those that exist for
the notebook's current source) and <out>/summary.md, printed at the end.
"""
