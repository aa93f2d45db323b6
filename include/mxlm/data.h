/*
 * data.h: the embedded corpus and the tiny tokenizer, shared with the trainer.
 *
 * The tiny tokenizer: byte-level BPE trained by `mxlm bpe` on the embedded
 * corpus (data/kjv.jsonl.gz), GPT-2 (r50k) pre-tokenization. Ids 0..255 are
 * the single bytes, 256..4094 the merges in training order, 4095 the
 * end-of-text token placed before every document... (see docs/data.md).
 * `make` writes build/data/tiny.tiktoken, build/data/tiny_train.bin and
 * build/data/tiny_val.bin (llm.c format, version 1).
 */
#ifndef MXLM_DATA_H
#define MXLM_DATA_H

#define MX_TINY_VOCAB 4096
#define MX_TINY_EOT 4095
#define MX_TINY_RANKS "build/data/tiny.tiktoken"
#define MX_TINY_TRAIN "build/data/tiny_train.bin"
#define MX_TINY_VAL "build/data/tiny_val.bin"

#endif
