# mxlm build. `make` builds ./mxlm: the CPU build, or the CUDA build where nvcc and an NVIDIA GPU
# are both present (MXLM_GPU=0 or 1 overrides the detection); `make cuda` builds ./mxlm with the GPU
# path; `make test` builds and runs the CPU tests (on build/cpu/mxlm), plain and under ASan+UBSan.
CC      ?= gcc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
OPT     ?= -O2
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS_COMMON := -std=c11 -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc $(WARN) -g -fopenmp -MMD -MP
LDLIBS  := -lzstd -lz -lm -lpthread -fopenmp

LIB_SRC  := $(sort $(wildcard src/mx/*.c src/nn/*.c src/train/*.c src/data/*.c src/interop/*.c src/study/*.c src/util/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
CU_SRC   := $(sort $(wildcard src/cuda/*.cu src/cuda/*/*.cu))

# ---- variants: cpu (default), asan, cuda -------------------------------------
B_CPU  := build/cpu
B_ASAN := build/asan
B_CUDA := build/cuda
CFLAGS_CPU  := $(CFLAGS_COMMON) $(OPT) -march=x86-64-v2
CFLAGS_ASAN := $(CFLAGS_COMMON) -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
CFLAGS_CUDA := $(CFLAGS_CPU) -DMXLM_CUDA -I$(CUDA_HOME)/include

objs = $(patsubst %.c,$(1)/%.o,$(2))

.PHONY: all cuda test test-asan test-cpu test-gpu bench clean help deps
# `make` alone builds ./mxlm (the README's first command): deps below is not the default goal.
.DEFAULT_GOAL := all
# What the build, the main job and `make test` need on Debian 12 (the README's first command installs the
# same list: make itself comes with build-essential). The tests call zstd, gzip, python3 (stdlib only),
# md5sum/timeout/truncate (coreutils); ASan/UBSan and OpenMP come with gcc.
DEPS_APT := build-essential libzstd-dev zlib1g-dev zstd gzip python3 coreutils
deps:
	$(if $(filter 0,$(shell id -u)),,sudo) apt-get update
	$(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y --no-install-recommends $(DEPS_APT)
all: mxlm

MXLM_GPU ?= $(shell [ -n "$(NVCC)" ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo 1 || echo 0)
$(B_CPU)/mxlm: $(call objs,$(B_CPU),$(LIB_SRC) $(CLI_SRC))
	$(CC) -o $@ $^ $(LDLIBS)
ifeq ($(MXLM_GPU),1)
mxlm: $(B_CUDA)/mxlm
	cp $< $@
else
mxlm: $(B_CPU)/mxlm
	cp $< $@
endif

$(B_CPU)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CPU) -c -o $@ $<
$(B_ASAN)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -c -o $@ $<

$(B_CPU)/tests/run: $(call objs,$(B_CPU),$(LIB_SRC) $(TEST_SRC))
	$(CC) -o $@ $^ $(LDLIBS)
$(B_ASAN)/tests/run: $(call objs,$(B_ASAN),$(LIB_SRC) $(TEST_SRC))
	$(CC) -fsanitize=address,undefined -o $@ $^ $(LDLIBS)
$(B_ASAN)/mxlm: $(call objs,$(B_ASAN),$(LIB_SRC) $(CLI_SRC))
	$(CC) -fsanitize=address,undefined -o $@ $^ $(LDLIBS)

# The README's test command: both builds, one summary line at the end.
test: mxlm $(B_CPU)/mxlm $(B_CPU)/tests/run $(B_ASAN)/tests/run $(B_ASAN)/mxlm
	@bash tests/run.sh
test-cpu: mxlm $(B_CPU)/mxlm $(B_CPU)/tests/run
	OMP_WAIT_POLICY=passive MXLM_BIN=$(B_CPU)/mxlm $(B_CPU)/tests/run $(T)
test-asan: $(B_ASAN)/tests/run $(B_ASAN)/mxlm
	OMP_WAIT_POLICY=passive MXLM_BIN=$(B_ASAN)/mxlm $(B_ASAN)/tests/run $(T)

# Fragments owned by parts of the project (data preparation, CUDA build).
include $(sort $(wildcard mk/*.mk))

clean:
	rm -rf build mxlm

help:
	@echo "make          build ./mxlm (CPU; CUDA where nvcc and a GPU are present)"; \
	 echo "make test     CPU tests, plain and ASan+UBSan";     \
	 echo "make cuda     build ./mxlm with the GPU path (nvcc)"; \
	 echo "make test-gpu GPU tests (on a machine with an NVIDIA GPU)"

-include $(shell find build -name '*.d' 2>/dev/null)
