# dev/cuda_cpu/cuda_cpu.mk: the CPU execution target of llmc's CUDA code (included by the root Makefile).
#
#   make cuda-cpu-build   translates the CUDA sources (translate.py) and builds them with the host C++
#                         compiler against dev/cuda_cpu: every family's test_<name>cu and train_<name>cu
#                         (llmc/families.h; FP32, BF16), every dev/cuda kernel file, and the target's own tests;
#                         outputs in build/cuda_cpu/
#   make test-cuda-cpu    builds, then runs every check on it (tests/test_cuda_cpu.py; `make test` runs it too)
#
# Test scaffolding only: nothing here is part of a GPU build.

CUDA_CPU_DIR := dev/cuda_cpu
CUDA_CPU_OUT := build/cuda_cpu
CUDA_CPU_SRC := $(CUDA_CPU_OUT)/src
CUDA_CPU_CXX ?= g++
# -O2: the kernels run once per CUDA thread, so the emulated step is compute bound; -g1: the line tables that
# name the source lines of a report (addr2line), without the variables' debug information (12 % of a build); C++20
# as the GPU build's (the families' descriptions are filled by field name)
CUDA_CPU_CXXFLAGS := -std=c++20 -O2 -g1 -fopenmp -Wall -Wno-unused-function -Wno-unknown-pragmas -D__CUDACC__ \
                     -I$(CUDA_CPU_DIR)/include -include cuda_runtime.h
CUDA_CPU_MPI_CFLAGS := $(if $(MPICC),-DUSE_MPI $(filter -I%,$(shell $(MPICC) --showme:compile 2>/dev/null)))
CUDA_CPU_MPI_LIBS := $(if $(MPICC),$(filter-out -pthread,$(shell $(MPICC) --showme:link 2>/dev/null)))
CUDA_CPU_LIBS := $(CUDA_CPU_OUT)/libcuda_cpu.a $(BLAS_LDLIBS_openblas) $(CUDA_CPU_MPI_LIBS) -lpthread -lm -fopenmp

