# mk/nanochat_cuda.mk: the nanochat GPU programs (train_nanochatcu, test_nanochatcu) and their compile check.
#   make train_nanochatcu test_nanochatcu [PRECISION=FP32] [USE_CUDNN=1]   as train_llama3cu, test_llama3cu
#   make train_nanochatcu_cudnn                                            BF16 with cuDNN attention
#   make test-cuda-build                                                   also compiles train_nanochat.cu and
#       test_nanochat.cu for sm_80 and sm_90 with -Werror (test-cuda-build-nanochat, run first)
# The CPU execution target's builds (build/cuda_cpu/{train,test}_nanochatcu_{fp32,bf16}) are dev/cuda_cpu/cuda_cpu.mk's.

NANOCHAT_CUDA_SRCS := train_nanochat.cu $(wildcard llmc/cuda/*.cuh)

train_nanochatcu: $(NANOCHAT_CUDA_SRCS) $(LLMC_HEADERS) $(CUDNN_DEPS) | cuda-check
	$(cuda_configured)

train_nanochatcu_cudnn: $(NANOCHAT_CUDA_SRCS) $(LLMC_HEADERS) $(CUDNN_OBJ) | cuda-check cudnn-check
	$(cuda_with_cudnn)

test_nanochatcu: test_nanochat.cu $(NANOCHAT_CUDA_SRCS) $(LLMC_HEADERS) $(CUDNN_DEPS) | cuda-check
	$(cuda_configured)

# train_nanochat.cu linked in BF16 (multi-GPU) and compiled in FP32, test_nanochat.cu in FP32 (single GPU), and with
# cuDNN attention (the object test-cuda-build's cudnn_att.cpp line compiles, here from $(CUDNN_OBJ))
.PHONY: test-cuda-build-nanochat
test-cuda-build: test-cuda-build-nanochat
test-cuda-build-nanochat: $(CUDNN_OBJ) | cuda-check cudnn-check
	@mkdir -p $(CUDA_BUILD_DIR)
	@set -e; \
	run() { echo "nvcc $$1"; shift; $(NVCC) $(NVCC_FLAGS) $(NVCC_WERROR) $(CUDA_CHECK_ARCH) "$$@"; }; \
	run "train_nanochat.cu BF16 (linked, multi-GPU)" -DENABLE_BF16 $(CUDA_BASE_INC) train_nanochat.cu $(CUDA_BASE_LIBS) -o $(CUDA_BUILD_DIR)/train_nanochatcu; \
	run "train_nanochat.cu FP32" -DENABLE_FP32 $(CUDA_BASE_INC) -c train_nanochat.cu -o $(CUDA_BUILD_DIR)/train_nanochatcu_fp32.o; \
	run "test_nanochat.cu FP32 (single GPU: no NCCL, no MPI)" -DENABLE_FP32 $(CUBLAS_FLAGS) -c test_nanochat.cu -o $(CUDA_BUILD_DIR)/test_nanochatcu_fp32.o; \
	run "train_nanochat.cu BF16 USE_CUDNN=1 (linked)" -DENABLE_BF16 -DENABLE_CUDNN $(CUDA_BASE_INC) train_nanochat.cu \
	    $(CUDNN_OBJ) $(CUDA_BASE_LIBS) $(CUDNN_LINK) -o $(CUDA_BUILD_DIR)/train_nanochatcu_cudnn; \
	run "test_nanochat.cu BF16 USE_CUDNN=1" -DENABLE_BF16 -DENABLE_CUDNN $(CUDA_BASE_INC) -c test_nanochat.cu \
	    -o $(CUDA_BUILD_DIR)/test_nanochatcu_cudnn.o

clean-cuda: clean-nanochat-cuda
.PHONY: clean-nanochat-cuda
clean-nanochat-cuda:
	rm -f train_nanochatcu train_nanochatcu_cudnn test_nanochatcu
