#!/usr/bin/env python3
"""torch_peer.py: the PyTorch peer of mxlm's GPU trainer (issue 6 item 4).

The same Llama configuration as mxlm's presets (src/nn/llama.c k_presets:
untied head, RMSNorm eps 1e-5, RoPE theta 500000 rotate-half, GQA, SwiGLU, no
biases), trained the way a PyTorch user would train it for speed:

  * precision: FP32 master weights, torch.autocast(bfloat16) for the forward
    and backward (BF16 GEMMs and attention, FP32 reductions, FP32 residual
    stream), the loss on FP32 logits;
  * attention: F.scaled_dot_product_attention(is_causal=True), restricted to
    the flash backend by default (--sdpa auto lets PyTorch choose, e.g. cuDNN);
    key/value heads expanded to the query heads first, as transformers'
    repeat_kv does;
  * torch.compile of the model (forward + backward), --no-compile to skip;
  * AdamW(fused=True), betas (0.9, 0.95), weight decay 0.1 on matrices only,
    global-norm clipping at 1.0 (as mxlm train does);
  * --impl compact (default): a compact hand-written module; --impl hf:
    transformers' LlamaForCausalLM(attn_implementation="sdpa").

Timed: --steps optimizer steps (forward, backward, clip, AdamW, zero_grad)
after --warmup steps (compilation happens there) on one fixed batch of random
tokens [B, T+1] already on the GPU (no data loading), CUDA events around the
timed steps. Prints one line:

  preset, impl, B, T, tokens/s, ms/step, peak memory GiB (max allocated over
  the whole run), MFU vs 989 TFLOP/s (H100/H200 SXM dense BF16)

Model FLOPs per token (PaLM convention, attention not halved for causality):
  6 * (N_nonembed + V*D) + 12 * L * D * T
N_nonembed = the block parameters (mxlm's mx_model_n_params_nonembed), V*D the
LM head (a GEMM; the embedding lookup is not counted). The MFU without the
head term (6 * N_nonembed + 12 L D T) is printed beside it.

  python3 bench/torch_peer.py --preset 125m --batch 16 --seq 1024 --steps 20
"""
import argparse
import json
import math
import sys
import time

# src/nn/llama.c k_presets: name -> (V, D, L, H, KV, F, T)
PRESETS = {
    "tiny": (4096, 128, 4, 4, 2, 384, 128),
    "20m": (50304, 384, 12, 6, 2, 1024, 512),
    "60m": (50304, 512, 20, 8, 4, 1536, 1024),
    "125m": (50304, 768, 16, 12, 4, 2560, 1024),
    "350m": (50304, 1024, 24, 16, 8, 3584, 2048),
    "1b": (128256, 2048, 16, 32, 8, 8192, 2048),
    "llama3.1-8b": (128256, 4096, 32, 32, 8, 14336, 8192),
}
PEAK_BF16 = 989e12
EPS = 1e-5
THETA = 500000.0


def n_nonembed(V, D, L, H, KV, F):
    hd = D // H
    per = 2 * D + D * H * hd * 2 + 2 * D * KV * hd + 3 * D * F  # norms, q+o, k+v, gate+up+down
    return L * per + D  # + final norm


