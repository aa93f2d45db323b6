#!/usr/bin/env python3
"""Build the PyTorch reference for mxlm's Llama 3 (tests/fixtures/llama_micro.bin).

The model is written out in plain PyTorch, equation for equation as HF
transformers' LlamaForCausalLM (modeling_llama.py): RMSNorm (eps 1e-5, weight
after normalisation), RoPE with rotate_half and theta 500000, causal GQA via
repeat_kv, SwiGLU MLP, final norm, untied head, no biases; mean cross-entropy
over every position. It runs in float64 so the file is the exact answer to
compare our FP32 implementation against.

Weights are random (seeded), in mxlm's storage order (include/mxlm/model.h):
embed [V,D]; attn_norm [L,D]; wq [L,H*hd,D]; wk [L,KV*hd,D]; wv [L,KV*hd,D];
wo [L,D,H*hd]; ffn_norm [L,D]; w_gate [L,F,D]; w_up [L,F,D]; w_down [L,D,F];
final_norm [D]; head [V,D].

File (little-endian): b"MXLMFIX1", int32 V D L H KV F T B, float64 rope_theta,
float64 eps, int32 tokens[B*T], int32 targets[B*T], float32 params[n],
float32 loss, float32 logits[B*T*V], float32 grads[n].

Usage: python3 tools/torch_fixture.py [out.bin]   (Debian: apt-get install python3-torch)
"""
import struct
import sys

import torch

V, D, L, H, KV, F, T, B = 96, 64, 2, 4, 2, 96, 16, 2
THETA, EPS = 500000.0, 1e-5
hd = D // H
torch.manual_seed(1234)
dt = torch.float64


def rnd(*shape, std=0.05):
    return (torch.randn(*shape, dtype=torch.float32) * std).to(dt)


P = {
    "embed": rnd(V, D, std=1.0),
    "attn_norm": (1.0 + 0.1 * torch.randn(L, D)).to(dt),
    "wq": rnd(L, H * hd, D, std=0.15),
    "wk": rnd(L, KV * hd, D, std=0.15),
    "wv": rnd(L, KV * hd, D, std=0.15),
    "wo": rnd(L, D, H * hd, std=0.1),
    "ffn_norm": (1.0 + 0.1 * torch.randn(L, D)).to(dt),
    "w_gate": rnd(L, F, D, std=0.15),
    "w_up": rnd(L, F, D, std=0.15),
    "w_down": rnd(L, D, F, std=0.1),
    "final_norm": (1.0 + 0.1 * torch.randn(D)).to(dt),
    "head": rnd(V, D, std=0.1),
}
ORDER = ["embed", "attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down", "final_norm", "head"]
# the float32 values are what the C side loads: make float64 equal to them
for k in ORDER:
    P[k] = P[k].to(torch.float32).to(dt).requires_grad_(True)

tokens = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))


def rmsnorm(x, w):  # LlamaRMSNorm
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + EPS))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


# LlamaRotaryEmbedding (default rope type): inv_freq in float32 as HF computes it
inv_freq = 1.0 / (THETA ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
pos = torch.arange(T, dtype=torch.float32)
freqs = torch.outer(pos, inv_freq)  # [T, hd/2] float32 angles
emb = torch.cat((freqs, freqs), dim=-1).to(dt)
cos, sin = emb.cos(), emb.sin()  # [T, hd]


def repeat_kv(x, n):
    b, kvh, t, d = x.shape
    return x[:, :, None, :, :].expand(b, kvh, n, t, d).reshape(b, kvh * n, t, d)


def forward():
    x = P["embed"][tokens]  # [B, T, D]
    mask = torch.full((T, T), float("-inf"), dtype=dt).triu(1)
    for l in range(L):
        h = rmsnorm(x, P["attn_norm"][l])
        q = (h @ P["wq"][l].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ P["wk"][l].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ P["wv"][l].T).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        att = (q @ k.transpose(2, 3)) / (hd ** 0.5) + mask
        att = torch.softmax(att, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + o @ P["wo"][l].T
        h = rmsnorm(x, P["ffn_norm"][l])
        g = h @ P["w_gate"][l].T
        u = h @ P["w_up"][l].T
        x = x + (torch.nn.functional.silu(g) * u) @ P["w_down"][l].T
    x = rmsnorm(x, P["final_norm"])
    logits = x @ P["head"].T  # [B, T, V]
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))
    return logits, loss


logits, loss = forward()
loss.backward()

out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/llama_micro.bin"
with open(out, "wb") as f:
    f.write(b"MXLMFIX1")
    f.write(struct.pack("<8i", V, D, L, H, KV, F, T, B))
    f.write(struct.pack("<2d", THETA, EPS))
    f.write(tokens.to(torch.int32).numpy().astype("<i4").tobytes())
    f.write(targets.to(torch.int32).numpy().astype("<i4").tobytes())
    for k in ORDER:
        f.write(P[k].detach().to(torch.float32).numpy().astype("<f4").tobytes())
    f.write(struct.pack("<f", float(loss)))
    f.write(logits.detach().to(torch.float32).numpy().astype("<f4").tobytes())
    for k in ORDER:
        f.write(P[k].grad.to(torch.float32).numpy().astype("<f4").tobytes())
print(f"{out}: loss {float(loss):.9f}, V {V} D {D} L {L} H {H}/{KV} F {F} T {T} B {B}")
