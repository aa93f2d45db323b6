#!/usr/bin/env python3
"""safetensors_check.py: an independent, standard-library-only check of an
`mxlm export --hf` directory (or any Llama safetensors file).

  python3 tools/safetensors_check.py DIR/model.safetensors \
      [--config DIR/config.json] [--expect-dtype F32|BF16] \
      [--reference DIR/mxlm_reference.json] [--tol 1e-4]

1. The container: 8-byte little-endian header length, a JSON object header
   (padded to 8 bytes), every tensor's dtype known, shape a list of
   non-negative integers, data_offsets [begin, end] with end - begin =
   prod(shape) * itemsize, the tensors tiling the data section exactly (no
   gap, no overlap, nothing after the last), as the safetensors library
   requires.
2. With --config: the tensor names and shapes of LlamaForCausalLM for that
   config.json, and nothing else.
3. With --reference: a float64 forward pass of the model written here in pure
   Python after Hugging Face's LlamaForCausalLM (rotate_half RoPE, repeat_kv,
   RMSNorm, SwiGLU), on the reference's tokens; its logits and loss are
   compared with mxlm's (normwise relative error of the stored logits rows
   against --tol, loss difference against --tol * max(1, loss)). Small models
   only (it is pure Python: ~1 s per million multiply-adds).

Exit status 0 if every check passes, 1 otherwise (2: usage / unreadable).
"""
import argparse
import json
import math
import operator
import struct
import sys

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
              "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


class Fail(Exception):
    pass


