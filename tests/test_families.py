"""llmc/families.h, the one list of model families, against what reads it: the files each row promises, make's
per-family rules (mk/families.mk, the CPU execution target, the GPU visit), the reference-file rules, and the program
lists the trainers print (llmc/args.h)."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from conftest import REPO, assert_one_error_line, make, run
from pyllmc.families import NAMES, REGISTRY, by_magic, by_name
from pyllmc.model_file import ModelFileError, header_bytes

# X(name, DESCRIPTION, GPU, "refs", "refs_dir"), one row a line, as make's sed reads them
ROWS_WITH_GPU = re.findall(r'^ *X\((\w+), (\w+), ([01]), "([^"]*)", "([^"]*)"\)',
                           (REPO / "llmc" / "families.h").read_text(), re.M)
ROWS = [(name, description, refs, refs_dir) for name, description, _, refs, refs_dir in ROWS_WITH_GPU]
FAMILIES = [name for name, _, _, _ in ROWS]
# the families with a GPU trainer (GPU 1): a family's CPU programs may land before its .cu files (make's CUDA_FAMILIES)
CUDA_FAMILIES = [name for name, _, gpu, _, _ in ROWS_WITH_GPU if gpu == "1"]


def test_a_family_has_a_gpu_trainer_exactly_when_its_row_says_so() -> None:
    with_cu = [name for name in FAMILIES if (REPO / f"train_{name}.cu").is_file()]
    assert with_cu == CUDA_FAMILIES, (with_cu, ROWS_WITH_GPU)


def _make_n(*targets: str) -> str:
    """What make would run for the targets, rebuilding everything (-n -B), as text."""
    proc = subprocess.run(["make", "--no-print-directory", "-n", "-B", *targets, "GPU_COMPUTE_CAPABILITY=90"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    return proc.stdout


def test_the_registry_lists_the_three_families_with_their_descriptions() -> None:
    assert FAMILIES[:3] == ["gpt2", "llama3", "nanochat"], ROWS
    for name, description, _, _ in ROWS:
        header = (REPO / "llmc" / f"{name}.h").read_text()
        assert f"static const ModelFamily {description} = {{" in header, f"llmc/{name}.h defines no {description}"
        # its name written out, or as the stem of its reference's files (MODEL_FAMILY_D2_REFERENCE sets .name to it)
        prefix = description.removesuffix("_FAMILY")
        named = f'.name = "{name}"' in header or f'MODEL_FAMILY_D2_REFERENCE({prefix}, "{name}",' in header
        assert named, f"{description}'s name is not {name}"


def test_every_family_has_the_files_its_row_names() -> None:
    for name in FAMILIES:
        gpu = [f"test_{name}.cu"] if name in CUDA_FAMILIES else []
        for path in [f"llmc/{name}.h", f"train_{name}.c", f"test_{name}.c", f"train_{name}.py", *gpu]:
            assert (REPO / path).is_file(), f"{path}: missing for the family {name}"
        # generate's hooks: a decoder's from its description (the registry's line), another's in its own header
        own = REPO / "llmc" / "cpu" / f"{name}_inference.h"
        registry = (REPO / "llmc" / "families.h").read_text()
        assert (f"{name}_generate = DECODER_GENERATE(" in registry
                or own.is_file() and f"{name}_generate" in own.read_text()), name
    assert CUDA_FAMILIES[:3] == ["gpt2", "llama3", "nanochat"], CUDA_FAMILIES


def test_make_reads_the_families_in_the_registry_order() -> None:
    proc = subprocess.run(["make", "--no-print-directory", "-pn", "cuda-info"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("FAMILIES := "))
    assert line.split(" := ", 1)[1].split() == FAMILIES, line
    line = next(line for line in proc.stdout.splitlines() if line.startswith("CUDA_FAMILIES := "))
    assert line.split(" := ", 1)[1].split() == CUDA_FAMILIES, line


def test_make_builds_every_family_s_programs_from_its_sources() -> None:
    """make -n: train_<f> and test_<f> from train_<f>.c and test_<f>.c, train_<f>cu, train_<f>cu_cudnn and test_<f>cu
    from the .cu sources, the CPU execution target's build/cuda_cpu/{train,test}_<f>cu_{fp32,bf16}, each family's
    test_<f>cu in every GPU-visit configuration and its test-cuda-build checks (the CUDA ones for the families with a
    GPU trainer; the others' CPU programs alone)."""
    for name in sorted(set(FAMILIES) - set(CUDA_FAMILIES)):
        lines = _make_n(f"train_{name}", f"test_{name}").splitlines()
        for program in [f"train_{name}", f"test_{name}"]:
            assert any(line.endswith(f"-o {program}") and f"{program}.c" in line.split() for line in lines), program
    for name in CUDA_FAMILIES:
        out = _make_n(f"train_{name}", f"test_{name}", f"train_{name}cu", f"train_{name}cu_cudnn", f"test_{name}cu",
                      f"build/cuda_cpu/train_{name}cu_fp32", f"build/cuda_cpu/test_{name}cu_bf16",
                      f"test-cuda-build-{name}")
        lines = out.splitlines()
        for program, source in [(f"train_{name}", f"train_{name}.c"), (f"test_{name}", f"test_{name}.c"),
                                (f"train_{name}cu", f"train_{name}.cu"), (f"train_{name}cu_cudnn", f"train_{name}.cu"),
                                (f"test_{name}cu", f"test_{name}.cu"),
                                (f"build/cuda_cpu/train_{name}cu_fp32", f"build/cuda_cpu/src/train_{name}.cu"),
                                (f"build/cuda_cpu/test_{name}cu_bf16", f"build/cuda_cpu/src/test_{name}.cu")]:
            assert any(line.endswith(f"-o {program}") and source in line.split() for line in lines), (program, out[-2000:])
        for check in [f"train_{name}.cu BF16 (linked, multi-GPU)", f"test_{name}.cu FP32 (single GPU: no NCCL, no MPI)",
                      f"train_{name}.cu BF16 USE_CUDNN=1 (linked)", f"test_{name}.cu BF16 USE_CUDNN=1"]:
            assert f'"{check}"' in out, (check, out[-2000:])
    gpu = _make_n("gpu-build")
    for name in CUDA_FAMILIES:
        for config in ["fp32", "bf16", "bf16-cudnn"]:
            assert any(line.endswith(f"-o build/gpu/bin/{config}/test_{name}cu") for line in gpu.splitlines()), (name, config)


def test_make_writes_each_family_s_reference_files_with_its_command() -> None:
    for name, _, refs, refs_dir in ROWS:
        if not refs:
            continue
        out = _make_n(f"{name}-debug-states")
        assert f"{refs} --out_dir {refs_dir}" in out, out[-2000:]
        assert f"touch {refs_dir}/.written" in out, out[-2000:]


def test_a_trainer_names_every_family_s_programs_when_it_refuses_a_flag() -> None:
    """./train_gpt2 -r 1: the GPU trainers' flag, refused in one line that lists the GPU trainers of every family
    that has one (llmc/args.h reads them from the registry), and no program that does not exist."""
    make("train_gpt2")
    line = assert_one_error_line(run([REPO / "train_gpt2", "-r", "1"], check=False))
    programs = ", ".join(f"./train_{name}cu" for name in CUDA_FAMILIES)
    assert f"a flag of the GPU trainers ({programs}), not of " in line, line


def test_the_python_registry_has_llmc_families_h_s_rows() -> None:
    """pyllmc.families.REGISTRY mirrors llmc/families.h row for row: the names in order, each row's description,
    reference script, reference-file folder and model-file magic."""
    assert list(NAMES) == FAMILIES, (NAMES, FAMILIES)
    for (name, _, _, refs_dir), row in zip(ROWS, REGISTRY):
        assert row.name == row.family.name == name
        assert row.refs_dir == refs_dir, (name, row.refs_dir, refs_dir)
        assert (REPO / row.reference).is_file(), row.reference
        assert by_name(name) is row
        header = (REPO / "llmc" / f"{name}.h").read_text()
        assert str(row.family.model_magic) in header, f"llmc/{name}.h does not hold {name}'s magic {row.family.model_magic}"
    assert len({row.family.model_magic for row in REGISTRY}) == len(REGISTRY), "two families share a magic"


def test_each_family_s_muon_split_is_the_same_data_in_c_and_python() -> None:
    """Family.muon_splits_qkv (pyllmc/family.py) and ModelFamily's muon_splits_qkv (llmc/model_family.h) say the same
    of every family: set in its C description exactly where its Python description sets it."""
    for row in REGISTRY:
        header = (REPO / "llmc" / f"{row.name}.h").read_text()
        assert (".muon_splits_qkv = 1" in header) == row.family.muon_splits_qkv, row.name
    assert any(row.family.muon_splits_qkv for row in REGISTRY)


def test_each_family_s_chat_format_is_the_same_in_c_and_python() -> None:
    """Family.chat_format (pyllmc/chat.py's formats) is the chat_format of the family's C description (llmc/chat.h's),
    which generate --chat renders."""
    for row in REGISTRY:
        header = (REPO / "llmc" / f"{row.name}.h").read_text()
        assert re.findall(r'\.chat_format = "(\w+)"', header) == [row.family.chat_format], row.name


def test_by_magic_tells_the_families_apart_and_refuses_another_file_in_one_line(tmp_path) -> None:
    for row in REGISTRY:
        path = tmp_path / f"{row.name}.bin"
        path.write_bytes(header_bytes([row.family.model_magic]))
        assert by_magic(path) is row
    other = tmp_path / "other.bin"
    other.write_bytes(header_bytes([1234]))
    with pytest.raises(ModelFileError) as e:
        by_magic(other)
    assert "\n" not in str(e.value) and f"{other}: " in str(e.value) and "magic 1234" in str(e.value), e.value


def test_the_package_lists_every_family_s_reference_module() -> None:
    """pyproject.toml's py-modules (setuptools reads a static list) hold each registered family's reference, and
    every reference they hold is a registered family's or a reference-only family's (train_<name>.py with a
    pyllmc/families/<name>.py and no row yet)."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    modules = setuptools["py-modules"]
    missing = [row.module for row in REGISTRY if row.module not in modules]
    assert not missing, f"pyproject.toml's py-modules lack {missing}"
    for module in [m for m in modules if m.startswith("train_")]:
        name = module[len("train_"):]
        assert name in NAMES or (REPO / "pyllmc" / "families" / f"{name}.py").is_file(), module
    assert "pyllmc.families" in setuptools["packages"], setuptools["packages"]
