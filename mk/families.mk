# mk/families.mk: every model family's rules, from one template each, for the families of llmc/families.h (FAMILIES,
# FAMILY_REFS_<name> and FAMILY_REFS_DIR_<name>, read by the Makefile). For a family <name>:
#   make train_<name> test_<name>         the CPU trainer and its test program (the GEMMs' BLAS, the one line naming it
#                                         and CPU_SPEED_CFLAGS as every CPU program's: Makefile; MPI when mpicc is found)
#   make train_<name>cu test_<name>cu [PRECISION=FP32] [USE_CUDNN=1]   the GPU trainer and its test (these and the
#                                         CUDA rules below: the families with a train_<name>.cu, CUDA_FAMILIES)
#   make train_<name>cu_cudnn             the GPU trainer in BF16 with cuDNN attention, whatever USE_CUDNN says
#   make test-cuda-build                  also compiles train_<name>.cu (linked in BF16 with MPI + NCCL, compiled in
#                                         FP32, linked with cuDNN attention) and test_<name>.cu (FP32 for a single GPU,
#                                         BF16 with cuDNN) for sm_80 and sm_90 with -Werror: test-cuda-build-<name>
#   make <name>-debug-states              the reference files its test programs check: the registry's command with
#                                         --out_dir its folder (git-ignored), e.g.
#                                         ./test_llama3 -e build/llama3/llama3_d2.bin -s build/llama3/llama3_d2_debug_state.bin
#   make test-<name>                      its C programs' tests (tests/test_<name>_c.py), where it has them
#   make clean-<name>                     its CPU programs and reference files (make clean-cuda: every family's GPU programs)
# Its CPU-target builds (build/cuda_cpu/{train,test}_<name>cu_{fp32,bf16}) are dev/cuda_cpu/cuda_cpu.mk's, its GPU
# visit builds (build/gpu/bin/<config>/test_<name>cu) mk/gpu_visit.mk's.

# what a family's reference files are written from besides its own script and reference: the package the references
# import (REFERENCE_PY, Makefile) and the test tokenizer's writer
FAMILY_REFS_PY := $(REFERENCE_PY) dev/data/make_test_tokenizer.py

define FAMILY_RULES
train_$(1): train_$(1).c $$(LLMC_HEADERS)
	@$$(call blas_check,$$(BLAS))
	@echo "$$(call blas_line,$$(BLAS))"
	$$(TRAIN_CC) $$(CFLAGS) $$(TRAIN_DEFS) $$< $$(LDLIBS) -o $$@

test_$(1): test_$(1).c train_$(1).c $$(LLMC_HEADERS)
	@$$(call blas_check,$$(BLAS))
	@echo "$$(call blas_line,$$(BLAS))"
	$$(CC) $$(CFLAGS) $$< $$(LDLIBS) -o $$@

.PHONY: clean-$(1)
test-all: train_$(1) test_$(1)
clean: clean-$(1)
clean-$(1):
	rm -rf train_$(1) test_$(1) $$(FAMILY_REFS_DIR_$(1))

ifneq ($$(FAMILY_REFS_$(1)),)
.PHONY: $(1)-debug-states
$(1)-debug-states: $$(FAMILY_REFS_DIR_$(1))/.written
$$(FAMILY_REFS_DIR_$(1))/.written: $$(firstword $$(FAMILY_REFS_$(1))) train_$(1).py $$(FAMILY_REFS_PY) $$(TS_TRAIN) $$(PY_ENV)
	$$(PY) $$(FAMILY_REFS_$(1)) --out_dir $$(FAMILY_REFS_DIR_$(1))
	@touch $$@
endif

ifneq ($$(wildcard tests/test_$(1)_c.py),)
.PHONY: test-$(1)
test-$(1): train_$(1) test_$(1)
	$$(PY) -m pytest -q tests/test_$(1)_c.py
endif
endef

# a family's GPU programs and checks, where it has train_<name>.cu (CUDA_FAMILIES, Makefile)
define FAMILY_CUDA_RULES
train_$(1)cu: train_$(1).cu $$(CUDA_KERNELS) $$(LLMC_HEADERS) $$(CUDNN_DEPS) | cuda-check
	$$(cuda_configured)

train_$(1)cu_cudnn: train_$(1).cu $$(CUDA_KERNELS) $$(LLMC_HEADERS) $$(CUDNN_OBJ) | cuda-check cudnn-check
	$$(cuda_with_cudnn)

test_$(1)cu: test_$(1).cu train_$(1).cu $$(CUDA_KERNELS) $$(LLMC_HEADERS) $$(CUDNN_DEPS) | cuda-check
	$$(cuda_configured)

.PHONY: test-cuda-build-$(1)
test-cuda-build: test-cuda-build-$(1)
test-cuda-build-$(1): $$(CUDNN_OBJ) | cuda-check cudnn-check
	@mkdir -p $$(CUDA_BUILD_DIR)
	@set -e; \
	run() { echo "nvcc $$$$1"; shift; $$(NVCC) $$(NVCC_FLAGS) $$(NVCC_WERROR) $$(CUDA_CHECK_ARCH) "$$$$@"; }; \
	run "train_$(1).cu BF16 (linked, multi-GPU)" -DENABLE_BF16 $$(CUDA_BASE_INC) train_$(1).cu $$(CUDA_BASE_LIBS) \
	    -o $$(CUDA_BUILD_DIR)/train_$(1)cu; \
	run "train_$(1).cu FP32" -DENABLE_FP32 $$(CUDA_BASE_INC) -c train_$(1).cu -o $$(CUDA_BUILD_DIR)/train_$(1)cu_fp32.o; \
	run "test_$(1).cu FP32 (single GPU: no NCCL, no MPI)" -DENABLE_FP32 $$(CUBLAS_FLAGS) -c test_$(1).cu \
	    -o $$(CUDA_BUILD_DIR)/test_$(1)cu_fp32.o; \
	run "train_$(1).cu BF16 USE_CUDNN=1 (linked)" -DENABLE_BF16 -DENABLE_CUDNN $$(CUDA_BASE_INC) train_$(1).cu \
	    $$(CUDNN_OBJ) $$(CUDA_BASE_LIBS) $$(CUDNN_LINK) -o $$(CUDA_BUILD_DIR)/train_$(1)cu_cudnn; \
	run "test_$(1).cu BF16 USE_CUDNN=1" -DENABLE_BF16 -DENABLE_CUDNN $$(CUDA_BASE_INC) -c test_$(1).cu \
	    -o $$(CUDA_BUILD_DIR)/test_$(1)cu_cudnn.o
endef

$(foreach f,$(FAMILIES),$(eval $(call FAMILY_RULES,$(f))))
$(foreach f,$(CUDA_FAMILIES),$(eval $(call FAMILY_CUDA_RULES,$(f))))