def read_container(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Fail(f"{path}: {len(raw)} bytes, too short")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if hlen > len(raw) - 8:
        raise Fail(f"{path}: header length {hlen} beyond the file ({len(raw)} bytes)")
    htext = raw[8:8 + hlen]
    if not htext.startswith(b"{"):
        raise Fail(f"{path}: the header does not start with '{{'")
    if (8 + hlen) % 8:
        raise Fail(f"{path}: the data does not start 8-byte aligned (header length {hlen})")
    try:
        header = json.loads(htext.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Fail(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        raise Fail(f"{path}: header is not an object")
    data = raw[8 + hlen:]
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise Fail(f"{path}: __metadata__ must map strings to strings")
    spans = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise Fail(f"{name}: entry must have exactly dtype, shape, data_offsets")
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in DTYPE_SIZE:
            raise Fail(f"{name}: unknown dtype {dt}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise Fail(f"{name}: bad shape {shape}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            raise Fail(f"{name}: bad data_offsets {offs}")
        b, t = offs
        n = 1
        for d in shape:
            n *= d
        if not (0 <= b <= t) or t - b != n * DTYPE_SIZE[dt]:
            raise Fail(f"{name}: data_offsets {offs} do not hold {n} x {dt}")
        spans.append((b, t, name))
    spans.sort()
    pos = 0
    for b, t, name in spans:
        if b != pos:
            raise Fail(f"{name}: starts at {b}, expected {pos} (gap or overlap)")
        pos = t
    if pos != len(data):
        raise Fail(f"data section is {len(data)} bytes, the tensors cover {pos}")
    return header, meta, data


def expected_tensors(cfg):
    D, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim") or D // H
    V = cfg["vocab_size"]
    t = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D]}
    if not cfg.get("tie_word_embeddings", False):
        t["lm_head.weight"] = [V, D]
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = [D]
        t[p + "post_attention_layernorm.weight"] = [D]
        t[p + "self_attn.q_proj.weight"] = [H * hd, D]
        t[p + "self_attn.k_proj.weight"] = [KV * hd, D]
        t[p + "self_attn.v_proj.weight"] = [KV * hd, D]
        t[p + "self_attn.o_proj.weight"] = [D, H * hd]
        t[p + "mlp.gate_proj.weight"] = [F, D]
        t[p + "mlp.up_proj.weight"] = [F, D]
        t[p + "mlp.down_proj.weight"] = [D, F]
    return t


def tensor(header, data, name):
    """The tensor as a list of rows (2-D) or a list (1-D) of Python floats."""
    e = header[name]
    b, t = e["data_offsets"]
    buf = data[b:t]
    dt = e["dtype"]
    if dt == "F32":
        vals = list(struct.unpack(f"<{len(buf) // 4}f", buf))
    elif dt == "F16":
        vals = list(struct.unpack(f"<{len(buf) // 2}e", buf))
    elif dt == "BF16":
        hs = struct.unpack(f"<{len(buf) // 2}H", buf)
        vals = list(struct.unpack(f"<{len(hs)}f", struct.pack(f"<{len(hs)}I", *[h << 16 for h in hs])))
    else:
        raise Fail(f"{name}: dtype {dt} not supported by the forward check")
    shape = e["shape"]
    if len(shape) == 1:
        return vals
    r, c = shape
    return [vals[i * c:(i + 1) * c] for i in range(r)]


def matvec(w, x):
    return [sum(map(operator.mul, row, x)) for row in w]


def rmsnorm(x, w, eps):
    var = sum(v * v for v in x) / len(x)
    s = 1.0 / math.sqrt(var + eps)
    return [v * s * g for v, g in zip(x, w)]


def forward(header, data, cfg, tokens):
    """float64 logits [N][V], as transformers' LlamaForCausalLM computes them."""
    D, L, H = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim") or D // H
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    n_rep = H // KV
    N = len(tokens)
    # LlamaRotaryEmbedding (default rope): inv_freq over even dims, emb = cat(freqs, freqs)
    inv_freq = [1.0 / (theta ** (2 * i / hd)) for i in range(hd // 2)]
    cos = [[math.cos(p * f) for f in inv_freq] * 2 for p in range(N)]
    sin = [[math.sin(p * f) for f in inv_freq] * 2 for p in range(N)]

    def rope(x, p):  # x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1)
        half = hd // 2
        rot = [-v for v in x[half:]] + x[:half]
        return [a * c + r * s for a, r, c, s in zip(x, rot, cos[p], sin[p])]

    emb = tensor(header, data, "model.embed_tokens.weight")
    hs = [list(emb[t]) for t in tokens]
    del emb
    for l in range(L):
        g = lambda n: tensor(header, data, f"model.layers.{l}.{n}.weight")
        wq, wk, wv, wo = g("self_attn.q_proj"), g("self_attn.k_proj"), g("self_attn.v_proj"), g("self_attn.o_proj")
        ln1, ln2 = g("input_layernorm"), g("post_attention_layernorm")
        wg, wu, wd = g("mlp.gate_proj"), g("mlp.up_proj"), g("mlp.down_proj")
        qs, ks, vs = [], [], []
        for p in range(N):
            xn = rmsnorm(hs[p], ln1, eps)
            q, k, v = matvec(wq, xn), matvec(wk, xn), matvec(wv, xn)
            qs.append([rope(q[h * hd:(h + 1) * hd], p) for h in range(H)])
            ks.append([rope(k[h * hd:(h + 1) * hd], p) for h in range(KV)])
            vs.append([v[h * hd:(h + 1) * hd] for h in range(KV)])
        scale = hd ** -0.5
        for p in range(N):
            ao = []
            for h in range(H):
                kvh = h // n_rep  # repeat_kv: kv head j serves query heads j*n_rep .. j*n_rep + n_rep-1
                sc = [sum(map(operator.mul, qs[p][h], ks[j][kvh])) * scale for j in range(p + 1)]
                m = max(sc)
                ex = [math.exp(s - m) for s in sc]
                z = sum(ex)
                o = [0.0] * hd
                for j in range(p + 1):
                    w = ex[j] / z
                    vj = vs[j][kvh]
                    for i in range(hd):
                        o[i] += w * vj[i]
                ao.extend(o)
            attn = matvec(wo, ao)
            hs[p] = [a + b for a, b in zip(hs[p], attn)]
            xn = rmsnorm(hs[p], ln2, eps)
            gt, up = matvec(wg, xn), matvec(wu, xn)
            act = [a / (1.0 + math.exp(-a)) * u for a, u in zip(gt, up)]
            hs[p] = [a + b for a, b in zip(hs[p], matvec(wd, act))]
    fn = tensor(header, data, "model.norm.weight")
    head = tensor(header, data, "lm_head.weight" if "lm_head.weight" in header else "model.embed_tokens.weight")
    return [matvec(head, rmsnorm(h, fn, eps)) for h in hs]


def xent(logits, targets):
    tot = 0.0
    for row, t in zip(logits, targets):
        m = max(row)
        tot += m + math.log(sum(math.exp(v - m) for v in row)) - row[t]
    return tot / len(targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--config")
    ap.add_argument("--expect-dtype")
    ap.add_argument("--reference")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    try:
        header, meta, data = read_container(a.file)
        dts = sorted({e["dtype"] for e in header.values()})
        print(f"container ok: {len(header)} tensors, dtypes {','.join(dts)}, {len(data)} data bytes, metadata {meta}")
        if a.expect_dtype and dts != [a.expect_dtype]:
            raise Fail(f"expected every tensor {a.expect_dtype}, found {dts}")
        cfg = None
        if a.config:
            with open(a.config) as f:
                cfg = json.load(f)
            want = expected_tensors(cfg)
            for n, s in want.items():
                if n not in header:
                    raise Fail(f"missing tensor {n}")
                if header[n]["shape"] != s:
                    raise Fail(f"{n}: shape {header[n]['shape']}, config.json implies {s}")
            extra = sorted(set(header) - set(want))
            if extra:
                raise Fail(f"unexpected tensors: {extra[:5]}")
            print(f"names and shapes ok against {a.config} ({len(want)} tensors)")
        if a.reference:
            if cfg is None:
                raise Fail("--reference needs --config")
            with open(a.reference) as f:
                ref = json.load(f)
            toks, tgts = ref["tokens"], ref["targets"]
            ours = forward(header, data, cfg, toks)
            loss = xent(ours, tgts)
            num = den = 0.0
            worst = 0.0
            for p, row in zip(ref["logits_positions"], ref["logits"]):
                d2 = sum((x - y) ** 2 for x, y in zip(row, ours[p]))
                n2 = sum(y * y for y in ours[p])
                num += d2
                den += n2
                worst = max(worst, max(abs(x - y) for x, y in zip(row, ours[p])))
            rel = math.sqrt(num / den) if den > 0 else float("inf")
            dl = abs(loss - ref["loss"])
            ok = rel <= a.tol and dl <= a.tol * max(1.0, loss)
            print(f"forward (pure Python, float64, HF LlamaForCausalLM semantics) on {len(toks)} tokens: "
                  f"logits rows {len(ref['logits'])}, max abs diff {worst:.3g}, normwise rel diff {rel:.3g}; "
                  f"loss mxlm {ref['loss']:.7f} python {loss:.7f} (diff {dl:.3g}); tol {a.tol:g}: "
                  f"{'PASS' if ok else 'FAIL'}")
            if not ok:
                return 1
        print("PASS")
        return 0
    except Fail as e:
        print(f"FAIL: {e}")
        return 1
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
