"""scripts/layer_ab_rounds.sh: alternated `dist-moe bench` runs of two builds, run against stand-in
binaries that print the bench's result lines (training and inference forms)."""

import pathlib
import stat
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "layer_ab_rounds.sh"


def stand_in(folder, lines):
    """A `dist-moe` in `folder` that records its arguments and side environment, then prints `lines`."""
    folder.mkdir()
    exe = folder / "dist-moe"
    body = "".join(f"echo '{l}'\n" for l in lines)
    exe.write_text(f'#!/usr/bin/env bash\necho "args: $* side=${{SIDE:-none}}"\n{body}')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


def run(tmp_path, a_lines, b_lines, env_b="SIDE=b"):
    a = stand_in(tmp_path / "A", a_lines)
    b = stand_in(tmp_path / "B", b_lines)
    full = tmp_path / "full.log"
    out = subprocess.run(["bash", str(SCRIPT), "qwen3_30b", str(a), str(b), "2", str(full), "--shape", "qwen3_30b"],
                         env={"PATH": "/usr/bin:/bin", "B_ENV": env_b}, capture_output=True, text=True, check=True)
    return out.stdout, full.read_text()


def test_training_rounds_medians_and_sides(tmp_path):
    """Training output: a line per round and side with the BF16 speedup, the medians' B / A, B's environment on
    B's runs only, the flags on both, full outputs kept."""
    def lines(f, fb):
        return [f"forward                           {f}        1.351            -              -",
                f"forward+backward                  {fb}        4.034            -              -",
                "BF16 layer forward+backward       5.059                                    1.17x"]
    out, full = run(tmp_path, lines("1.466", "4.338"), lines("1.456", "4.308"))
    rounds = [l for l in out.splitlines() if l.startswith("round")]
    assert rounds == [f"round {r} {side}: forward {f} ms, forward+backward {fb} ms (1.17x our BF16 layer)"
                      for r in (1, 2) for side, f, fb in (("A", "1.466", "4.338"), ("B", "1.456", "4.308"))]
    assert "layer A/B qwen3_30b: A [defaults] vs B [SIDE=b], medians" in out
    fb = [l for l in out.splitlines() if l.strip().startswith("forward+backward A")][0].split()
    assert (fb[2], fb[5], fb[8]) == ("4.338", "4.308", "0.993")
    # A ran without B's environment, B with it; the flags reached both; full outputs kept.
    assert full.count("args: bench --shape qwen3_30b side=none") == 2
    assert full.count("args: bench --shape qwen3_30b side=b") == 2


def test_inference_form_and_a_missing_result(tmp_path):
    """Inference output counts as the forward; a run without a result prints '?' and its median is nan, and no
    forward+backward line is printed without one."""
    infer = ["inference forward                 2.381        7.257            -              -",
             "BF16 layer inference              7.088                                    2.98x  (our BF16 layer)"]
    out, _ = run(tmp_path, infer, ["error: no result"])
    assert "round 1 A: forward 2.381 ms, forward+backward ? ms (2.98x our BF16 layer)" in out
    assert "round 1 B: forward ? ms, forward+backward ? ms" in out
    fwd = [l for l in out.splitlines() if l.strip().startswith("forward ")][0].split()
    assert fwd[2] == "2.381" and fwd[5] == "nan"
    assert not any(l.strip().startswith("forward+backward A") for l in out.splitlines())
