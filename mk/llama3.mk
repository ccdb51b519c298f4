# mk/llama3.mk: the Llama 3 CPU programs (train_llama3, test_llama3) and their reference files.
#   make train_llama3 test_llama3     build (the GEMMs' BLAS as train_gpt2's; MPI when mpicc is found)
#   make llama3-debug-states          train_llama3.py's reference files (d2 and a GQA state) in build/llama3/
#   make test-llama3                  the C side's tests (tests/test_llama3_c.py writes its own references)
LLAMA3_REF := build/llama3

train_llama3 test_llama3: CFLAGS += $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS)
train_llama3 test_llama3: LDLIBS += $(BLAS_LDLIBS)
train_llama3 test_llama3: $(BLAS_STAMP)

train_llama3: train_llama3.c $(LLMC_HEADERS)
	@$(call blas_check,$(BLAS))
	$(TRAIN_CC) $(CFLAGS) $(TRAIN_DEFS) $< $(LDLIBS) -o $@

test_llama3: test_llama3.c train_llama3.c $(LLMC_HEADERS)
	@$(call blas_check,$(BLAS))
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

# train_llama3.py's d2 (GQA 2:1) and GQA 4:1 (tied head, scaled RoPE) model files and debug states, AdamW
# and Muon, the local test tokenizer and llama-3 tinyshakespeare shards, written in $(LLAMA3_REF) (git-ignored;
# dev/llama3_refs.py says what each file is); e.g.
#   ./test_llama3 -e build/llama3/llama3_d2.bin -s build/llama3/llama3_d2_debug_state.bin
#   ./test_llama3cu -e build/llama3/muon/llama3_gqa.bin -s build/llama3/muon/llama3_gqa_debug_state.bin
$(LLAMA3_REF)/.written: dev/llama3_refs.py train_llama3.py $(REFERENCE_PY) dev/data/make_test_tokenizer.py $(TS_TRAIN) $(PY_ENV)
	$(PY) dev/llama3_refs.py --out_dir $(LLAMA3_REF) --muon
	@touch $@

.PHONY: llama3-debug-states test-llama3 clean-llama3
llama3-debug-states: $(LLAMA3_REF)/.written

test-llama3: train_llama3 test_llama3
	$(PY) -m pytest -q tests/test_llama3_c.py

test-all: train_llama3 test_llama3
clean: clean-llama3
clean-llama3:
	rm -rf train_llama3 test_llama3 $(LLAMA3_REF)
