"""scripts/gemm_ab_table.py: the A / B table of alternated bench_grouped_gemm pick rows, read as the
benchmark prints them (the run scripts' own copies before it read the wrong fields)."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gemm_ab_table", ROOT / "scripts" / "gemm_ab_table.py")
gemm_ab_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gemm_ab_table)


def row(side, rnd, op, ms, bf16_ms):
    return (f"ROW {side} {rnd} fp8 qwen3_30b     balanced {op:<15s} 128x256x128_s4_tma_dyn (pick)  {ms:8.3f} ms"
            f"   761.2 TFLOP/s  bf16 {bf16_ms:8.3f} ms  x bf16 {bf16_ms / ms:.2f}  MISSED(>=1.6)  x cuBLAS bf16 1.17\n")


def test_medians_ratio_and_speed_against_bf16(tmp_path, monkeypatch, capsys):
    rows = tmp_path / "rows.txt"
    rows.write_text("".join([row("A", 1, "w13_fprop_fp8", 0.60, 0.78), row("B", 1, "w13_fprop_fp8", 0.54, 0.77),
                             row("A", 2, "w13_fprop_fp8", 0.58, 0.76), row("B", 2, "w13_fprop_fp8", 0.56, 0.79),
                             row("A", 3, "w13_fprop_fp8", 0.62, 0.77), row("B", 3, "w13_fprop_fp8", 0.55, 0.78),
                             "gemm round 1 of 3 done\n"]))
    monkeypatch.setattr(sys, "argv", ["gemm_ab_table.py", str(rows)])
    assert gemm_ab_table.main() == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("qwen3_30b")][0].split()
    assert line[1] == "w13_fprop_fp8"
    assert (float(line[2]), float(line[3]), float(line[4])) == (0.60, 0.55, 0.917)  # medians, B / A
    assert line[5:8] == ["1.28", "/", "1.42"]  # median BF16 / median ms per side
