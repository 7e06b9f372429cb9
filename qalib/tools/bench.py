"""`make bench`: the speed targets, measured.

    1. each notebook's headless execution time (target <= 60 s; all together <= 5 min)
    2. each demo control: time from a value change to the finished redraw (median <= 100 ms, p95 <= 250 ms)
    3. MiniBert vs transformers.BertForMaskedLM, same config and batch, training and inference tokens/s,
       and the fraction of this machine's measured matmul throughput the training step reaches
    4. the notebooks' wall-clock statements (bench_timing): the notebooks print their timings, this judges them
    5. the decoder (bench_decoder): generation with vs without the KV cache, vs GPT2LMHeadModel.generate, and the
       cache's bytes vs the formula
    6. training (bench_train): 12 seeds batched (qalib.lab.train_batched) vs one after another, and qalib.lab.train's step
       vs a bare PyTorch loop, at d = 32, 64, 128

    python -m qalib.tools.bench [--only notebooks|redraw|model|timing|decoder|train] [--topic TEXT]

--topic limits the notebooks and demos to those whose notebook name contains TEXT (e.g. --topic 05).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import numpy as np

from qalib.tools.testing import sweep_values


def bench_notebooks(topic: str = "") -> None:
    from qalib.tools.nbtools import collection_paths, execute, ticks

    paths = [p for p in collection_paths() if topic in p.stem]
    # The collection grows, so the total's target is per notebook: 25 s on average (12 notebooks once took 300 s).
    budget = 25.0 * len(paths)
    print(f"\n== notebooks: headless execution (target <= 60 s each, <= 25 s on average: {budget:.0f} s for {len(paths)})")
    total = 0.0
    for path in paths:
        nb, secs = execute(path, timeout=600)
        total += secs
        flag = "ok " if secs <= 60 else "SLOW"
        print(f"  {flag} {path.name:40s} {secs:6.1f} s  {ticks(nb):3d} measurements")
    print(f"  {'ok ' if total <= budget else 'SLOW'} {'all notebooks':40s} {total:6.1f} s")


def reference_figure_ms(repeats: int = 7) -> float:
    """Median time to draw a plain reference figure to PNG: three line plots with titles, labels and ticks, one
    16x16 image with a colour bar, no layout engine. It calibrates the redraw numbers: a demo cannot redraw
    faster than matplotlib draws its axes and ticks on this machine."""
    import io

    import matplotlib
    import matplotlib.pyplot as plt

    from qalib.notebook.style import use_style

    use_style()
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fig = plt.figure(figsize=(9.0, 3.6), layout="none")
        axes = fig.subplots(1, 3)
        for ax in axes:
            ax.plot(rng.random(50))
            ax.set(title="a title", xlabel="x", ylabel="y")
        fig.colorbar(axes[2].imshow(rng.random((16, 16))), ax=axes[2])
        with matplotlib.rc_context({"savefig.bbox": "standard"}):  # as Demo draws: no second, "tight" pass
            fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench_redraws(repeats: int = 3, topic: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    from qalib.notebook.catalog import demo_factories

    print("\n== redraw latency per control (target median <= 100 ms, p95 <= 250 ms)")
    print("  what each redraw drew: live = only the artists that changed, over the kept background;")
    print("  panels = the panels whose limits moved, again; axes = the whole kept figure again;")
    print("  figure = a new figure (plotted afresh)")
    print(f"  reference: a plain 3-panel matplotlib figure draws to PNG in {reference_figure_ms():.0f} ms here")
    for stem, factories in demo_factories().items():
        if topic not in stem:
            continue
        for factory in factories:
            demo = factory()
            for name, control in demo.controls.items():
                start_value = control.value
                times, kinds = [], collections.Counter()
                for _ in range(repeats):
                    for value in sweep_values(control, 6):
                        before = demo.redraws
                        t0 = time.perf_counter()
                        control.value = value
                        if demo.redraws > before:  # only changes that redrew count
                            times.append(time.perf_counter() - t0)
                            kinds[demo.last_redraw_kind] += 1
                control.value = start_value
                if not times:
                    continue
                med, p95 = statistics.median(times) * 1e3, float(np.percentile(times, 95)) * 1e3
                flag = "ok " if med <= 100 and p95 <= 250 else "SLOW"
                drawn = " ".join(f"{kind} {kinds[kind]:2d}" for kind in ("live", "panels", "axes", "figure"))
                print(f"  {flag} {stem:28s} {factory.__name__:22s} {name:12s} median {med:6.1f} ms  p95 {p95:6.1f} ms"
                      f"  (n={len(times)}: {drawn})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["notebooks", "redraw", "model", "timing", "decoder", "train"])
    parser.add_argument("--topic", default="", help="only notebooks and demos whose notebook name contains this")
    args = parser.parse_args()
    if args.only in (None, "model"):
        from qalib.tools.bench_model import bench_model

        bench_model()
    if args.only in (None, "decoder"):
        from qalib.tools.bench_decoder import bench_decoder

        bench_decoder()
    if args.only in (None, "train"):
        from qalib.tools.bench_train import bench_decoders, bench_train

        bench_train()
        bench_decoders()
    if args.only in (None, "timing"):
        from qalib.tools.bench_timing import bench_timings

        bench_timings()
    if args.only in (None, "redraw"):
        bench_redraws(topic=args.topic)
    if args.only in (None, "notebooks"):
        bench_notebooks(topic=args.topic)


if __name__ == "__main__":
    main()
