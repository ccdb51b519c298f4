# mk/muon.mk: Muon (the optimizer of issue 16) beside AdamW.
#
#   make muon-refs            build/muon_refs/: a d2 checkpoint and its Muon debug state
#                             (train_gpt2.py --optimizer muon), which test_gpt2 -s ... and test_gpt2cu check

MUON_REFS := build/muon_refs
MUON_REF_STATE := $(MUON_REFS)/gpt2_d2_muon_debug_state.bin

.PHONY: muon-refs clean-muon

muon-refs: $(MUON_REF_STATE)

$(MUON_REF_STATE): train_gpt2.py $(TS_TRAIN) $(PY_ENV)
	@mkdir -p $(MUON_REFS)
	cd $(MUON_REFS) && $(abspath $(PY)) $(CURDIR)/train_gpt2.py --model d2 --optimizer muon --device cpu \
	    --input_bin $(CURDIR)/$(TS_TRAIN) --batch_size 4 --sequence_length 64 --num_iterations 0 --write_tensors 1

clean: clean-muon
clean-muon:
	rm -rf $(MUON_REFS)
