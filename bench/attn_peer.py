#!/usr/bin/env python3
"""attn_peer.py: PyTorch's scaled_dot_product_attention, the peer of mxlm's flash attention
(build/cuda/tests/gpu/attn --bench), on the issue's shapes.

BF16, causal (is_causal=True), grouped-query through enable_gqa=True (no repeated k/v) where the
backend takes it, else (marked 'rep') with k/v repeated to H heads beforehand (outside the timing).
Tensors are made [B, T, H, d] (mxlm's token-major layout) and passed as the [B, H, T, d] views
that a model's q.view(B, T, H, d).transpose(1, 2) gives. Timing: CUDA events, median of 20 runs
after 3 warm-ups; forward alone, and forward + backward (out.backward(dout)); backward = the
difference. FLOPs as ours: causal counted as half, fwd 4 B H T^2 d / 2, bwd 2.5x fwd.
Rows: the default dispatch, then each backend forced (FLASH, CUDNN, EFFICIENT) where it runs.
Usage: python3 bench/attn_peer.py
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(8, 12, 4, 1024, 64), (4, 16, 8, 2048, 64), (4, 32, 8, 2048, 64), (2, 32, 8, 4096, 128)]
REPS = 20


def median_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def run(B, H, KV, T, d, backend):
    dev = "cuda"
    q = torch.randn(B, T, H, d, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    k = torch.randn(B, T, KV, d, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    v = torch.randn(B, T, KV, d, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    do = torch.randn(B, T, H, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    ctx = sdpa_kernel([backend]) if backend is not None else None
    note = "gqa"

    def call(kk, vv, gqa):
        return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)

    kk, vv, gqa = k, v, True
    try:
        if ctx:
            with sdpa_kernel([backend]):
                call(kk, vv, gqa)
        else:
            call(kk, vv, gqa)
    except RuntimeError:
        # backend without GQA: repeat k, v to H heads (outside the timing)
        kk = k.detach().repeat_interleave(H // KV, dim=1).requires_grad_()
        vv = v.detach().repeat_interleave(H // KV, dim=1).requires_grad_()
        gqa, note = False, "rep"
        try:
            if ctx:
                with sdpa_kernel([backend]):
                    call(kk, vv, gqa)
            else:
                call(kk, vv, gqa)
        except RuntimeError as e:
            return None, str(e).split("\n")[0][:60]

    def fwd():
        with torch.no_grad():
            call(kk, vv, gqa)

    def fwdbwd():
        o = call(kk, vv, gqa)
        o.backward(do)

    if ctx:
        with sdpa_kernel([backend]):
            tf, tfb = median_ms(fwd), median_ms(fwdbwd)
    else:
        tf, tfb = median_ms(fwd), median_ms(fwdbwd)
    return (tf, tfb - tf), note


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    print(f"{'shape B,Hq/Hkv,T,d':<22} {'backend':<10} {'kv':<4} {'fwd ms':>9} {'fwd TF/s':>9} {'bwd ms':>9} "
          f"{'bwd TF/s':>9} {'f+b TF/s':>9}")
    for (B, H, KV, T, d) in SHAPES:
        fl = 4.0 * B * H * T * T * d / 2
        for name, be in [("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
            r, note = run(B, H, KV, T, d, be)
            sh = f"({B}, {H}/{KV}, {T}, {d})"
            if r is None:
                print(f"{sh:<22} {name:<10} n/a  ({note})")
                continue
            tf, tb = r
            print(f"{sh:<22} {name:<10} {note:<4} {tf:9.3f} {fl / tf * 1e-9:9.1f} {tb:9.3f} {2.5 * fl / tb * 1e-9:9.1f} "
                  f"{3.5 * fl / (tf + tb) * 1e-9:9.1f}")
            sys.stdout.flush()
        # which kernels the default dispatch runs (one forward + backward under the profiler)
        q = torch.randn(B, H, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, KV, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, KV, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
            torch.cuda.synchronize()
        names = sorted({e.name[:70] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                        and ("attn" in e.name.lower() or "flash" in e.name.lower() or "fmha" in e.name.lower()
                             or "sdpa" in e.name.lower() or "cudnn" in e.name.lower())})
        print("  default kernels:", "; ".join(names) if names else "(none matched)")
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
