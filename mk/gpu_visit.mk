# mk/gpu_visit.mk: a short visit to an NVIDIA GPU (a lent machine, minutes of it), and what it builds.
#
#   make gpu-pack                here, before the visit: .gpu/ with what an offline GPU machine lacks
#                                (tinyshakespeare, tiktoken's cache, the cuDNN frontend headers, and the masked debug
#                                states and chat shard with the CPU trainer's losses, dev/gpu_visit_chat.py); carry .gpu
#   make gpu-visit PY=python3 GPU_VISIT_OUT=$OUT [GPU_VISIT_BUDGET=420]
#                                there: every build and reference at once, the correctness checks of
#                                make test-gpu (most telling first), a short make bench-gpu, then each dev/cuda
#                                kernel once (--quick), all inside the budget; dev/gpu_visit.sh says how
#   make -n gpu-visit            the plan, nothing built or run
#   make gpu-build               the programs both use, in parallel with make -j: every family's test_<name>cu
#                                (llmc/families.h) in each configuration under build/gpu/bin/<fp32|bf16|bf16-cudnn>/,
#                                every family's trainer (train_<name>cu, train_<name>cu_cudnn: those make bench-gpu
#                                times among them), the chat check's FP32 trainer (build/gpu/bin/fp32/train_nanochatcu),
#                                and every dev/cuda kernel
#   make gpu-refs                the reference files make test-gpu checks against (make -j: side by side)

GPU_BIN := build/gpu/bin
GPU_CONFIGS := fp32 bf16 bf16-cudnn
GPU_TEST_PROGRAMS := $(foreach c,$(GPU_CONFIGS),$(foreach f,$(CUDA_FAMILIES),$(GPU_BIN)/$(c)/test_$(f)cu))
GPU_VISIT_BUDGET ?= 420
GPU_VISIT_OUT ?= build/gpu-visit/out

# each configuration's defines, objects and libraries (pattern-specific: the directory names the build)
$(GPU_BIN)/fp32/%: GPU_CONFIG_FLAGS := -DENABLE_FP32
$(GPU_BIN)/bf16/%: GPU_CONFIG_FLAGS := -DENABLE_BF16
$(GPU_BIN)/bf16-cudnn/%: GPU_CONFIG_FLAGS := -DENABLE_BF16 -DENABLE_CUDNN
$(GPU_BIN)/bf16-cudnn/%: GPU_CONFIG_OBJS := $(CUDNN_OBJ)
$(GPU_BIN)/bf16-cudnn/%: GPU_CONFIG_LIBS := $(CUDNN_LINK)
$(filter $(GPU_BIN)/bf16-cudnn/%,$(GPU_TEST_PROGRAMS)): $(CUDNN_OBJ) | cudnn-check

# each family's test program and trainer, in the configuration its directory names
define GPU_TEST_PROGRAM_RULE
$$(GPU_BIN)/%/test_$(1)cu: test_$(1).cu train_$(1).cu $$(CUDA_KERNELS) $$(LLMC_HEADERS) | cuda-check
	@mkdir -p $$(@D)
	$$(call cuda_program,$$(GPU_CONFIG_FLAGS),$$(GPU_CONFIG_OBJS),$$(GPU_CONFIG_LIBS))

$$(GPU_BIN)/%/train_$(1)cu: train_$(1).cu $$(CUDA_KERNELS) $$(LLMC_HEADERS) | cuda-check
	@mkdir -p $$(@D)
	$$(call cuda_program,$$(GPU_CONFIG_FLAGS),$$(GPU_CONFIG_OBJS),$$(GPU_CONFIG_LIBS))
endef
$(foreach f,$(CUDA_FAMILIES),$(eval $(call GPU_TEST_PROGRAM_RULE,$(f))))

# the chat half of the visit (dev/gpu_visit_chat.py): its trainer in FP32 (the CPU trainer's losses within float32
# noise), and the reference sets make gpu-pack takes the masked states from
GPU_CHAT_TRAINER := $(GPU_BIN)/fp32/train_nanochatcu
GPU_CHAT_SOURCES := $(CUDA_CPU_SMALL_REFS) $(FAMILY_REFS_TARGETS) train_nanochat

