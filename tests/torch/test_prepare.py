"""Block-scaled weight preparation on the GPU (upstream §1.9): prepare_block_scaled_weight,
PreparedWeight, the dist_moe::prepare_mxfp8_weight op under FakeTensor / make_fx / CUDA graphs,
caller-owned refill, and per-token NVFP4 rows into strided packed buffers.

The prepared bytes are checked against pure-torch re-implementations of the format rules
(docs/formats.md): every FP32 step is done in float64 and rounded to float32, which gives the
correctly rounded FP32 result of one IEEE operation (float64 has more than 2·24+2 bits), so the
reference does not depend on how torch's CUDA kernels divide.
"""

import pytest
import torch
from moe_reference import e4m3_at_shared_scale, e4m3_satfinite, e8m0_rceil, e8m0_reciprocal, f32

import dist_moe
from dist_moe import _prepare

DEV = torch.device("cuda", 0)
MXFP8 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3)
NVFP4 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.NVFP4)
OPERANDS = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale", "global_scale_inv")


def weight(shape, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(shape, generator=g, device=DEV, dtype=torch.float32).to(torch.bfloat16)


def raw(t):
    """The bytes of a tensor (any dtype) as uint8, for bitwise comparisons."""
    return t.contiguous().view(torch.uint8)


def assert_same_bytes(a, b, name):
    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
    assert torch.equal(raw(a), raw(b)), f"{name}: bytes differ"


def assert_prepared_equal(got, want):
    for name in OPERANDS:
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert_same_bytes(a, b, name)


# ---- pure-torch references (the format rules f32, e4m3_satfinite, e8m0_rceil, e8m0_reciprocal are
# shared with the MXFP8 layer emulation in moe_reference.py) ---------------------------------------


def ref_mxfp8(w, inference, shared=True):
    """(fprop_data, fprop_scale, dgrad_scale or None) as uint8 tensors; training's dgrad_data is
    fprop_data transposed per expert. Training on Hopper (dims multiples of 128; docs/formats.md,
    perf_history G151): the 32x32 tiles at the byte their 128x128 block shares, the largest of its
    sixteen -- a code of a tile whose byte lies `shift` below it becomes e4m3_rn(code * 2^-shift) -- and
    that byte in both grids; shared=False: upstream's exact tiles."""
    G, N, K = w.shape
    x = w.float()
    if inference:
        blocks = x.view(G * N, K // 32, 32)
        byte = e8m0_rceil(blocks.abs().amax(-1))
        q = e4m3_satfinite(blocks * e8m0_reciprocal(byte)[..., None]).view(G, N, K)
        return raw(q), byte, None
    tiles = x.view(G, N // 32, 32, K // 32, 32)
    byte = e8m0_rceil(tiles.abs().amax(dim=(2, 4)))  # [G, N/32, K/32]
    q = e4m3_satfinite(tiles * e8m0_reciprocal(byte)[:, :, None, :, None])
    if shared:
        b = byte.to(torch.int32)
        top = b.view(G, N // 128, 4, K // 128, 4).amax(dim=(2, 4)).repeat_interleave(4, 1).repeat_interleave(4, 2)
        q = e4m3_at_shared_scale(q, (top - b)[:, :, None, :, None])
        byte = top.to(torch.uint8)
    fprop = byte.repeat_interleave(32, dim=1).reshape(G * N, K // 32)
    dgrad = byte.transpose(1, 2).repeat_interleave(32, dim=1).reshape(G * K, N // 32)
    return raw(q.reshape(G, N, K)), fprop, dgrad


_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e2m1_codes(y32):
    """E2M1 RNE satfinite codes (sign in bit 3, -0 kept)."""
    a = y32.abs()
    code = torch.zeros_like(a, dtype=torch.uint8)
    for i in range(1, 8):
        mid = (_E2M1[i - 1] + _E2M1[i]) / 2
        up = (a > mid) | ((a == mid) & (i % 2 == 0))  # ties to the even code (mantissa bit 0)
        code = torch.where(up, torch.full_like(code, i), code)
    return code | (torch.signbit(y32).to(torch.uint8) << 3)


def ref_nvfp4_weight(w):
    """(packed q, E4M3 scales, global_scale, global_scale_inv) per docs/formats.md "NVFP4"."""
    G, N, K = w.shape
    x = w.float()
    amax = x.abs().view(G, -1).amax(-1).clamp_min(1e-12)
    gs = f32(2688.0 * f32(1.0 / amax.double()).double())
    blocks = x.view(G, N, K // 16, 16)
    bamax = blocks.abs().amax(-1)
    s32 = f32(f32(bamax.double() * gs.double()[:, None, None]).double() / 6.0)
    s = s32.clamp(2.0**-9, 448.0).to(torch.float8_e4m3fn)
    xs = f32(blocks.double() * gs.double()[:, None, None, None])
    y = f32(xs.double() / s.float().double()[..., None])
    codes = e2m1_codes(y).view(G, N, K // 2, 2)
    packed = codes[..., 0] | (codes[..., 1] << 4)
    return packed, raw(s), gs, f32(1.0 / gs.double())


def ref_fp8_blockwise(w):
    """(q, scale [G, N/128, K/128]) per docs/formats.md "FP8 blockwise"."""
    G, N, K = w.shape
    tiles = w.float().view(G, N // 128, 128, K // 128, 128)
    amax = tiles.abs().amax(dim=(2, 4))
    floor = 448.0 * 2.0**-126
    zero = amax == 0
    a = torch.where(zero, torch.ones_like(amax), amax.clamp_min(floor))
    scale = torch.where(zero, torch.ones_like(amax), f32(a.double() / 448.0))
    mult = torch.where(zero, torch.ones_like(amax), f32(448.0 / a.double()))
    q = e4m3_satfinite(f32(tiles.double() * mult.double()[:, :, None, :, None])).view(G, N, K)
    return raw(q), scale


# ---- MXFP8 -----------------------------------------------------------------------------------------


def test_mxfp8_weight_preparation_supports_fake_tensor_tracing():
    """Under FakeTensorMode the registered op's fake gives the spec's shapes and dtypes: dgrad_data
    its own E4M3 [G, K, N] (the Hopper DGRAD's transposed copy)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        w = torch.empty((2, 128, 256), dtype=torch.bfloat16, device="cuda")
        p = dist_moe.prepare_block_scaled_weight(w, MXFP8)
    assert p.source is w
    assert p.fprop_data is not p.dgrad_data
    assert p.fprop_data.shape == w.shape and p.fprop_data.dtype == torch.float8_e4m3fn
    assert tuple(p.dgrad_data.shape) == (2, 256, 128) and p.dgrad_data.dtype == torch.float8_e4m3fn
    assert tuple(p.fprop_scale.shape) == (256, 8) and p.fprop_scale.dtype == torch.float8_e8m0fnu
    assert tuple(p.dgrad_scale.shape) == (512, 4) and p.dgrad_scale.dtype == torch.float8_e8m0fnu
    assert p.format == dist_moe.BlockScaledFormat.MXFP8_E4M3
    assert p.global_scale is None and p.global_scale_inv is None


@pytest.mark.parametrize("tracing_mode", ["real", "fake"])
def test_mxfp8_preparation_is_one_op_under_make_fx(tracing_mode):
    """make_fx records dist_moe::prepare_mxfp8_weight as one opaque op; the graph replays the eager bytes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    fields = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale")

    def fn(w):
        p = dist_moe.prepare_block_scaled_weight(w, MXFP8)
        return tuple(getattr(p, name) for name in fields)

    w = weight((2, 128, 256), seed=3)
    gm = make_fx(fn, tracing_mode=tracing_mode)(w)
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert ops.count("dist_moe.prepare_mxfp8_weight.default") == 1, ops
    got, want = gm(w), fn(w)
    assert len(got) == len(want) == 4
    for a, b, name in zip(got, want, fields):
        assert_same_bytes(a, b, name)


@pytest.mark.parametrize("inference", [False, True], ids=["training_32x32", "inference_1x32"])
def test_mxfp8_bytes_match_torch_reference(inference):
    """[2, 128, 256] random normal weights: every E4M3 and E8M0 byte equals the pure-torch RCEIL rules."""
    w = weight((2, 128, 256), seed=11)
    w[0, 0, :32] = 0  # an all-zero block (training: part of a tile; inference: a whole row block)
    w[1, 5, 7] = 300.0  # a large outlier
    p = dist_moe.prepare_block_scaled_weight(w, MXFP8, inference=inference)
    q, fprop, dgrad = ref_mxfp8(w, inference)
    assert p.fprop_data.dtype == torch.float8_e4m3fn and p.fprop_scale.dtype == torch.float8_e8m0fnu
    assert torch.equal(raw(p.fprop_data), q)
    assert torch.equal(raw(p.fprop_scale), fprop)
    if inference:
        assert p.dgrad_data is None and p.dgrad_scale is None
    else:
        # Hopper: the tiles at shared scales per 128x128 block (some codes re-rounded, some bytes
        # raised: not upstream's exact tiles), dgrad_data a tensor of its own, fprop_data transposed per
        # expert (the FP8-blockwise DGRAD's operand)
        exact_q, exact_fprop, _ = ref_mxfp8(w, inference, shared=False)
        assert not torch.equal(q, exact_q) and not torch.equal(fprop, exact_fprop)
        assert p.dgrad_data.dtype == torch.float8_e4m3fn and tuple(p.dgrad_data.shape) == (2, 256, 128)
        assert p.dgrad_data.is_contiguous()
        assert p.dgrad_data.untyped_storage().data_ptr() != p.fprop_data.untyped_storage().data_ptr()
        assert torch.equal(raw(p.dgrad_data), q.transpose(-1, -2).contiguous())
        assert torch.equal(raw(p.dgrad_scale), dgrad)


def test_prepared_mxfp8_weight_refill_is_allocation_stable():
    """[2, 128, 256]: a refill after weight += 0.25 keeps every data_ptr (the transposed dgrad_data's
    too) and equals a fresh prepare."""
    w = weight((2, 128, 256), seed=5)
    p = dist_moe.prepare_block_scaled_weight(w, MXFP8)
    ptrs = {n: getattr(p, n).data_ptr() for n in ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale")}
    assert len(set(ptrs.values())) == 4
    before = {n: raw(getattr(p, n)).clone() for n in ("fprop_data", "dgrad_data")}
    w += 0.25
    r = dist_moe.prepare_block_scaled_weight(w, MXFP8, out=p)
    assert r.source is w and r.format == p.format
    for n, ptr in ptrs.items():
        assert getattr(r, n).data_ptr() == ptr, n
        assert getattr(p, n).data_ptr() == ptr, n
    assert r.dgrad_data is p.dgrad_data and r.dgrad_data is not r.fprop_data
    for n, b in before.items():
        assert not torch.equal(raw(getattr(r, n)), b), n
    assert torch.equal(raw(r.dgrad_data), ref_mxfp8(w, False)[0].transpose(-1, -2).contiguous())
    assert_prepared_equal(r, dist_moe.prepare_block_scaled_weight(w, MXFP8))


def test_mxfp8_refill_replays_in_a_cuda_graph():
    """A refill captured in a CUDA graph requantizes the current weight on each replay."""
    w = weight((2, 128, 256), seed=7)
    p = dist_moe.prepare_block_scaled_weight(w, MXFP8)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        dist_moe.prepare_block_scaled_weight(w, MXFP8, out=p)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        r = dist_moe.prepare_block_scaled_weight(w, MXFP8, out=p)
    for seed in (8, 9):
        w.copy_(weight(w.shape, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        assert_prepared_equal(r, dist_moe.prepare_block_scaled_weight(w, MXFP8))
        assert r.fprop_data.data_ptr() == p.fprop_data.data_ptr()
        assert r.dgrad_data.data_ptr() == p.dgrad_data.data_ptr()


def test_prepared_weight_storage_membership_survives_release():
    """Every operand has its own storage (dgrad_data, the transposed copy, included), so
    storage_tensors() = (fprop_data, fprop_scale, dgrad_data, dgrad_scale), the same storages in the
    same order after resize_(0); a released owner cannot be refilled."""
    w = weight((2, 128, 256), seed=1)
    p = dist_moe.prepare_block_scaled_weight(w, MXFP8)
    st = p.storage_tensors()
    assert isinstance(st, tuple) and len(st) == 4
    assert st[0] is p.fprop_data and st[1] is p.fprop_scale and st[2] is p.dgrad_data and st[3] is p.dgrad_scale
    torch.cuda.synchronize()
    for t in st:
        t.untyped_storage().resize_(0)
    after = p.storage_tensors()
    assert len(after) == 4 and all(a is b for a, b in zip(after, st))
    with pytest.raises(ValueError, match="released"):
        dist_moe.prepare_block_scaled_weight(w, MXFP8, out=p)


def test_refill_errors():
    """out= refills only MXFP8 training preparations of the same format and shape, with upstream's texts."""
    w = weight((2, 128, 128), seed=2)
    train = dist_moe.prepare_block_scaled_weight(w, MXFP8)
    infer = dist_moe.prepare_block_scaled_weight(w, MXFP8, inference=True)
    nv = dist_moe.prepare_block_scaled_weight(w, NVFP4)
    with pytest.raises(ValueError, match="caller-owned refill supports MXFP8 training weights"):
        dist_moe.prepare_block_scaled_weight(w, MXFP8, inference=True, out=train)
    with pytest.raises(ValueError, match="caller-owned refill supports MXFP8 training weights"):
        dist_moe.prepare_block_scaled_weight(w, NVFP4, out=nv)
    with pytest.raises(ValueError, match="does not match"):
        dist_moe.prepare_block_scaled_weight(w, MXFP8, out=nv)
    with pytest.raises(ValueError, match="DGRAD"):
        dist_moe.prepare_block_scaled_weight(w, MXFP8, out=infer)
    with pytest.raises(ValueError, match="out source shape and dtype must match weight"):
        dist_moe.prepare_block_scaled_weight(weight((2, 128, 256)), MXFP8, out=train)
    with pytest.raises(TypeError, match="out must be a PreparedWeight"):
        dist_moe.prepare_block_scaled_weight(w, MXFP8, out=w)
    # the old shared-qdata layout: dgrad_data must be its own [G, K, N] tensor (here N == K, so the
    # shape passes and the overlap is what is refused)
    fields = {n: getattr(train, n) for n in ("source", "format", "fprop_data", "fprop_scale", "dgrad_scale")}
    shared = dist_moe.PreparedWeight._create(dgrad_data=train.fprop_data, **fields)
    with pytest.raises(ValueError, match="must be its own tensor"):
        dist_moe.prepare_block_scaled_weight(w, MXFP8, out=shared)
    wide = dist_moe.prepare_block_scaled_weight(weight((2, 128, 256)), MXFP8)
    fields = {n: getattr(wide, n) for n in ("source", "format", "fprop_data", "fprop_scale", "dgrad_scale")}
    untransposed = dist_moe.PreparedWeight._create(dgrad_data=wide.fprop_data, **fields)
    with pytest.raises(ValueError, match=r"out.dgrad_data must be a contiguous"):
        dist_moe.prepare_block_scaled_weight(weight((2, 128, 256)), MXFP8, out=untransposed)


def test_weight_validation_errors():
    """prepare_block_scaled_weight rejects non-tensors, non-BF16, host, non-3D, non-contiguous and indivisible
    weights with upstream's texts."""
    with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
        dist_moe.prepare_block_scaled_weight([1.0], MXFP8)
    with pytest.raises(TypeError, match="bfloat16"):
        dist_moe.prepare_block_scaled_weight(torch.zeros((2, 128, 128), device=DEV), MXFP8)
    with pytest.raises(ValueError, match="CUDA"):
        dist_moe.prepare_block_scaled_weight(torch.zeros((2, 128, 128), dtype=torch.bfloat16), MXFP8)
    with pytest.raises(ValueError, match="3D"):
        dist_moe.prepare_block_scaled_weight(weight((256, 128)), MXFP8)
    with pytest.raises(ValueError, match="contiguous"):
        dist_moe.prepare_block_scaled_weight(weight((2, 256, 128)).transpose(1, 2), MXFP8)
    with pytest.raises(ValueError, match="divisible by 32"):
        dist_moe.prepare_block_scaled_weight(weight((2, 100, 128)), MXFP8)
    with pytest.raises(ValueError, match="divisible by 32"):
        dist_moe.prepare_block_scaled_weight(weight((2, 128, 80)), MXFP8, inference=True)
    with pytest.raises(ValueError, match="divisible by 16"):
        dist_moe.prepare_block_scaled_weight(weight((2, 128, 40)), NVFP4)
    with pytest.raises(TypeError, match="config must be a dist_moe.BlockScaledConfig"):
        dist_moe.prepare_block_scaled_weight(weight((2, 128, 128)), "mxfp8_e4m3")
    p = dist_moe.prepare_block_scaled_weight(weight((2, 128, 128)), MXFP8)
    with pytest.raises(TypeError, match="already a PreparedWeight"):
        dist_moe.prepare_block_scaled_weight(p, MXFP8)


def test_resource_owner_types_are_factory_only():
    """Context and PreparedWeight cannot be constructed directly (TypeError naming the factory to use)."""
    with pytest.raises(TypeError, match="use"):
        dist_moe.Context()
    with pytest.raises(TypeError, match="use"):
        dist_moe.PreparedWeight()


def test_prepared_operands_carry_no_autograd_state():
    """Preparing a weight that requires grad gives operands without grad and keeps the source."""
    w = weight((2, 128, 256), seed=4).requires_grad_()
    for cfg, inference in ((MXFP8, False), (MXFP8, True), (NVFP4, False)):
        p = dist_moe.prepare_block_scaled_weight(w, cfg, inference=inference)
        assert p.source is w
        for t in p.storage_tensors():
            assert not t.requires_grad and t.grad_fn is None


# ---- NVFP4 ----------------------------------------------------------------------------------------


def test_nvfp4_weight_preparation_owns_inverse_global_scale():
    """[2, 128, 256]: global_scale_inv == torch.reciprocal(global_scale) exactly; no storage requires
    grad or has a grad_fn; both global scales are among the storages."""
    w = weight((2, 128, 256), seed=6)
    p = dist_moe.prepare_block_scaled_weight(w, NVFP4)
    assert p.format == dist_moe.BlockScaledFormat.NVFP4
    assert p.global_scale.dtype == torch.float32 and tuple(p.global_scale.shape) == (2,)
    assert p.global_scale_inv.dtype == torch.float32 and tuple(p.global_scale_inv.shape) == (2,)
    assert torch.equal(p.global_scale_inv, torch.reciprocal(p.global_scale))
    st = p.storage_tensors()
    for t in st:
        assert not t.requires_grad and t.grad_fn is None
    assert any(t is p.global_scale for t in st) and any(t is p.global_scale_inv for t in st)
    assert p.dgrad_data is None and p.dgrad_scale is None
    assert tuple(p.fprop_data.shape) == (2, 128, 128) and p.fprop_data.element_size() == 1
    assert tuple(p.fprop_scale.shape) == (2, 128, 16) and p.fprop_scale.dtype == torch.float8_e4m3fn
    # the inference flag is irrelevant for NVFP4
    assert_prepared_equal(dist_moe.prepare_block_scaled_weight(w, NVFP4, inference=True), p)


def test_nvfp4_weight_bytes_match_torch_reference():
    """Packed E2M1 codes (in the GEMMs' word order), E4M3 block scales and both global scales equal the
    formats.md rules."""
    w = weight((2, 128, 256), seed=12)
    w[1, 3, :16] = 0  # an all-zero block: scale clamped to 2^-9, data 0
    p = dist_moe.prepare_block_scaled_weight(w, NVFP4)
    packed, scales, gs, gs_inv = ref_nvfp4_weight(w)
    assert torch.equal(p.global_scale, gs)
    assert torch.equal(p.global_scale_inv, gs_inv)
    assert torch.equal(raw(p.fprop_scale), scales)
    # stored in the GEMMs' word order (formats.md): its words decode to the standard packing, which
    # the stored bytes themselves are not
    assert torch.equal(_prepare.nvfp4_weight_standard_packing(p.fprop_data), packed)
    assert not torch.equal(raw(p.fprop_data), packed)


def test_nvfp4_token_scale_writes_directly_to_strided_output():
    """32x256 per-token NVFP4 into packed rows of a wider buffer (row stride 256 B; a packed row is
    128 q + 16 scales + 4 B inverse, padded to 160): written in place, the bytes of each row equal
    the unstrided [32, 160] result, and the bytes past the packed row are untouched."""
    T, D = 32, 256
    x = weight((T, D), seed=21)
    row = _prepare.nvfp4_packed_row_bytes(D)
    assert row == 160
    dense = _prepare.quantize_nvfp4_token_rows(x)
    assert dense.dtype == torch.uint8 and tuple(dense.shape) == (T, row)
    wide = torch.full((T, 256), 0xA5, dtype=torch.uint8, device=DEV)
    dst = wide[:, :row]
    got = _prepare.quantize_nvfp4_token_rows(x, out=dst)
    assert got.data_ptr() == dst.data_ptr() == wide.data_ptr() and got.stride() == (256, 1)
    meaningful = D // 2 + D // 16 + 4
    assert torch.equal(wide[:, :meaningful], dense[:, :meaningful])
    assert bool((wide[:, row:] == 0xA5).all())
    q, s, inv = _prepare.nvfp4_token_row_views(got, D)
    assert q.data_ptr() == wide.data_ptr() and s.data_ptr() == wide.data_ptr() + D // 2
    assert inv.data_ptr() == wide.data_ptr() + D // 2 + D // 16 and inv.dtype == torch.float32
    # a loose dequantization check: q · scale · token_scale_inv is close to x
    lut = torch.tensor(_E2M1, device=DEV)
    codes = torch.stack([q & 0xF, q >> 4], dim=-1).view(T, D).long()
    vals = lut[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    deq = vals.view(T, D // 16, 16) * s.view(torch.float8_e4m3fn).float()[..., None] * inv[:, None, None]
    rel = (deq.view(T, D) - x.float()).norm() / x.float().norm()
    assert rel < 0.2, rel


def test_nvfp4_token_rows_validation():
    """quantize_nvfp4_token_rows rejects non-BF16 tokens and an out buffer of the wrong dtype or a row stride
    not a multiple of 16."""
    x = weight((4, 256))
    with pytest.raises(TypeError, match="bfloat16"):
        _prepare.quantize_nvfp4_token_rows(x.float())
    with pytest.raises(ValueError, match="out must be a uint8"):
        _prepare.quantize_nvfp4_token_rows(x, out=torch.empty((4, 100), dtype=torch.uint8, device=DEV))
    with pytest.raises(ValueError, match="multiple of 16"):
        buf = torch.empty((4, 168), dtype=torch.uint8, device=DEV)
        _prepare.quantize_nvfp4_token_rows(x, out=buf)


# ---- FP8 blockwise (private format) -----------------------------------------------------------------


@pytest.mark.parametrize("inference", [False, True])
def test_fp8_blockwise_bytes_match_torch_reference(inference):
    """128x128 blocks: fl(amax/448) scales, x·fl(448/amax) data; training adds the transposed copy."""
    w = weight((2, 256, 384), seed=13)
    w[0, :128, :128] = 0  # an all-zero block: scale 1, data 0
    p = _prepare.prepare_block_scaled_weight(w, "fp8_blockwise", inference)
    assert p.format == "fp8_blockwise" and p.source is w
    q, scale = ref_fp8_blockwise(w)
    assert torch.equal(raw(p.fprop_data), q)
    assert torch.equal(p.fprop_scale, scale)
    if inference:
        assert p.dgrad_data is None and p.dgrad_scale is None
    else:
        assert tuple(p.dgrad_data.shape) == (2, 384, 256) and tuple(p.dgrad_scale.shape) == (2, 3, 2)
        assert torch.equal(raw(p.dgrad_data), raw(p.fprop_data).transpose(1, 2).contiguous())
        assert torch.equal(p.dgrad_scale, p.fprop_scale.transpose(1, 2).contiguous())


def test_fp8_blockwise_from_checkpoint_round_trips():
    """A checkpoint (data, scale_inv) taken from a prepared weight gives the same operands."""
    w = weight((2, 256, 256), seed=14)
    p = _prepare.prepare_block_scaled_weight(w, "fp8_blockwise", False)
    c = _prepare.prepare_fp8_blockwise_weight_from_checkpoint(p.fprop_data.clone(), p.fprop_scale.clone())
    assert_prepared_equal(c, p)
    assert c.fprop_data.data_ptr() != p.fprop_data.data_ptr()
    ci = _prepare.prepare_fp8_blockwise_weight_from_checkpoint(p.fprop_data, p.fprop_scale, inference=True)
    assert ci.dgrad_data is None and torch.equal(raw(ci.fprop_data), raw(p.fprop_data))
    with pytest.raises(ValueError, match="scale_inv must have shape"):
        _prepare.prepare_fp8_blockwise_weight_from_checkpoint(p.fprop_data, p.fprop_scale[:, :1].contiguous())
    with pytest.raises(ValueError, match="divisible by 128"):
        _prepare.prepare_block_scaled_weight(weight((2, 128, 192)), "fp8_blockwise", False)
