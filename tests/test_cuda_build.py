"""The GPU trainer has no GPU here: these tests compile every CUDA file for sm_80 and sm_90 with
warnings as errors (make test-cuda-build) and check what the binaries do without a GPU.
nvcc is required: without it the tests fail with a clear message instead of skipping."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, assert_one_error_line, make, run
from test_gpu_visit import GPU_CHECKS, PREPARATION, TWO_PROCESSES

BUILD_DIR = REPO / "build" / "cuda-check"


def _nvcc_available() -> bool:
    return shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def _make(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def cuda_build() -> subprocess.CompletedProcess:
    assert _nvcc_available(), "nvcc not found: the CUDA build check needs the CUDA toolkit (nvcc on PATH or /usr/local/cuda)"
    return _make("test-cuda-build")


def test_every_cuda_file_compiles_for_sm80_and_sm90_with_werror(cuda_build: subprocess.CompletedProcess) -> None:
    out = cuda_build.stdout + cuda_build.stderr
    assert cuda_build.returncode == 0, f"make test-cuda-build failed:\n{out[-6000:]}"
    assert "all CUDA files compiled for sm_80 and sm_90 with -Werror" in out
    for name in ["train_gpt2.cu BF16", "train_gpt2.cu FP32", "test_gpt2.cu FP32", "test_gpt2.cu BF16",
                 "llmc/cuda/cudnn_att.cpp", "dev/test/cudnn_graph_check.cpp", "train_gpt2.cu BF16 USE_CUDNN=1 (linked)",
                 "train_llama3.cu BF16 USE_CUDNN=1 (linked)", "test_llama3.cu BF16 USE_CUDNN=1"]:
        assert f"nvcc {name}" in out, f"{name} was not part of the build check"
    assert (BUILD_DIR / "train_gpt2cu_cudnn").exists() and (BUILD_DIR / "train_llama3cu_cudnn").exists()
    dev_files = sorted(p.name for p in (REPO / "dev" / "cuda").glob("*.cu"))
    assert len(dev_files) >= 15
    for name in dev_files:
        assert f"nvcc dev/cuda/{name}" in out, f"dev/cuda/{name} was not compiled"
        assert (BUILD_DIR / "dev-cuda" / name.replace(".cu", ".o")).exists()


def test_makefile_reports_what_it_found() -> None:
    proc = _make("cuda-info", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "CUDA: nvcc" in proc.stdout and "cuBLAS" in proc.stdout and "NCCL" in proc.stdout and "MPI" in proc.stdout
    assert "PRECISION=BF16" in proc.stdout
    cudnn_line = next(line for line in proc.stdout.splitlines() if line.startswith("CUDA: cuDNN"))
    assert "frontend" in cudnn_line and "nvrtc" in cudnn_line and "NOT FOUND" not in cudnn_line, cudnn_line


def test_fp16_build_is_refused_clearly() -> None:
    proc = _make("train_gpt2cu", "PRECISION=FP16", timeout=120)
    assert proc.returncode != 0
    assert "error: PRECISION=FP16" in proc.stdout + proc.stderr


def test_gpu_architecture_override() -> None:
    proc = _make("-n", "train_gpt2cu", "GPU_COMPUTE_CAPABILITY=90", "-B", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "code=sm_90" in proc.stdout and "code=sm_80" not in proc.stdout


def test_help_lists_the_multi_gpu_flags(cuda_build: subprocess.CompletedProcess) -> None:
    assert cuda_build.returncode == 0
    proc = subprocess.run([str(BUILD_DIR / "train_gpt2cu"), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for flag in ["-pi", "-pf", "-ps", "-pn", "-pr", "-pg", "-z", "-r", "-sl", "-sg", "-nk", "-nm", "-ge"]:
        assert f"  {flag} " in proc.stdout, f"{flag} missing from --help"
    assert "-pm" not in proc.stdout and "-pp" not in proc.stdout


def test_binary_without_gpu_fails_with_one_line(cuda_build: subprocess.CompletedProcess, tmp_path: Path) -> None:
    assert cuda_build.returncode == 0
    assert_one_error_line(run([BUILD_DIR / "train_gpt2cu", "-e", tmp_path / "missing.bin", "-x", 1], cwd=tmp_path,
                              check=False, timeout=120))


def test_unknown_flag_fails_with_one_line(cuda_build: subprocess.CompletedProcess) -> None:
    assert cuda_build.returncode == 0
    proc = subprocess.run([str(BUILD_DIR / "train_gpt2cu"), "-pm", "tcp"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unknown flag \"-pm\"") and proc.stderr.count("\n") == 1


def _table_flags() -> set[str]:
    """The GPU trainers' flags, as train_gpt2cu's --help lists them, built for the CPU execution target (dev/cuda_cpu):
    the same host code and table (test_help.py holds each trainer's help and parser together)."""
    import re
    gpu_trainer = "build/cuda_cpu/train_gpt2cu_fp32"
    make(gpu_trainer)
    return set(re.findall(r"^  (-[a-z]+) ", run([REPO / gpu_trainer, "--help"], timeout=60).stdout, re.MULTILINE))


def test_gpu_run_scripts_use_only_flags_the_parser_knows() -> None:
    known = _table_flags()
    assert {"-pi", "-pf", "-ps", "-z", "-r"} <= known
    scripts = sorted((REPO / "scripts").glob("run_gpt*.sh")) + sorted((REPO / "scripts" / "multi_node").glob("*"))
    assert len(scripts) >= 8
    for script in scripts:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"
        used = set(_trainer_flags(script))
        assert len(used) >= 15, f"{script.name}: found only {sorted(used)}"
        unknown = sorted(f for f in used if f not in known)
        assert not unknown, f"{script.name} passes flags the trainer does not parse: {unknown}"


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("program, source", [("train_gpt2cu", "train_gpt2.cu"), ("train_llama3cu", "train_llama3.cu"),
                                             ("test_llama3cu", "test_llama3.cu")])
def test_cudnn_build_compiles_the_attention_object_and_links_cudnn(program: str, source: str) -> None:
    proc = _make("-n", "-B", program, "USE_CUDNN=1", timeout=120)
    assert proc.returncode == 0, proc.stderr
    compile_obj = next(line for line in proc.stdout.splitlines() if "llmc/cuda/cudnn_att.cpp" in line)
    assert "-DENABLE_CUDNN" in compile_obj and "-Werror" in compile_obj and "-c llmc/cuda/cudnn_att.cpp" in compile_obj
    link = next(line for line in proc.stdout.splitlines() if source in line and f"-o {program}" in line)
    assert "-DENABLE_CUDNN" in link and "build/cudnn_att.o" in link and "-l:libcudnn.so.9" in link
    assert "rpath=" in link.split("build/cudnn_att.o", 1)[1], "libcudnn.so.9 is linked without an rpath"


def test_cudnn_with_fp32_is_refused_with_one_line() -> None:
    proc = _make("train_gpt2cu", "USE_CUDNN=1", "PRECISION=FP32", timeout=120)
    assert proc.returncode != 0
    errors = _error_lines(proc)
    assert len(errors) == 1 and "USE_CUDNN=1 needs PRECISION=BF16" in errors[0], proc.stdout + proc.stderr
    assert "-o train_gpt2cu" not in proc.stdout and "cudnn_att.cpp" not in proc.stdout, "nvcc ran although refused"


@pytest.mark.parametrize("variable, what", [("CUDNN_FRONTEND_PATH", "cudnn_frontend.h"), ("CUDNN_PATH", "cudnn.h")])
def test_cudnn_missing_is_refused_with_one_line(variable: str, what: str, tmp_path: Path) -> None:
    proc = _make("train_gpt2cu", "USE_CUDNN=1", f"{variable}={tmp_path}", timeout=120)
    assert proc.returncode != 0
    errors = _error_lines(proc)
    assert len(errors) == 1 and variable in errors[0] and what in errors[0], proc.stdout + proc.stderr


def test_cudnn_attention_graphs_pass_the_frontend_validation_without_gpu(cuda_build: subprocess.CompletedProcess) -> None:
    """dev/test/cudnn_graph_check.cpp: the trainer's own graph descriptions, validated by the cuDNN frontend
    for sm_80 and sm_90 (shapes, strides, 16-byte alignment, types); refusals agree with llmc's shape rule."""
    import re
    assert cuda_build.returncode == 0
    proc = subprocess.run([str(BUILD_DIR / "cudnn_graph_check")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    closing = re.fullmatch(r"(\d+) passed, 0 failed", proc.stdout.strip().splitlines()[-1])
    assert closing is not None and int(closing.group(1)) >= 90, proc.stdout
    assert "s_q = s_kv = 1" in proc.stdout or "T = 1" in proc.stdout, "the T = 1 refusal was not exercised"
    # Llama 3's grouped-query shapes (NKV < NH) among the validated graphs, and the frontend's GQA refusal
    graphs = re.search(r"^(\d+) graphs validated by the frontend", proc.stdout, re.MULTILINE)
    assert graphs is not None and int(graphs.group(1)) >= 90, proc.stdout
    assert "NH=6 NKV=4 HS=64 sm_90: forward (training) graph: For group-query attention" in proc.stdout, proc.stdout


@pytest.mark.parametrize("program", ["train_gpt2cu_cudnn", "train_llama3cu_cudnn"])
def test_cudnn_binary_loads_its_libraries_without_gpu(cuda_build: subprocess.CompletedProcess, program: str,
                                                      tmp_path: Path) -> None:
    """The linked USE_CUDNN=1 trainers (GPT-2, and Llama 3 with grouped-query attention) start (libcudnn.so.9 and
    libnvrtc found through the rpath), print their help, and without a GPU stop with one error line."""
    assert cuda_build.returncode == 0
    exe = str(BUILD_DIR / program)
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "  -r " in proc.stdout
    proc = subprocess.run([exe, "-e", str(tmp_path / "missing.bin"), "-x", "1"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(_error_lines(proc)) == 1, proc.stderr


def test_no_boolean_constants_that_lie(tmp_path: Path) -> None:
    """llm.c once defined a constant named False whose value was true: we define no such names at all. A translation
    unit with the GPU trainer, every llmc/cuda/*.cuh, mfu.h and cudnn_att.h, compiled with the Makefile's nvcc flags, declares the four
    names itself; a macro or a constant of that name in any header makes it fail to compile."""
    nvcc_line = next(line for line in _make("-n", "-B", "train_gpt2cu", timeout=120).stdout.splitlines()
                     if "nvcc" in line and " train_gpt2.cu " in line)
    flags = shlex.split(nvcc_line.split(" train_gpt2.cu ", 1)[0])
    headers = [*sorted((REPO / "llmc" / "cuda").glob("*.cuh")), REPO / "llmc" / "mfu.h", REPO / "llmc" / "cuda" / "cudnn_att.h"]
    unit = tmp_path / "names.cu"
    unit.write_text('#include "train_gpt2.cu"\n' + "".join(f'#include "{h.relative_to(REPO).as_posix()}"\n' for h in headers) +
                    "static int True = 0, False = 0, TRUE = 0, FALSE = 0;\n"
                    "int names_are_free(void) { return True + False + TRUE + FALSE; }\n")
    run([*flags, "-c", unit, "-o", tmp_path / "names.o"], timeout=600)


# The values each GPU run script must pass, checked against llm.c's published runs (its scripts/*.sh,
# scripts/multi_node/* and discussions #481 and #677); the script headers say where each comes from.
_COMMON_RUN_FLAGS = {"-k": "cosine", "-u": "700", "-c": "0.1", "-z": "1", "-r": "0", "-sh": "1", "-v": "250",
                     "-m": "20", "-h": "1", "-y": "1"}
_VERIFIED_RUN_FLAGS: dict[str, dict[str, str]] = {
    "run_gpt2_124M.sh": {"-e": "d12", "-b": "64", "-t": "1024", "-d": "524288", "-x": "18865", "-l": "0.0006",
                         "-q": "0.0", "-s": "20000", "-g": "144", "-n": "5000", "-ge": "0"},
    "run_gpt2_350M.sh": {"-e": "d24", "-b": "64", "-t": "1024", "-d": "524288", "-x": "60000", "-l": "0.0003",
                         "-q": "0.0", "-s": "100000", "-g": "144", "-n": "2000", "-ge": "0"},
    "run_gpt2_774M.sh": {"-e": "d36", "-b": "32", "-t": "1024", "-d": "524288", "-x": "286102", "-l": "0.00025",
                         "-q": "0.0", "-s": "300000", "-g": "144", "-n": "4000", "-ge": "0"},
    "run_gpt2_1558M.sh": {"-e": "d48", "-b": "16", "-t": "1024", "-d": "1048576", "-x": "32000", "-l": "0.0006",
                          "-q": "0.1", "-s": "300000", "-g": "384", "-n": "2000", "-ge": "1"},
    "run_gpt3_125M.sh": {"-e": "gpt3:c768", "-b": "32", "-t": "2048", "-d": "524288", "-x": "572204", "-l": "0.0006",
                         "-q": "0.1", "-s": "20000", "-g": "144", "-n": "10000", "-ge": "1", "-sl": "7.0",
                         "-sg": "7.0", "-nm": "50000"},
}
_MULTI_NODE_FLAGS = {"-e": "d12", "-b": "64", "-t": "1024", "-d": "2097152", "-x": "-1", "-l": "0.0006", "-q": "0.0",
                     "-s": "20000", "-g": "144", "-n": "5000"}
_DATA_DIRS = {"run_gpt2_124M.sh": "fineweb10B/fineweb_", "run_gpt2_1558M.sh": "edu_fineweb100B/edu_fineweb_"}


def _trainer_flags(script: Path) -> dict[str, str]:
    """flag -> value as the script hands them to the trainer (each flag must appear once); a script that sources
    gpu_common.sh prints its trainer command line under DRY_RUN=1, the others are read from their text"""
    import os
    import re
    import shlex
    text = script.read_text()
    if "gpu_common.sh" in text:
        env = {k: v for k, v in os.environ.items() if k not in ("EXTRA", "OUT_DIR")}
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**env, "DRY_RUN": "1"})
        assert proc.returncode == 0 and proc.stderr == "", f"{script.name}: {proc.stderr}"
        argv = shlex.split(proc.stdout)
        assert argv[0] == "./train_gpt2cu" and len(argv) % 2 == 1, f"{script.name}: {proc.stdout}"
        pairs = list(zip(argv[1::2], argv[2::2]))
    else:
        body = text.split("./train_gpt2cu", 1)[-1]
        pairs = re.findall(r'(?:^|\s)(-[a-z]{1,3})\s+("[^"]*"|[^\s\\]+)', body)
    flags: dict[str, str] = {}
    for flag, value in pairs:
        assert flag not in flags, f"{script.name} passes {flag} twice"
        flags[flag] = value.strip("\"'")
    return flags


def test_gpu_run_scripts_match_the_published_runs() -> None:
    for name, expected in _VERIFIED_RUN_FLAGS.items():
        script = REPO / "scripts" / name
        flags = _trainer_flags(script)
        for flag, value in {**_COMMON_RUN_FLAGS, **expected}.items():
            assert flags.get(flag) == value, f"{name}: {flag} is {flags.get(flag)!r}, the published run used {value!r}"
        data = _DATA_DIRS.get(name, "fineweb100B/fineweb_")
        assert flags["-i"] == f"dev/data/{data}train_*.bin" and flags["-j"] == f"dev/data/{data}val_*.bin", name
        # on one node of 8 GPUs the total batch is a whole number of micro-batches
        per_step = int(flags["-b"]) * int(flags["-t"]) * 8
        assert int(flags["-d"]) % per_step == 0, f"{name}: -d is not a multiple of B*T*8"
        header = script.read_text().split("source ", 1)[0]
        assert "llm.c" in header and "Published outcome" in header, f"{name}: header must cite its source and outcome"
    for script in sorted((REPO / "scripts" / "multi_node").glob("*")):
        flags = _trainer_flags(script)
        for flag, value in {**_COMMON_RUN_FLAGS, **_MULTI_NODE_FLAGS}.items():
            assert flags.get(flag) == value, f"{script.name}: {flag} is {flags.get(flag)!r}, llm.c's example used {value!r}"
        assert int(flags["-d"]) % (64 * 1024 * 16) == 0, f"{script.name}: -d does not fit 2 nodes x 8 GPUs"


# ---------------------------------------------------------------------------- PTX for newer GPUs

def _gencode_flags(nvcc_line: str) -> list[str]:
    words = shlex.split(nvcc_line)
    return [w for i, w in enumerate(words) if w == "-gencode" or (i > 0 and words[i - 1] == "-gencode")]


def _fatbin_images(gencode: list[str], tmp_path: Path) -> str:
    """the images nvcc would put in the fat binary for these -gencode flags (nvcc -dryrun: its own plan)"""
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    proc = run(["nvcc", "-dryrun", *gencode, "-c", src, "-o", tmp_path / "k.o"], timeout=120)
    return next(line for line in (proc.stdout + proc.stderr).splitlines() if "fatbinary" in line)


@pytest.mark.parametrize("target", ["train_gpt2cu", "dev/cuda"])
def test_build_without_gpu_embeds_sm80_code_and_its_ptx(target: str, tmp_path: Path) -> None:
    """With no GPU to ask (nvidia-smi finds none), the binaries carry sm_80 machine code AND compute_80 PTX, which
    the driver compiles for a newer GPU: with sm_80 code only, an H100 refuses to run them ("no kernel image")."""
    assert _nvcc_available()
    args = ["-n", "-B", "GPU_COMPUTE_CAPABILITY="]
    args += ["train_gpt2cu"] if target == "train_gpt2cu" else ["-C", "dev/cuda", "layernorm_forward"]
    proc = _make(*args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    nvcc_line = next(line for line in proc.stdout.splitlines() if "nvcc" in line and " -o " in line)
    gencode = _gencode_flags(nvcc_line)
    assert "arch=compute_80,code=sm_80" in gencode and "arch=compute_80,code=compute_80" in gencode, nvcc_line
    images = _fatbin_images(gencode, tmp_path)
    assert "kind=elf,sm=80" in images and "kind=ptx,sm=80" in images, images
    # the old flags, for contrast: machine code only
    assert "kind=ptx" not in _fatbin_images(["-gencode", "arch=compute_80,code=sm_80"], tmp_path)


def test_build_for_the_gpu_found_embeds_its_ptx_too() -> None:
    proc = _make("-n", "-B", "train_gpt2cu", "GPU_COMPUTE_CAPABILITY=90", timeout=120)
    assert proc.returncode == 0, proc.stderr
    nvcc_line = next(line for line in proc.stdout.splitlines() if "nvcc" in line and " -o train_gpt2cu" in line)
    assert _gencode_flags(nvcc_line) == ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]


# ---------------------------------------------------------------------------- make test-gpu with a given Python

def _nvidia_dirs(python: str) -> list[str]:
    code = "import importlib.util as u; print(*u.find_spec('nvidia').submodule_search_locations)"
    return run([python, "-c", code], timeout=60).stdout.split()


def test_test_gpu_with_a_given_python_plans_no_pip_and_no_venv(tmp_path: Path) -> None:
    """An offline GPU machine: `make test-gpu PY=python3` must use that Python as it is. The plan (make -n) of
    test-gpu with a Python that is not the venv's (VENV points nowhere) installs nothing, creates no venv, and
    builds against the nvidia wheels found through that Python; every check of GPU.md is in it, once."""
    import sys
    python = sys.executable  # an absolute path: not $(VENV)/bin/python, so make treats it as a given Python
    novenv = tmp_path / "novenv"
    proc = _make("-n", "test-gpu", f"PY={python}", f"VENV={novenv}", "GPU_COMPUTE_CAPABILITY=",
                 f"TEST_GPU_LOGS={tmp_path / 'logs'}", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "pip" not in out and "-m venv" not in out and str(novenv) not in out, out[-4000:]
    assert not novenv.exists() and not (tmp_path / "logs").exists()
    wheels = _nvidia_dirs(python)
    cuda_line = next(line for line in out.splitlines() if line.startswith("CUDA: nvcc"))
    assert any(f"cuBLAS {d}/" in cuda_line for d in wheels) and any(f"NCCL {d}/nccl" in cuda_line for d in wheels), cuda_line
    cudnn_line = next(line for line in out.splitlines() if line.startswith("CUDA: cuDNN"))
    assert "NOT FOUND" not in cudnn_line and any(f"cuDNN {d}/cudnn" in cudnn_line for d in wheels), cudnn_line
    for program in ["test_gpt2cu", "test_llama3cu"]:  # built once per configuration (make -n gpu-build)
        links = {config: next((line for line in out.splitlines() if "nvcc" in line
                               and line.endswith(f"-o build/gpu/bin/{config}/{program}")), "")
                 for config in ["fp32", "bf16", "bf16-cudnn"]}
        assert all(any(f"-I{d}/" in line for d in wheels) for line in links.values()), links
        assert "-DENABLE_FP32" in links["fp32"] and "-DENABLE_CUDNN" not in links["bf16"], links
        assert "build/cudnn_att.o" in links["bf16-cudnn"] and "-l:libcudnn.so.9" in links["bf16-cudnn"], links
    planned = [line for line in out.splitlines() if line.startswith("test-gpu: ") and " ... would run: " in line]
    names = [line.split("test-gpu: ", 1)[1].split(" ... ", 1)[0] for line in planned]
    kernels = [f"dev/cuda/{p.stem}" for p in sorted((REPO / "dev" / "cuda").glob("*.cu"))]
    assert names == [*PREPARATION, *GPU_CHECKS, *TWO_PROCESSES, *kernels], names
    assert f"{python} train_gpt2.py" in out or (REPO / "gpt2_124M.bin").exists()


def test_venv_mode_would_create_the_venv_for_contrast(tmp_path: Path) -> None:
    """Without PY=, the data and model steps depend on the venv (made and filled with pip): what the test above
    shows is absent with PY= is really there without it."""
    proc = _make("-n", "-B", "data", "model", f"VENV={tmp_path / 'novenv'}", timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "-m venv" in out and "pip install" in out, out