.PHONY: gpu-build gpu-refs gpu-pack gpu-visit clean-gpu-visit
# the trainers as make bench-gpu builds them (BF16, cuDNN attention off and on)
gpu-build: $(GPU_TEST_PROGRAMS) $(GPU_CHAT_TRAINER) $(foreach f,$(CUDA_FAMILIES),train_$(f)cu train_$(f)cu_cudnn) dev-cuda

gpu-refs: data model muon-refs $(FAMILY_REFS_TARGETS)

# no cuda-check first: a machine without the CUDA libraries still gets its facts recorded, and the build's log says
# what is missing
gpu-visit:
	@MAKE="$(MAKE)" PY="$(PY)" GPU_VISIT_BUDGET="$(GPU_VISIT_BUDGET)" GPU_VISIT_OUT="$(GPU_VISIT_OUT)" \
	    GPU_CACHE="$(GPU_CACHE)" bash dev/gpu_visit.sh

# What the GPU machine has no network for, into $(GPU_CACHE) (git-ignored; name it in the device call's carry):
# the tinyshakespeare text and tiktoken's GPT-2 files (from where this checkout's tests find them) and the
# header-only cuDNN frontend (the nvidia-cudnn-frontend wheel's include/, which make test-gpu's cuDNN builds need);
# commit.txt names the commit the visit runs (the copy of the checkout there has no git history); chat/ holds every
# family's masked debug state, a tiny chat shard and ./train_nanochat's losses on it (dev/gpu_visit_chat.py pack,
# after make has built the reference sets and the CPU trainer it reads: GPU_CHAT_SOURCES).
GPU_PACK_TEXT := $(firstword $(wildcard $(TS_DIR)/tiny_shakespeare.txt ../shared/data/tinyshakespeare/input.txt))
GPU_PACK_TIKTOKEN := $(firstword $(TIKTOKEN_CACHE_DIR) $(wildcard ../shared/tiktoken_cache))
gpu-pack:
	@test -n "$(GPU_PACK_TEXT)" || { echo "error: no tinyshakespeare text: run make data first"; exit 1; }
	@test -n "$(GPU_PACK_TIKTOKEN)" && test -d "$(GPU_PACK_TIKTOKEN)" || { echo "error: no tiktoken cache: set TIKTOKEN_CACHE_DIR to one that has the gpt2 files"; exit 1; }
	@test -n "$(CUDNN_FE_INC)" || { echo "error: $(CUDNN_FE_MISSING)"; exit 1; }
	@rm -rf $(GPU_CACHE)/data $(GPU_CACHE)/tiktoken_cache $(GPU_CACHE)/cudnn_frontend
	@mkdir -p $(GPU_CACHE)/data/tinyshakespeare $(GPU_CACHE)/tiktoken_cache $(GPU_CACHE)/cudnn_frontend
	cp $(GPU_PACK_TEXT) $(GPU_CACHE)/data/tinyshakespeare/input.txt
	cp -r $(GPU_PACK_TIKTOKEN)/. $(GPU_CACHE)/tiktoken_cache/
	cp -r $(CUDNN_FE_INC) $(GPU_CACHE)/cudnn_frontend/include
	@echo "$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo ' + uncommitted changes')" > $(GPU_CACHE)/commit.txt
	@rm -rf $(GPU_CACHE)/chat
	$(MAKE) --no-print-directory $(GPU_CHAT_SOURCES)
	$(PY) dev/gpu_visit_chat.py pack -o $(GPU_CACHE)/chat
	@echo "gpu-pack: $(GPU_CACHE) holds $$(du -sh $(GPU_CACHE) | cut -f1); on the GPU machine, carry $(GPU_CACHE) and run:"
	@echo "    make gpu-visit PY=python3 GPU_VISIT_OUT=\$$OUT GPU_VISIT_BUDGET=$(GPU_VISIT_BUDGET)"

clean: clean-gpu-visit
clean-gpu-visit:
	rm -rf build/gpu build/gpu-visit
