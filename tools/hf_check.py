#!/usr/bin/env python3
"""hf_check.py: load an `mxlm export --hf DIR --ref-tokens N` directory with
Hugging Face transformers' LlamaForCausalLM (torch float32, no TF32) and
compare its logits and loss with mxlm's own (DIR/mxlm_reference.json, our
CPU forward in exact FP32).

  python3 tools/hf_check.py DIR [--device cuda|cpu] [--attn eager|sdpa]
                                [--tol 1e-4] [--loss-tol 1e-4]

Prints the versions, the model as transformers read it, then: max abs logit
difference, normwise relative difference ||hf - mxlm||_F / ||mxlm||_F over
the stored logits rows, the worst row's normwise relative difference, the
mean cross-entropy both ways, and PASS/FAIL: PASS when the normwise relative
difference <= --tol (default 1e-4) and |loss_hf - loss_mxlm| <= --loss-tol *
max(1, loss). Both sides compute in FP32 with different summation orders
(and, on the GPU, cuBLAS kernels): differences of ~1e-6 relative are
expected; a layout or convention error (RoPE pairing, head order, a swapped
projection) gives O(1).

Exit status: 0 PASS, 1 FAIL, 2 could not run (missing files, imports).
"""
import argparse
import json
import math
import os
import sys


def exact_fp32(torch):
    """FP32 matmuls without TF32 (torch's default; turned off here only if someone turned it on). Uses the
    new fp32_precision API where it exists (torch >= 2.9: mixing it with the legacy allow_tf32 flag is an
    error there), the legacy flag otherwise. Returns what it found, for the log."""
    m = torch.backends.cuda.matmul
    try:
        prec = m.fp32_precision  # torch >= 2.9
        if prec == "tf32":
            m.fp32_precision = "ieee"
        return f"cuda matmul fp32_precision {m.fp32_precision}"
    except Exception:
        pass
    try:
        if m.allow_tf32:
            m.allow_tf32 = False
        return f"cuda matmul allow_tf32 {m.allow_tf32}"
    except Exception as e:  # pragma: no cover - depends on the torch build
        return f"cuda matmul precision flags not readable ({e})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="directory written by mxlm export --hf ... --ref-tokens N")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"], help="attention implementation")
    ap.add_argument("--tol", type=float, default=1e-4, help="normwise relative logits tolerance (default 1e-4)")
    ap.add_argument("--loss-tol", type=float, default=1e-4, help="loss tolerance, relative to max(1, loss)")
    a = ap.parse_args()

    ref_path = os.path.join(a.dir, "mxlm_reference.json")
    for f in ("config.json", "model.safetensors", "mxlm_reference.json"):
        if not os.path.exists(os.path.join(a.dir, f)):
            print(f"hf_check: {os.path.join(a.dir, f)} is missing (run mxlm export --hf DIR --run RUN --ref-tokens N)",
                  file=sys.stderr)
            return 2
    try:
        import torch
        import transformers
        from transformers import LlamaForCausalLM
    except ImportError as e:
        print(f"hf_check: {e}", file=sys.stderr)
        return 2
    with open(ref_path) as f:
        ref = json.load(f)

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    flags = exact_fp32(torch)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(0)})" if device.startswith("cuda") else "")
          + f", attn_implementation {a.attn}, {flags}")
    model = LlamaForCausalLM.from_pretrained(a.dir, attn_implementation=a.attn)
    model = model.to(device=device, dtype=torch.float32).eval()
    cfg = model.config
    print(f"loaded: hidden {cfg.hidden_size}, layers {cfg.num_hidden_layers}, heads {cfg.num_attention_heads}/"
          f"{cfg.num_key_value_heads}, ffn {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
          f"eps {cfg.rms_norm_eps}, params {sum(p.numel() for p in model.parameters())}")

    # RoPE as transformers set it up: theta^(-2i/hd)
    hd = cfg.hidden_size // cfg.num_attention_heads
    rope = getattr(getattr(model, "model", None), "rotary_emb", None)
    inv = getattr(rope, "inv_freq", None) if rope is not None else None
    theta = json.load(open(os.path.join(a.dir, "config.json"))).get("rope_theta", 10000.0)
    if inv is not None:
        want = torch.tensor([theta ** (-2.0 * i / hd) for i in range(hd // 2)], dtype=torch.float64)
        err = ((inv.detach().double().cpu() - want).abs() / want).max().item()
        print(f"rope inv_freq vs theta {theta:g}: max rel diff {err:.2e}")
        if err > 1e-5:
            print("FAIL: transformers did not set up the default RoPE with our theta "
                  "(check rope_theta / rope_scaling handling of this transformers version)")
            return 1

    toks = ref["tokens"]
    tgts = ref["targets"]
    ids = torch.tensor([toks], dtype=torch.long, device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double().cpu()  # [N, V]
    tg = torch.tensor(tgts, dtype=torch.long)
    loss_hf = torch.nn.functional.cross_entropy(logits, tg).item()
    loss_mx = float(ref["loss"])

    pos = ref["logits_positions"]
    rows = [[float("nan") if v is None else v for v in row] for row in ref["logits"]]
    ours = torch.tensor(rows, dtype=torch.float64)  # [P, V] (null in the file = non-finite)
    hf = logits[pos]
    if torch.isnan(ours).any():
        print("FAIL: the reference holds non-finite logits")
        return 1
    d = hf - ours
    max_abs = d.abs().max().item()
    rel = (d.norm() / ours.norm()).item()
    row_rel = (d.norm(dim=1) / ours.norm(dim=1)).max().item()
    dl = abs(loss_hf - loss_mx)
    losses_mx = torch.tensor(ref["losses"], dtype=torch.float64)
    losses_hf = torch.nn.functional.cross_entropy(logits, tg, reduction="none")
    max_tok = (losses_hf - losses_mx).abs().max().item()

    ok = rel <= a.tol and dl <= a.loss_tol * max(1.0, loss_mx)
    print(f"tokens {len(toks)} ({ref.get('source', '?')}), logits rows compared {len(pos)} x {ours.shape[1]}")
    print(f"max abs diff {max_abs:.3e}; normwise rel diff {rel:.3e} (worst row {row_rel:.3e}); "
          f"per-token loss max diff {max_tok:.3e}")
    print(f"loss mxlm {loss_mx:.7f}, transformers {loss_hf:.7f}, diff {dl:.3e}")
    print(f"{'PASS' if ok else 'FAIL'} (tolerance: normwise rel {a.tol:g}, loss {a.loss_tol:g} x max(1, loss))")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