def build_compact(torch, V, D, L, H, KV, F, T, eps=EPS, theta=THETA):
    nn = torch.nn
    Fn = torch.nn.functional
    hd = D // H
    rep = H // KV

    def rmsnorm(x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return w * xf.to(x.dtype)

    def rope(x, cos, sin):  # x [B, h, T, hd]; HF rotate_half
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        rot = torch.cat((-x2, x1), dim=-1)
        return x * cos.to(x.dtype) + rot * sin.to(x.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.Parameter(torch.ones(D))
            self.ln2 = nn.Parameter(torch.ones(D))
            self.q = nn.Linear(D, H * hd, bias=False)
            self.k = nn.Linear(D, KV * hd, bias=False)
            self.v = nn.Linear(D, KV * hd, bias=False)
            self.o = nn.Linear(H * hd, D, bias=False)
            self.gate = nn.Linear(D, F, bias=False)
            self.up = nn.Linear(D, F, bias=False)
            self.down = nn.Linear(F, D, bias=False)

        def forward(self, x, cos, sin):
            B, T_, _ = x.shape
            h = rmsnorm(x, self.ln1)
            q = self.q(h).view(B, T_, H, hd).transpose(1, 2)
            k = self.k(h).view(B, T_, KV, hd).transpose(1, 2)
            v = self.v(h).view(B, T_, KV, hd).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            if hasattr(Fn, "scaled_dot_product_attention"):
                y = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch < 2.0 (only for --check-export on an old CPU torch)
                s = (q @ k.transpose(-2, -1)) * hd ** -0.5
                s = s.masked_fill(torch.ones(T_, T_, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                y = s.softmax(-1) @ v
            x = x + self.o(y.transpose(1, 2).reshape(B, T_, H * hd))
            h = rmsnorm(x, self.ln2)
            return x + self.down(Fn.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, D)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.norm = nn.Parameter(torch.ones(D))
            self.head = nn.Linear(D, V, bias=False)
            inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
            emb = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)

        def forward(self, idx, tgt, return_logits=False):
            T_ = idx.shape[1]
            cos, sin = self.cos[:T_], self.sin[:T_]
            x = self.embed(idx)
            for b in self.blocks:
                x = b(x, cos, sin)
            logits = self.head(rmsnorm(x, self.norm))
            loss = Fn.cross_entropy(logits.float().view(-1, V), tgt.reshape(-1))
            return (loss, logits) if return_logits else loss

    return Llama()


def build_hf(torch, V, D, L, H, KV, F, T):
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    Fn = torch.nn.functional
    kw = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
              num_key_value_heads=KV, head_dim=D // H, max_position_embeddings=T, rms_norm_eps=EPS,
              tie_word_embeddings=False, attention_bias=False, mlp_bias=False, use_cache=False)
    try:
        cfg = LlamaConfig(rope_theta=THETA, **kw)
    except TypeError:  # a transformers that only takes rope_parameters
        cfg = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": THETA}, **kw)
    try:
        inner = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    except (TypeError, AttributeError):
        cfg._attn_implementation = "sdpa"
        inner = LlamaForCausalLM(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, idx, tgt):
            logits = self.m(input_ids=idx, use_cache=False).logits
            return Fn.cross_entropy(logits.float().view(-1, V), tgt.reshape(-1))

    print(f"# transformers {transformers.__version__}, attn_implementation "
          f"{getattr(inner.config, '_attn_implementation', '?')}", file=sys.stderr)
    return Wrap()


def load_safetensors(torch, path):
    """name -> FP32 tensor, read with the standard library (no safetensors package needed)."""
    import struct
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    dts = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    out = {}
    for k, e in hdr.items():
        if k == "__metadata__":
            continue
        b, t = e["data_offsets"]
        buf = bytearray(raw[8 + n + b:8 + n + t])
        out[k] = torch.frombuffer(buf, dtype=dts[e["dtype"]]).reshape(e["shape"]).float()
    return out


def check_export(torch, d, device):
    """The compact model is the model mxlm trains: load an mxlm export into it, FP32, no autocast, and
    compare its logits and loss with DIR/mxlm_reference.json (mxlm's CPU forward)."""
    import os
    cfg = json.load(open(os.path.join(d, "config.json")))
    ref = json.load(open(os.path.join(d, "mxlm_reference.json")))
    V, D, L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
    H, KV, F = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    T = cfg["max_position_embeddings"]
    model = build_compact(torch, V, D, L, H, KV, F, T, eps=cfg["rms_norm_eps"], theta=cfg["rope_theta"])
    w = load_safetensors(torch, os.path.join(d, "model.safetensors"))
    names = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm", "lm_head.weight": "head.weight"}
    sub = {"input_layernorm": "ln1", "post_attention_layernorm": "ln2", "self_attn.q_proj": "q.weight",
           "self_attn.k_proj": "k.weight", "self_attn.v_proj": "v.weight", "self_attn.o_proj": "o.weight",
           "mlp.gate_proj": "gate.weight", "mlp.up_proj": "up.weight", "mlp.down_proj": "down.weight"}
    for i in range(L):
        for k, v in sub.items():
            names[f"model.layers.{i}.{k}.weight"] = f"blocks.{i}.{v}"
    model.load_state_dict({names[k]: t for k, t in w.items()}, strict=True)
    model = model.to(device).eval()
    x = torch.tensor([ref["tokens"]], device=device)
    y = torch.tensor([ref["targets"]], device=device)
    with torch.no_grad():
        loss, logits = model(x, y, return_logits=True)
    got = logits[0].double().cpu()[ref["logits_positions"]]
    want = torch.tensor(ref["logits"], dtype=torch.float64)
    rel = ((got - want).norm() / want.norm()).item()
    dl = abs(loss.item() - ref["loss"])
    ok = rel <= 1e-4 and dl <= 1e-4 * max(1.0, ref["loss"])
    print(f"check-export {d}: compact model FP32 on {device}, {len(ref['tokens'])} tokens: logits normwise rel diff "
          f"{rel:.3e}, loss mxlm {ref['loss']:.7f} torch {loss.item():.7f} (diff {dl:.2e}): "
          f"{'PASS' if ok else 'FAIL'} (tol 1e-4)")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="125m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8, help="B sequences per step")
    ap.add_argument("--seq", type=int, default=0, help="T tokens per sequence (default: the preset's context)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="after the timed steps, N more between cudaProfilerStart/Stop (for ncu --profile-from-start off)")
    ap.add_argument("--impl", default="compact", choices=["compact", "hf"])
    ap.add_argument("--sdpa", default="flash", choices=["flash", "cudnn", "efficient", "math", "auto"],
                    help="SDPA backend (default flash; auto: PyTorch's choice)")
    ap.add_argument("--no-clip", action="store_true", help="skip the global-norm clipping")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    ap.add_argument("--check-export", metavar="DIR", help="no timing: load an `mxlm export --hf DIR --ref-tokens N` "
                    "directory into the compact model (FP32) and compare with mxlm's logits and loss")
    a = ap.parse_args()

    import torch
    if a.check_export:
        if a.device == "cuda" and not torch.cuda.is_available():
            a.device = "cpu"
        if a.device == "cuda":  # exact FP32 GEMMs (torch's default; turned off only if someone turned TF32 on)
            m = torch.backends.cuda.matmul
            try:
                if m.fp32_precision == "tf32":  # torch >= 2.9 (never mix with the legacy flag there)
                    m.fp32_precision = "ieee"
            except Exception:
                if m.allow_tf32:
                    m.allow_tf32 = False
        return check_export(torch, a.check_export, torch.device(a.device))
    V, D, L, H, KV, F, Tp = PRESETS[a.preset]
    T = a.seq or Tp
    if T > Tp:
        print(f"torch_peer: --seq {T} exceeds the preset's context {Tp}", file=sys.stderr)
        return 2
    B = a.batch
    dev = torch.device(a.device)
    torch.manual_seed(1)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    from contextlib import nullcontext
    with (dev if hasattr(dev, "__enter__") else nullcontext()):  # build on the device (torch >= 2.0)
        model = (build_compact if a.impl == "compact" else build_hf)(torch, V, D, L, H, KV, F, T)
    model = model.to(dev)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    n_all = sum(p.numel() for p in model.parameters())
    n_ne = n_nonembed(V, D, L, H, KV, F)
    if n_all != n_ne + 2 * V * D:
        print(f"torch_peer: parameter count {n_all} != expected {n_ne + 2 * V * D}", file=sys.stderr)
        return 2
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    okw = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **okw)
    fwd = model if a.no_compile else torch.compile(model)
    data = torch.randint(0, V, (B, T + 1), device=dev)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    ctx = nullcontext()
    if a.sdpa != "auto":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                           "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[a.sdpa])
    params = list(model.parameters())

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        if not a.no_clip:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    with ctx:
        t0 = time.time()
        for _ in range(a.warmup):
            loss = step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_warm = time.time() - t0
        if dev.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t1 = time.time()
        for _ in range(a.steps):
            loss = step()
        if dev.type == "cuda":
            e1.record()
            torch.cuda.synchronize()
            ms = e0.elapsed_time(e1) / a.steps
        else:
            ms = (time.time() - t1) * 1000 / a.steps
        if a.profile_steps and dev.type == "cuda":  # bench/device_round.sh PARTS=kprof: ncu sees only these
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            for _ in range(a.profile_steps):
                loss = step()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
    last = loss.item()
    tok = B * T
    tps = tok / (ms / 1000)
    fpt = 6 * (n_ne + V * D) + 12 * L * D * T
    fpt_nohead = 6 * n_ne + 12 * L * D * T
    mfu = tps * fpt / PEAK_BF16
    mfu_nh = tps * fpt_nohead / PEAK_BF16
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else float("nan")
    gpu = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print(f"torch_peer {a.preset} impl {a.impl} B {B} T {T}: {tps:,.0f} tok/s, {ms:.2f} ms/step, peak {peak:.1f} GiB, "
          f"MFU {100 * mfu:.1f}% (head counted; {100 * mfu_nh:.1f}% without) | bf16 autocast + fp32 master, "
          f"{'fused ' if okw else ''}AdamW, sdpa {a.sdpa}, compile {'off' if a.no_compile else 'on'}, clip {'off' if a.no_clip else '1.0'}, "
          f"{a.steps} steps after {a.warmup} warm-up ({t_warm:.0f} s), last loss {last:.3f}, torch {torch.__version__}, "
          f"{gpu}")
    if a.json:
        print(json.dumps({"preset": a.preset, "impl": a.impl, "batch": B, "seq": T, "tok_per_s": tps, "ms_per_step": ms,
                          "peak_gib": peak if math.isfinite(peak) else None, "mfu": mfu, "mfu_nohead": mfu_nh, "flops_per_token": fpt,
                          "n_nonembed": n_ne, "n_params": n_all, "sdpa": a.sdpa, "compile": not a.no_compile,
                          "clip": not a.no_clip, "steps": a.steps, "warmup": a.warmup, "loss": last,
                          "torch": torch.__version__, "device": gpu}))
    return 0 if math.isfinite(last) else 1


if __name__ == "__main__":
    sys.exit(main())
