"""GPU suites of the PyTorch front end: skipped unless torch with CUDA and dist_moe._C are present.

Single-rank tests share one NCCL process group of world size 1 in the pytest process; two-rank
tests spawn their own processes (test_two_rank.py).
"""

import gc
import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _gpu_runtime_missing() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import dist_moe._C  # noqa: F401
    except ImportError as e:
        return f"dist_moe._C is not built ({e})"
    return None


_MISSING = _gpu_runtime_missing()
collect_ignore_glob = ["test_*.py"] if _MISSING else []
if _MISSING:
    print(f"tests/torch skipped: {_MISSING}")


@pytest.fixture(scope="session")
def world1():
    """A one-rank NCCL process group on GPU 0."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    store = tempfile.NamedTemporaryFile(prefix="dmoe_pg_", delete=False).name
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    yield dist.group.WORLD
    dist.destroy_process_group()
    os.unlink(store)


@pytest.fixture
def contexts(world1):
    """``make(config)``: a context of ``config`` over ``world1`` on GPU 0, closed after the test."""
    import torch

    import dist_moe

    made = []

    def make(config):
        ctx = dist_moe.create_context(group=world1, config=config, device=torch.device("cuda", 0))
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


@pytest.fixture(autouse=True)
def _collect_cyclic_garbage():
    """Collects the cyclic garbage of earlier tests before each test, outside any capture.

    ``make_graphed_callables`` leaves its graphs in a reference cycle (the autograd Function class
    it builds holds them, and a class is always in a cycle), and with them whatever their static
    outputs' autograd nodes hold (a closed context's native object). Only the cyclic collector frees
    them, at whatever allocation triggers it; if that happens in the middle of a later capture, the
    ``CUDAGraph`` destruction (cudaGraphExecDestroy) or the context's cudaFree is a prohibited call
    under the global capture mode and invalidates that capture (torch.cuda.graph collected first by
    default until torch made it opt-in: torch.compiler.config.force_cudagraph_gc)."""
    gc.collect()
    yield
