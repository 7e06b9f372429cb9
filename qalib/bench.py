"""`make bench`: the speed targets, measured.

    1. each notebook's headless execution time (target <= 60 s; all together <= 5 min)
    2. each demo control: time from a value change to the finished redraw (median <= 100 ms, p95 <= 250 ms)
    3. MiniBert vs transformers.BertForMaskedLM, same config and batch, training and inference tokens/s,
       and the fraction of this machine's measured matmul throughput the training step reaches

    python -m qalib.bench [--only notebooks|redraw|model]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qalib.widgets import sweep_values


def bench_notebooks() -> None:
    from qalib.nbtools import execute, notebook_paths, ticks

    print("\n== notebooks: headless execution (target <= 60 s each, <= 300 s total)")
    total = 0.0
    for path in notebook_paths():
        nb, secs = execute(path, timeout=600)
        total += secs
        flag = "ok " if secs <= 60 else "SLOW"
        print(f"  {flag} {path.name:40s} {secs:6.1f} s  {ticks(nb):3d} claims")
    print(f"  {'ok ' if total <= 300 else 'SLOW'} {'all notebooks':40s} {total:6.1f} s")


def bench_redraws(repeats: int = 3) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from qalib.topics import demo_factories

    print("\n== redraw latency per control (target median <= 100 ms, p95 <= 250 ms)")
    for stem, factories in demo_factories().items():
        for factory in factories:
            demo = factory()
            for name, control in demo.controls.items():
                start_value = control.value
                times = []
                for _ in range(repeats):
                    for value in sweep_values(control, 6):
                        before = demo.redraws
                        t0 = time.perf_counter()
                        control.value = value
                        if demo.redraws > before:  # only changes that redrew count
                            times.append(time.perf_counter() - t0)
                control.value = start_value
                if not times:
                    continue
                med, p95 = statistics.median(times) * 1e3, float(np.percentile(times, 95)) * 1e3
                flag = "ok " if med <= 100 and p95 <= 250 else "SLOW"
                print(f"  {flag} {stem:28s} {factory.__name__:28s} {name:14s} median {med:6.1f} ms  p95 {p95:6.1f} ms  (n={len(times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["notebooks", "redraw", "model"])
    args = parser.parse_args()
    if args.only in (None, "model"):
        from qalib.bench_model import bench_model

        bench_model()
    if args.only in (None, "redraw"):
        bench_redraws()
    if args.only in (None, "notebooks"):
        bench_notebooks()


if __name__ == "__main__":
    main()
