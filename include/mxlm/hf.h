/*
 * hf.h: Hugging Face interop (src/interop/hf.c). A model directory in the
 * layout of transformers' LlamaForCausalLM:
 *
 *   DIR/config.json        architectures ["LlamaForCausalLM"], model_type
 *                          "llama", hidden_size, intermediate_size, ...
 *   DIR/model.safetensors  8-byte little-endian header length, a JSON header
 *                          {name: {dtype, shape, data_offsets}} padded with
 *                          spaces to a multiple of 8 bytes, then the data.
 *
 * Tensor names (i = 0 .. L-1), every matrix [out, in] row-major as ours:
 *   model.embed_tokens.weight                     [V, D]
 *   model.layers.i.input_layernorm.weight         [D]
 *   model.layers.i.self_attn.{q,k,v,o}_proj.weight [H*hd, D] [KV*hd, D] x2 [D, H*hd]
 *   model.layers.i.post_attention_layernorm.weight [D]
 *   model.layers.i.mlp.{gate,up,down}_proj.weight [F, D] x2 [D, F]
 *   model.norm.weight                             [D]
 *   lm_head.weight                                [V, D]
 * Our RoPE is HF's rotate-half convention and our matrices are [out, in]
 * like torch.nn.Linear: no permutation either way.
 *
 * Library code: errors are returned (mx_fail), never printed.
 */
#ifndef MXLM_HF_H
#define MXLM_HF_H
#include "mxlm/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write DIR/model.safetensors and DIR/config.json (DIR is created if
 * missing; each file atomically: temporary file, fsync, rename). Tensors are
 * F32 (bit-exact), or BF16 with round-to-nearest-even (mx_bf16_from_f32)
 * when bf16 != 0. */
int mx_hf_export(const mx_llama* m, const char* dir, int bf16);

/* The model configuration described by DIR/config.json (name "hf", seq_len
 * = max_position_embeddings). Refuses what our model cannot represent: a
 * head_dim other than hidden_size / heads, rope scaling other than
 * "default", biases, an activation other than silu. */
int mx_hf_read_config(const char* dir, mx_model_config* c);

/* Load DIR (config.json + model.safetensors with F32, BF16 or F16 tensors)
 * into m->params. The config must match m->cfg (the first mismatching key
 * is named; max_position_embeddings is not compared: RoPE tables do not
 * depend on it); every tensor must be present with its shape (lm_head may
 * be absent when tie_word_embeddings is true: the embedding is copied).
 * Truncated or corrupt files, missing tensors and wrong shapes are refused
 * with MX_EFORMAT before m->params is touched. */
int mx_hf_load(const char* dir, mx_llama* m);

/* The HF name of parameter tensor t (MX_P_*) of block `layer` (ignored for
 * the global tensors), into buf. */
void mx_hf_tensor_name(int t, int layer, char* buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