# the sources translate.py rewrites (all of them at once; unchanged outputs keep their time stamps)
CUDA_CPU_INPUTS := $(foreach f,$(CUDA_FAMILIES),train_$(f).cu test_$(f).cu) $(wildcard llmc/*.h llmc/cpu/*.h llmc/cuda/*.h llmc/cuda/*.cuh) \
                   $(wildcard dev/cuda/*.cu dev/cuda/*.h) $(wildcard $(CUDA_CPU_DIR)/tests/*.cu)
CUDA_CPU_DEV_KERNELS := $(patsubst dev/cuda/%.cu,%,$(wildcard dev/cuda/*.cu))
CUDA_CPU_LIB_SRCS := $(wildcard $(CUDA_CPU_DIR)/*.cpp)
CUDA_CPU_HEADERS := $(wildcard $(CUDA_CPU_DIR)/include/*.h)

# the trainers and their tests, each in FP32 and BF16 (test_gpt2cu_fp32 is test_gpt2.cu with ENABLE_FP32)
CUDA_CPU_TRAINERS := $(foreach f,$(CUDA_FAMILIES),test_$(f) train_$(f))
CUDA_CPU_PROGRAMS := $(foreach program,$(CUDA_CPU_TRAINERS),$(CUDA_CPU_OUT)/$(program)cu_fp32 $(CUDA_CPU_OUT)/$(program)cu_bf16) \
                     $(CUDA_CPU_OUT)/test_device $(CUDA_CPU_OUT)/test_train_gpu \
                     $(patsubst $(CUDA_CPU_DIR)/tests/%.cpp,$(CUDA_CPU_OUT)/%,$(wildcard $(CUDA_CPU_DIR)/tests/*.cpp)) \
                     $(addprefix $(CUDA_CPU_OUT)/dev-cuda/,$(CUDA_CPU_DEV_KERNELS))

# a d2 model (and its bf16 copy), its debug state (B=4, T=64) and the tokenizer, written by train_gpt2.py's writers:
# what test_gpt2cu checks against here, and the d2 reference of every other test (tests/conftest.py d2_reference)
CUDA_CPU_REFS := $(addprefix build/cuda_cpu_refs/,gpt2_d2.bin gpt2_d2_bf16.bin gpt2_d2_debug_state.bin gpt2_tokenizer.bin \
                 gpt2_chat_tokenizer.bin)
# the same d2 with a 509-token vocabulary, its AdamW and Muon debug states and shards of tokens modulo 509: the GPU
# target's other runs (variants, processes, streams, resume, Muon), at a fraction of GPT-2's classifier's cost
CUDA_CPU_SMALL_REFS := $(addprefix build/cuda_cpu_refs/vocab509/,gpt2_d2.bin gpt2_d2_bf16.bin gpt2_d2_debug_state.bin \
                       gpt2_d2_muon_debug_state.bin tinyshakespeare_train.bin tinyshakespeare_val.bin)

.PHONY: cuda-cpu-build cuda-cpu-refs test-cuda-cpu
cuda-cpu-build: $(CUDA_CPU_PROGRAMS) $(CUDA_CPU_REFS) $(CUDA_CPU_SMALL_REFS)
cuda-cpu-refs: $(CUDA_CPU_REFS) $(CUDA_CPU_SMALL_REFS)

$(CUDA_CPU_REFS) &: dev/cuda_cpu_refs.py train_gpt2.py $(REFERENCE_PY) | data
	$(PY) dev/cuda_cpu_refs.py

$(CUDA_CPU_SMALL_REFS) &: dev/cuda_cpu_refs.py train_gpt2.py $(REFERENCE_PY) | data
	$(PY) dev/cuda_cpu_refs.py --vocab_size 509 --muon -o build/cuda_cpu_refs/vocab509

test-cuda-cpu: cuda-cpu-build
	$(PY) -m pytest -q tests/test_cuda_cpu.py $(wildcard $(foreach f,$(CUDA_FAMILIES),tests/test_cuda_cpu_$(f).py)) tests/test_cuda_cpu_chat.py

$(CUDA_CPU_SRC)/.stamp: $(CUDA_CPU_INPUTS) $(CUDA_CPU_DIR)/translate.py
	@mkdir -p $(CUDA_CPU_SRC)
	@python3 $(CUDA_CPU_DIR)/translate.py --root . --out $(CUDA_CPU_SRC) $(CUDA_CPU_INPUTS)
	@touch $@

$(CUDA_CPU_OUT)/obj/%.o: $(CUDA_CPU_DIR)/%.cpp $(CUDA_CPU_HEADERS)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_CXX) $(CUDA_CPU_CXXFLAGS) $(BLAS_CFLAGS_openblas) $(CUDA_CPU_MPI_CFLAGS) -c $< -o $@

$(CUDA_CPU_OUT)/libcuda_cpu.a: $(patsubst $(CUDA_CPU_DIR)/%.cpp,$(CUDA_CPU_OUT)/obj/%.o,$(CUDA_CPU_LIB_SRCS))
	@rm -f $@
	ar rcs $@ $^

CUDA_CPU_DEPS := $(CUDA_CPU_SRC)/.stamp $(CUDA_CPU_OUT)/libcuda_cpu.a $(CUDA_CPU_HEADERS)
CUDA_CPU_TRAINER_FLAGS := -DUSE_NCCL $(CUDA_CPU_MPI_CFLAGS)

# test_<name>cu_fp32, train_<name>cu_bf16 ...: one rule per source; the suffix picks ENABLE_FP32 or ENABLE_BF16
define CUDA_CPU_TRAINER_RULE
$$(CUDA_CPU_OUT)/$(1)cu_%: $$(CUDA_CPU_DEPS)
	$$(CUDA_CPU_CXX) $$(CUDA_CPU_CXXFLAGS) -DENABLE_$$(shell echo $$* | tr a-z A-Z) $$(CUDA_CPU_TRAINER_FLAGS) -I$$(CUDA_CPU_SRC) \
	    -x c++ $$(CUDA_CPU_SRC)/$(1).cu -x none $$(CUDA_CPU_LIBS) -o $$@
endef
$(foreach program,$(CUDA_CPU_TRAINERS),$(eval $(call CUDA_CPU_TRAINER_RULE,$(program))))

$(CUDA_CPU_OUT)/test_device: $(CUDA_CPU_DEPS)
	$(CUDA_CPU_CXX) $(CUDA_CPU_CXXFLAGS) -x c++ $(CUDA_CPU_SRC)/$(CUDA_CPU_DIR)/tests/test_device.cu -x none $(CUDA_CPU_LIBS) -o $@

$(CUDA_CPU_OUT)/test_train_gpu: $(CUDA_CPU_DEPS)
	$(CUDA_CPU_CXX) $(CUDA_CPU_CXXFLAGS) -DENABLE_BF16 $(CUDA_CPU_TRAINER_FLAGS) \
	    -x c++ $(CUDA_CPU_SRC)/$(CUDA_CPU_DIR)/tests/test_train_gpu.cu -x none $(CUDA_CPU_LIBS) -o $@

# the emulated libraries' own tests (plain C++ against the runtime)
$(CUDA_CPU_OUT)/%: $(CUDA_CPU_DIR)/tests/%.cpp $(wildcard $(CUDA_CPU_DIR)/tests/*.h) $(CUDA_CPU_DEPS)
	$(CUDA_CPU_CXX) $(CUDA_CPU_CXXFLAGS) $(CUDA_CPU_MPI_CFLAGS) $< $(CUDA_CPU_LIBS) -o $@

# the kernel playground, in its default precision (BF16)
$(CUDA_CPU_OUT)/dev-cuda/%: $(CUDA_CPU_DEPS)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_CXX) $(CUDA_CPU_CXXFLAGS) -DENABLE_BF16 -DUSE_NCCL $(CUDA_CPU_MPI_CFLAGS) \
	    -x c++ $(CUDA_CPU_SRC)/dev/cuda/$*.cu -x none $(CUDA_CPU_LIBS) -o $@

# for tests/test_cuda_cpu.py's planted defects, which build mutated copies of the sources themselves
.PHONY: cuda-cpu-flags
cuda-cpu-flags:
	@echo 'cxx: $(CUDA_CPU_CXX) $(CUDA_CPU_CXXFLAGS) -DUSE_NCCL $(CUDA_CPU_MPI_CFLAGS)'
	@echo 'libs: $(abspath $(CUDA_CPU_OUT)/libcuda_cpu.a) $(BLAS_LDLIBS_openblas) $(CUDA_CPU_MPI_LIBS) -lpthread -lm -fopenmp'
