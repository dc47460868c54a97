"""scripts/plot_scaling.py reads `dist-moe bench` sections and charts time per layer against EP size."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("plot_scaling", ROOT / "scripts" / "plot_scaling.py")
plot_scaling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_scaling)


def bench_log(gpus: int, fwd: float, fb: float) -> str:
    return (f"dist-moe bench: qwen3_30b (T=8192 D=2048 F=768 E=128 K=8 per rank), train, {gpus} GPU(s), 10 iterations\n"
            "measure                         ours ms GEMM-only ms  torch EP ms speedup vs torch\n"
            f"forward                           {fwd:.3f}        1.294        {3 * fwd:.3f}          3.00x\n"
            f"forward+backward                  {fb:.3f}        3.460       {2 * fb:.3f}          2.00x\n")


def test_parses_every_section_and_measure():
    """Two EP sizes x two measures give four rows with the numbers of the table."""
    rows = plot_scaling.parse(bench_log(2, 1.5, 4.5) + bench_log(4, 1.7, 5.0))
    assert len(rows) == 4
    fb4 = [r for r in rows if r["gpus"] == 4 and r["measure"] == "forward+backward"][0]
    assert fb4["ours_ms"] == 5.0 and fb4["torch_ms"] == 10.0 and fb4["speedup"] == 2.0


def test_chart_has_one_line_per_measure_and_baseline():
    """The SVG draws ours and the stock layer for each measure, through every EP size."""
    text = plot_scaling.svg(plot_scaling.parse(bench_log(2, 1.5, 4.5) + bench_log(4, 1.7, 5.0)))
    lines = [l for l in text.splitlines() if l.startswith("<polyline")]
    assert len(lines) == 4
    points = [l.split('points="')[1].split('"')[0] for l in lines]
    assert all(len(p.split()) == 2 for p in points)  # two points each: EP2 and EP4
    assert "EP2" in text and "EP4" in text
