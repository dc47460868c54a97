"""scripts/gemm_ab_table.py: the A / B table of alternated bench_grouped_gemm rows as
scripts/gemm_ab_rounds.sh writes them (the run scripts' own copies before it read the wrong fields)."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gemm_ab_table", ROOT / "scripts" / "gemm_ab_table.py")
gemm_ab_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gemm_ab_table)


def row(side, rnd, op, ms, bf16_ms):
    """A block-scaled pick's row as scripts/gemm_ab_rounds.sh writes it (the BF16 rows' field order)."""
    return f"ROW {side} {rnd} qwen3_30b balanced {op} 128x256x128_s4_tma_dyn {ms:.3f} ms 761.2 TFLOP/s bf16 {bf16_ms:.3f}\n"


def test_medians_ratio_and_speed_against_bf16(tmp_path, monkeypatch, capsys):
    """Per op: each side's median time, B / A, no cuBLAS column for a block-scaled pick, and each side's speed
    against the BF16 pick timed beside it."""
    rows = tmp_path / "rows.txt"
    rows.write_text("".join([row("A", 1, "w13_fprop_fp8", 0.60, 0.78), row("B", 1, "w13_fprop_fp8", 0.54, 0.77),
                             row("A", 2, "w13_fprop_fp8", 0.58, 0.76), row("B", 2, "w13_fprop_fp8", 0.56, 0.79),
                             row("A", 3, "w13_fprop_fp8", 0.62, 0.77), row("B", 3, "w13_fprop_fp8", 0.55, 0.78),
                             "==== gemm round 1 side A\n"]))
    monkeypatch.setattr(sys, "argv", ["gemm_ab_table.py", str(rows)])
    assert gemm_ab_table.main() == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("qwen3_30b")][0].split()
    assert line[1:3] == ["balanced", "w13_fprop_fp8"]
    assert (float(line[3]), float(line[4]), float(line[5])) == (0.60, 0.55, 0.917)  # medians, B / A
    assert line[6] == "-"  # no cuBLAS beside a block-scaled pick
    assert line[7:10] == ["1.28", "/", "1.42"]  # median BF16 / median ms per side
