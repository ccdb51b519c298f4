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

.PHONY: test-nanochat clean-nanochat
test-nanochat: train_nanochat test_nanochat
	$(PY) -m pytest -q tests/test_nanochat_c.py

test-all: train_nanochat test_nanochat
clean: clean-nanochat
clean-nanochat:
	rm -rf train_nanochat test_nanochat $(NANOCHAT_REF)
