"""make bench ONLY=train's decoder section runs (one step, one repeat) and reports a ratio per model and seed count."""

from qalib.tools.bench_train import bench_decoders


def test_the_decoder_benchmark_runs_and_reports_every_case(capsys):
    results = bench_decoders(steps=1, repeats=1)
    assert set(results) == {f"{m}_s{n}_{k}" for m in ("12", "14") for n in (3, 8) for k in ("stacked_ms", "loop_ms", "speedup")}
    assert all(v > 0 for v in results.values())
    assert "14 encoder-decoder 8 seeds" in capsys.readouterr().out
