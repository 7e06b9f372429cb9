"""python -m qalib.tools.robustness: see the package's docstring (or --help)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from qalib.tools.robustness import plan
from qalib.tools.robustness.summary import markdown


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m qalib.tools.robustness",
        description="Re-run the topic notebooks' claims under many seed offsets and CPU variants; one row per claim: "
                    "pass rate, worst margin in units of its spread, failed runs. Finished runs are kept and skipped.")
    parser.add_argument("--topic", nargs="+", default=[], metavar="TEXT",
                        help="only the topic notebooks whose name contains TEXT (e.g. 07 or multi_head)")
    parser.add_argument("--offsets", default=str(plan.DEFAULT_RUNS), metavar="N|LIST",
                        help=f"N offsets 0, {plan.OFFSET_STEP}, ..., or a list such as 0,300,700 ('300,' for one); "
                             f"default {plan.DEFAULT_RUNS}")
    parser.add_argument("--variants", default="", metavar="LIST",
                        help="CPU variants to run, e.g. avx512-t1,avx2-t1 (default: every one this machine has; "
                             "--list-variants shows them)")
    parser.add_argument("--list-variants", action="store_true", help="print this machine's CPU variants and stop")
    parser.add_argument("--scale", type=int, default=1, help="QALIB_SCALE for every run: 4 is the GPU's budget (default 1)")
    parser.add_argument("--jobs", type=int, default=None, help="runs side by side (default: one per core)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell before a run counts as failed")
    parser.add_argument("--out", type=Path, default=Path("robustness"), help="results folder (default robustness/)")
    parser.add_argument("--summary-only", action="store_true", help="summarise the finished runs; run nothing")
    return parser.parse_args(argv)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def config(args: argparse.Namespace) -> plan.SweepConfig:
    from qalib.tools.nbtools import is_topic, notebook_paths

    notebooks = plan.select_notebooks(args.topic, [p for p in notebook_paths() if is_topic(p)])
    offsets = plan.parse_offsets(args.offsets)
    variants = plan.machine_variants(cores())  # seconds: each variant is asked of a fresh interpreter
    return plan.SweepConfig(
        notebooks=notebooks, offsets=offsets,
        variants=plan.select_variants([v for v in args.variants.split(",") if v.strip()], variants),
        scale=args.scale, jobs=args.jobs or min(cores(), 8), timeout=args.timeout, out=args.out)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.list_variants:
        for v in plan.machine_variants(cores()):
            print(f"{v.name:12s} {'ATEN_CPU_CAPABILITY=' + v.capability if v.forced else 'this machine default'}, "
                  f"{v.threads} torch thread{'s' if v.threads > 1 else ''}")
        return 0
    try:
        cfg = config(args)
    except ValueError as err:
        print(f"robustness: {err}", file=sys.stderr)
        return 2
    runs = cfg.runs()
    todo, results = plan.pending(runs, cfg.out)
    print(f"{len(runs)} runs: {len(cfg.notebooks)} notebooks x {len(cfg.offsets)} offsets x {len(cfg.variants)} "
          f"variants ({', '.join(v.name for v in cfg.variants)}), scale {cfg.scale}; {len(results)} finished before, "
          f"{len(todo)} to run, {cfg.jobs} at a time", flush=True)
    crashed = []
    if todo and not args.summary_only:
        from qalib.tools.robustness.sweep import run_pending

        try:
            new, crashed = run_pending(todo, len(results), cfg.out, cfg.jobs, cfg.timeout)
        except KeyboardInterrupt:
            return 130
        results += new
    if not results:
        print("no finished runs to summarise")
        return 1
    text = markdown(results)
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "summary.md").write_text(text)
    print("\n" + text)
    unfinished = len(runs) - len(results)
    if unfinished:
        print(f"{unfinished} of {len(runs)} runs did not finish" + (f" ({len(crashed)} crashed, above)" if crashed else "")
              + f"; the summary covers {len(results)}. Run the same command again to do them.")
    print(f"written: {cfg.out / 'summary.md'} and {cfg.out / 'runs'}/")
    return 1 if crashed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
