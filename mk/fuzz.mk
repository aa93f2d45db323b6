# mk/fuzz.mk: libFuzzer harnesses (clang). `make fuzz` builds them;
# `make fuzz-run FUZZ_SECONDS=20` runs each over its committed seed corpus
# (tests/fuzz/corpus/NAME/) for that long; new corpus entries go to build/fuzz/.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 20
B_FUZZ       := build/fuzz
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,$(B_FUZZ)/%,$(FUZZ_SRC))
CFLAGS_FUZZ  := -std=c11 -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc -g -O1 -fopenmp \
                -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Wall -Wextra -Werror \
                -Wno-unused-parameter -Wno-unused-function -MMD -MP

.PHONY: fuzz fuzz-run
fuzz: $(FUZZ_BINS)

$(B_FUZZ)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_FUZZ) -c -o $@ $<
$(B_FUZZ)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(patsubst %.c,$(B_FUZZ)/obj/%.o,$(LIB_SRC))
	$(FUZZ_CC) $(CFLAGS_FUZZ) -fsanitize=fuzzer -o $@ $(filter %.c %.o,$^) $(LDLIBS)

# Each harness: its seed corpus (read-only) plus a scratch corpus; exits non-zero on a crash.
# The tokenizer harness reads the tiny rank file (built by `make`).
fuzz-run: fuzz build/data/tiny.tiktoken
	@set -e; for b in $(FUZZ_BINS); do n=$${b##*/fuzz_}; mkdir -p $(B_FUZZ)/corpus/$$n; \
	  echo "== fuzz $$n ($(FUZZ_SECONDS) s)"; \
	  OMP_NUM_THREADS=1 $$b -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -print_final_stats=1 \
	      -artifact_prefix=$(B_FUZZ)/crash-$$n- $(B_FUZZ)/corpus/$$n tests/fuzz/corpus/$$n 2>&1 \
	      | grep -E "^(stat::number_of_executed_units|==|SUMMARY|Done)" || true; \
	  test -z "$$(ls $(B_FUZZ)/crash-$$n-* 2>/dev/null)" || { echo "fuzz $$n: crash, see $(B_FUZZ)/crash-$$n-*"; exit 1; }; \
	done
# Keep the fuzz objects (a bare .SECONDARY: would make every target of the build secondary, so
# a deleted object or binary was not rebuilt while its dependents looked up to date).
.SECONDARY: $(patsubst %.c,$(B_FUZZ)/obj/%.o,$(LIB_SRC))
