# mk/muon.mk: Muon (the optimizer of issue 16) beside AdamW.
#
#   make muon-refs            build/muon_refs/: a d2 checkpoint and its Muon debug state
#                             (train_gpt2.py --optimizer muon), which test_gpt2 -s ... and test_gpt2cu check
#   make compare-optimizers   AdamW against Muon on d6 and tinyshakespeare, each at the better lr of a short
#                             sweep: val loss against steps and training time, plotted with dev/vislog.py, in
#                             build/compare_optimizers/ (COMPARE_ARGS="..." passes flags; --help lists them)

MUON_REFS := build/muon_refs
MUON_REF_STATE := $(MUON_REFS)/gpt2_d2_muon_debug_state.bin
COMPARE_ARGS ?=

.PHONY: muon-refs compare-optimizers clean-muon

muon-refs: $(MUON_REF_STATE)

# the Python it runs from inside $(MUON_REFS): PY as a path there, or the one PY names on the PATH (PY=python3 on a GPU
# machine: abspath alone would make it a python3 in the checkout)
MUON_REF_PY = $(if $(findstring /,$(PY)),$(abspath $(PY)),$(PY))
$(MUON_REF_STATE): train_gpt2.py $(REFERENCE_PY) $(TS_TRAIN) $(PY_ENV)
	@mkdir -p $(MUON_REFS)
	cd $(MUON_REFS) && $(MUON_REF_PY) $(CURDIR)/train_gpt2.py --model d2 --optimizer muon --device cpu \
	    --input_bin $(CURDIR)/$(TS_TRAIN) --batch_size 4 --sequence_length 64 --num_iterations 0 --write_tensors 1

compare-optimizers: setup
	@$(MAKE) --no-print-directory data train_gpt2
	$(PY) dev/compare_optimizers.py $(COMPARE_ARGS)

clean: clean-muon
clean-muon:
	rm -rf $(MUON_REFS)
