# mk/cuda.mk: the CUDA build (make cuda, make test-gpu).
# `make cuda` builds ./mxlm with the GPU path (sm_90a, cuBLASLt); it fails with a
# clear message where nvcc is missing. `make test-gpu` builds and runs the GPU
# test programs against the CPU library: build/cuda/tests/gpu/run (quantizers,
# GEMMs: tests/gpu/main_run.cu) and build/cuda/tests/gpu/layers (the model
# layers, tests/gpu/main_layers.cu), then the trainer scripts tests/gpu/curves.sh
# (GPU vs CPU loss curves), telemetry.sh (GPU vs CPU telemetry lines) and dist.sh
# (the NCCL engine; libnccl.so.2 on the loader path, NCCL_INC for the ABI check;
# its 2-GPU part where 2 GPUs are present), all through tests/gpu/run_all.sh (logs in
# build/test-gpu/). They need an H100/H200.
# ---- CUDA ---------------------------------------------------------------------
NVCC_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
NVCCFLAGS := -std=c++17 -O3 $(NVCC_ARCH) -Iinclude -Isrc \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter -DMXLM_CUDA -lineinfo
# The quantizers must match the CPU bit for bit: no add/multiply contraction.
NVCC_EXACT := --fmad=false
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++ -ldl -lrt
# The two GPU test programs (harness: tests/gpu/test.cuh; one tests/gpu/test_<twin>.cu per source).
GPU_TEST_SRC := tests/gpu/main_run.cu tests/gpu/test_mxfp4.cu tests/gpu/test_fp8.cu tests/gpu/test_nvfp4.cu tests/gpu/test_gemm.cu
GPU_LAYER_TEST_SRC := tests/gpu/main_layers.cu tests/gpu/test_mxfp4.cu \
                      $(addprefix tests/gpu/test_,$(addsuffix .cu,embedding rmsnorm rope attention swiglu xent adamw linear llama))
CU_OBJ := $(patsubst %.cu,$(B_CUDA)/%.o,$(CU_SRC))

define need_nvcc
	@if [ -z "$(NVCC)" ]; then echo "make $@: nvcc not found (set NVCC=/path/to/nvcc or install the CUDA toolkit)" >&2; exit 1; fi
	@if [ -z "$(CU_SRC)" ]; then echo "make $@: no CUDA sources (src/cuda/**/*.cu)" >&2; exit 1; fi
endef

.PHONY: cuda mxlm-cuda gpu-test-bin gpu-layers-bin test-gpu-layers
cuda:
	$(need_nvcc)
	@$(MAKE) --no-print-directory mxlm-cuda
	cp $(B_CUDA)/mxlm mxlm

mxlm-cuda: $(B_CUDA)/mxlm
$(B_CUDA)/mxlm: $(call objs,$(B_CUDA),$(LIB_SRC) $(CLI_SRC)) $(CU_OBJ)
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
$(B_CUDA)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CUDA) -c -o $@ $<
# Exactly the code of the former quant.cu and layers.cu (the kernels checked bit for bit against
# the CPU): the quantizers, the layers, AdamW. llama.o's one kernel is the residual add of
# layers.cu (the rest of llama.cu is host code, which the flag does not touch); the NVFP4 and MXFP8
# quantizers, MXFP4's reference form and the standalone rotation (nvfp4, mxfp8, mxfp4_ref, hadamard) likewise. Not gemm, linear,
# attention_gemm, dist, bench, lt.
NVCC_EXACT_OBJ := mx/mxfp4 mx/fold mx/fp8 mx/nvfp4 mx/mxfp8 mx/mxfp4_ref mx/hadamard nn/embedding nn/rmsnorm nn/rope nn/attention nn/swiglu nn/xent nn/llama nn/decode \
                  train/adamw
$(patsubst %,$(B_CUDA)/src/cuda/%.o,$(NVCC_EXACT_OBJ)): NVCCFLAGS += $(NVCC_EXACT)
$(B_CUDA)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

# GPU test program: the CUDA library + the CPU reference (src/mx) + tests/gpu.
$(B_CUDA)/tests/gpu/run: $(call objs,$(B_CUDA),$(LIB_SRC)) $(CU_OBJ) $(patsubst %.cu,$(B_CUDA)/%.o,$(GPU_TEST_SRC))
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
# GPU layer tests: the CUDA library + the whole CPU library (src/nn, src/train) + the layer tests.
$(B_CUDA)/tests/gpu/layers: $(call objs,$(B_CUDA),$(LIB_SRC)) $(CU_OBJ) $(patsubst %.cu,$(B_CUDA)/%.o,$(GPU_LAYER_TEST_SRC))
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
gpu-test-bin:
	$(need_nvcc)
	@$(MAKE) --no-print-directory $(B_CUDA)/tests/gpu/run $(B_CUDA)/tests/gpu/layers
gpu-layers-bin:
	$(need_nvcc)
	@$(MAKE) --no-print-directory $(B_CUDA)/tests/gpu/layers

# Both programs, then the 100-step GPU-vs-CPU curves of the trainer (tests/gpu/curves.sh, with
# ./mxlm from the CUDA build); the exit status fails if any fails.
test-gpu:
	$(need_nvcc)
	@$(MAKE) --no-print-directory $(B_CUDA)/tests/gpu/run $(B_CUDA)/tests/gpu/layers $(B_CUDA)/tests/gpu/attn \
	  $(B_CUDA)/mxlm build/data/tiny_train.bin
	@MXLM=$(B_CUDA)/mxlm GPU_RUN=$(B_CUDA)/tests/gpu/run GPU_LAYERS=$(B_CUDA)/tests/gpu/layers \
	  GPU_ATTN=$(B_CUDA)/tests/gpu/attn T="$(T)" \
	  bash tests/gpu/run_all.sh
test-gpu-layers:
	$(need_nvcc)
	@$(MAKE) --no-print-directory $(B_CUDA)/tests/gpu/layers
	OMP_WAIT_POLICY=passive $(B_CUDA)/tests/gpu/layers $(T)

# The flash attention's test and benchmark (tests/gpu/test_attention_flash.cu): the CUDA library + the
# CPU library (src/nn/attention.c is the reference). `make test-gpu-attn [T=substring]`;
# `build/cuda/tests/gpu/attn --bench` times it (docs/gpu.md).
GPU_ATTN_TEST_SRC := tests/gpu/test_attention_flash.cu
$(B_CUDA)/tests/gpu/attn: $(call objs,$(B_CUDA),$(LIB_SRC)) $(CU_OBJ) $(patsubst %.cu,$(B_CUDA)/%.o,$(GPU_ATTN_TEST_SRC))
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
.PHONY: gpu-attn-bin test-gpu-attn
gpu-attn-bin:
	$(need_nvcc)
	@$(MAKE) --no-print-directory $(B_CUDA)/tests/gpu/attn
test-gpu-attn:
	$(need_nvcc)
	@$(MAKE) --no-print-directory $(B_CUDA)/tests/gpu/attn
	OMP_WAIT_POLICY=passive $(B_CUDA)/tests/gpu/attn $(T)
