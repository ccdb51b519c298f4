# mk/cuda_cpu_muon.mk: train_gpt2cu -op muon on the CPU execution target (tests/test_cuda_cpu_muon.py).
#
#   make test-cuda-cpu-muon   builds the CPU-target programs and the Muon reference (make muon-refs, mk/muon.mk),
#                             then runs tests/test_cuda_cpu_muon.py
#
# `make test` builds cuda-cpu-build before pytest, so the Muon reference is made with it.

.PHONY: test-cuda-cpu-muon

cuda-cpu-build: muon-refs

test-cuda-cpu-muon: cuda-cpu-build
	$(PY) -m pytest -q tests/test_cuda_cpu_muon.py
