"""Upstream's routing-shape trap rows at world size 1 (test_routing_shape_contract.py runs them on four
ranks): a scratch capacity overflow and out-of-range expert ids with validation on, on a BF16 training
context under no_grad and on an MXFP8 inference context with prepared weights. Each scenario runs in its
own process (trap_worker.py: the device trap ends the CUDA context), which must end non-zero with the
planner's or the validator's diagnostic and no illegal memory access."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
OVERFLOW = ("DistMoE scratch capacity exceeded", "required_receive_rows:", "total_scratch_capacity_rows:")
BAD_ID = ("DistMoE expert ID is outside [-1, num_experts)",)


@pytest.mark.parametrize("scenario,fragments", [
    ("overflow_bf16", OVERFLOW),
    ("overflow_mxfp8_inference", OVERFLOW),
    ("bad_id_bf16", BAD_ID),
    ("bad_id_mxfp8_inference", BAD_ID),
])
def test_routing_shape_traps_end_in_their_diagnostic(scenario, fragments):
    """The scenario's process ends non-zero after its marker, its output holds every fragment of the
    diagnostic, and nothing reports an illegal memory access."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), HERE) if p),
               PYTHONUNBUFFERED="1", DMOE_COMM_TIMEOUT_MS="5000")
    try:
        proc = subprocess.run([sys.executable, os.path.join(HERE, "trap_worker.py"), scenario], capture_output=True,
                              text=True, timeout=90, env=env)
    except subprocess.TimeoutExpired as e:  # what the process printed before it hung, for the report
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        pytest.fail(f"{scenario}: no exit within 90 s; its output so far:\n{out[-3000:]}")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "EXPECTED_DIST_MOE_TRAP" in text and "UNEXPECTED" not in text, text[-3000:]
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} missing:\n{text[-3000:]}"
    assert "illegal memory access" not in text, text[-3000:]
