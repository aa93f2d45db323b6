# Data: the tiny tokenizer and its shards from the embedded corpus (data/kjv.jsonl.gz).
# `make` (all) builds them after ./mxlm; deterministic; a few seconds.
TINY_CORPUS := data/kjv.jsonl.gz
all: build/data/tiny_train.bin build/data/tiny_val.bin

build/data/tiny.tiktoken: $(TINY_CORPUS) mxlm
	@mkdir -p build/data
	./mxlm bpe --vocab 4096 --val-fraction 0.05 --out $@ $(TINY_CORPUS)

build/data/tiny_train.bin build/data/tiny_val.bin &: build/data/tiny.tiktoken $(TINY_CORPUS)
	./mxlm prep --quiet --replace --ranks build/data/tiny.tiktoken --pattern r50k --val-fraction 0.05 \
	    --shard-tokens 2000000000 --train-pattern build/data/tiny_train.bin --val-pattern build/data/tiny_val.bin $(TINY_CORPUS)

.PHONY: tokenizers
tokenizers:
	tools/fetch_tokenizers.sh

# the tests read the tiny shards (tests/test_data.c and the trainer's)
test test-cpu test-asan: build/data/tiny_train.bin build/data/tiny_val.bin
