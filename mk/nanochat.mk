# mk/nanochat.mk: the nanochat CPU programs (train_nanochat, test_nanochat) and their reference files.
#   make train_nanochat test_nanochat   build (the GEMMs' BLAS as train_gpt2's; MPI when mpicc is found)
#   make nanochat-debug-states          dev/nanochat_refs.py's reference files in build/nanochat/
#   make test-nanochat                  the C side's tests (tests/test_nanochat_c.py)
NANOCHAT_REF := build/nanochat

train_nanochat test_nanochat: CFLAGS += $(BLAS_CFLAGS) $(CPU_SPEED_CFLAGS)
train_nanochat test_nanochat: LDLIBS += $(BLAS_LDLIBS)
train_nanochat test_nanochat: $(BLAS_STAMP)

train_nanochat: train_nanochat.c $(LLMC_HEADERS)
	@$(call blas_check,$(BLAS))
	$(TRAIN_CC) $(CFLAGS) $(TRAIN_DEFS) $< $(LDLIBS) -o $@

test_nanochat: test_nanochat.c train_nanochat.c $(LLMC_HEADERS)
	@$(call blas_check,$(BLAS))
	$(CC) $(CFLAGS) $< $(LDLIBS) -o $@

# dev/nanochat_refs.py's model files and debug states (train_nanochat.py's d2 from scratch, and random tiny
# NanoChatForCausalLM models of several shapes imported; AdamW and Muon), nanochat_tokenizer.bin, written in
# $(NANOCHAT_REF) (git-ignored); e.g.
#   ./test_nanochat -e build/nanochat/nanochat_d2.bin -s build/nanochat/nanochat_d2_debug_state.bin
$(NANOCHAT_REF)/.written: dev/nanochat_refs.py train_nanochat.py $(REFERENCE_PY) $(TS_TRAIN) $(PY_ENV)
	$(PY) dev/nanochat_refs.py --out_dir $(NANOCHAT_REF)
	@touch $@

.PHONY: nanochat-debug-states test-nanochat clean-nanochat
nanochat-debug-states: $(NANOCHAT_REF)/.written

test-nanochat: train_nanochat test_nanochat
	$(PY) -m pytest -q tests/test_nanochat_c.py

test-all: train_nanochat test_nanochat
clean: clean-nanochat
clean-nanochat:
	rm -rf train_nanochat test_nanochat $(NANOCHAT_REF)
