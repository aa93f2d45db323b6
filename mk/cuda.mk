# mk/cuda.mk: the CUDA build (make cuda, make test-gpu).
# ---- CUDA ---------------------------------------------------------------------
NVCCFLAGS := -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter -DMXLM_CUDA -lineinfo
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl -lrt

cuda:
ifeq ($(NVCC),)
	@echo "make cuda: nvcc not found (set NVCC=/path/to/nvcc or install the CUDA toolkit)" >&2; exit 1
else ifeq ($(CU_SRC),)
	@echo "make cuda: no CUDA sources yet (src/cuda/*.cu); the GPU path is not built" >&2; exit 1
else
	@$(MAKE) --no-print-directory mxlm-cuda
	cp $(B_CUDA)/mxlm mxlm
endif

.PHONY: mxlm-cuda
mxlm-cuda: $(B_CUDA)/mxlm
$(B_CUDA)/mxlm: $(call objs,$(B_CUDA),$(LIB_SRC) $(CLI_SRC)) $(patsubst %.cu,$(B_CUDA)/%.o,$(CU_SRC))
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
$(B_CUDA)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CUDA) -c -o $@ $<
$(B_CUDA)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

