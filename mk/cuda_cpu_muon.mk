# mk/cuda_cpu_muon.mk: train_gpt2cu -op muon on the CPU execution target (tests/test_cuda_cpu_muon.py).
#
#   make test-cuda-cpu-muon   builds the CPU-target programs and their references (make cuda-cpu-build: the Muon
#                             debug state is the small-vocabulary d2's, build/cuda_cpu_refs/vocab509/), then runs
#                             tests/test_cuda_cpu_muon.py
#
# `make test` builds cuda-cpu-build before pytest, so the Muon reference is made with it. (make muon-refs,
# mk/muon.mk, is the GPT-2-vocabulary d2's Muon state that test_gpt2 and make test-gpu check.)

.PHONY: test-cuda-cpu-muon

test-cuda-cpu-muon: cuda-cpu-build
	$(PY) -m pytest -q tests/test_cuda_cpu_muon.py
