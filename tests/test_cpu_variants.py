"""Every CPU build variant gives the reference's numbers: BLAS=mkl, BLAS=openblas, BLAS=openblas-system
(when the machine has an OpenBLAS), BLAS=none (the blocked kernel of llmc/cpu/matmul.h), and the bf16
mixed-precision path (-p bf16). And the build finds its BLAS by itself: the venv's wheels, else a system
OpenBLAS (pkg-config or the usual paths) or MKL ($MKLROOT), else the built-in kernel, and says which
in one line (checked on fake venv and system trees through make's VENV, BLAS_SEARCH_ROOT, PKG_CONFIG
and MKLROOT, with make -n: nothing is built).

- dev/test/test_matmul_<blas>: the GEMMs against a double-precision reference (odd shapes)
- test_gpt2_<blas> on the d2 reference: logits, loss, all 16 gradients and 10 AdamW losses
  within test_gpt2's tolerances
- train_gpt2 -p bf16 (LLMC_BF16=force: the bf16 GEMMs whatever the CPU) vs -p fp32: 10 AdamW steps
  (lr 1e-3) on one batch (d2, B=4, T=64); every
  loss within BF16_LOSS_TOL = 5e-3 (absolute) of the fp32 one. bf16 rounds the GEMM inputs
  (8-bit mantissa, relative error <= 2^-9 per operand, sums in fp32); measured differences
  are <= 3e-4 here (losses 10.8 .. 8.2) and <= 1e-3 at d12. The two runs must also differ
  (the flag reaches the GEMMs).

No timing is asserted here (make bench measures speed). Runtime: about a minute on 2 cores,
mostly compiling the variants.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import HAS_AMX_BF16, HAS_AVX512_BF16, REPO, TS_TRAIN, assert_one_error_line, make, run


def system_blas_found(blas: str) -> bool:
    """Whether make finds the machine's BLAS for the variant `blas` (openblas-system, mkl-system)."""
    out = run(["make", "-s", "--no-print-directory", "blas-info", f"BLAS={blas}"]).stdout
    return f"BLAS: {blas} (not found)" not in out


VARIANTS = ["mkl", "openblas", "onednn", "none",
            pytest.param("openblas-system", marks=pytest.mark.skipif(not system_blas_found("openblas-system"),
                                                                      reason="no system OpenBLAS (apt-get install libopenblas-dev)")),
            pytest.param("mkl-system", marks=pytest.mark.skipif(not system_blas_found("mkl-system"),
                                                                 reason="no system MKL (MKLROOT, libmkl-dev)"))]
BF16_LOSS_TOL = 5e-3
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
TWO_THREADS = {"OMP_NUM_THREADS": "2"}


def summary_counts(output: str) -> tuple[int, int]:
    """(passed, failed) from a C test's closing line "N passed, M failed"."""
    m = re.search(r"(\d+) passed, (\d+) failed", output)
    assert m, f"no summary line in:\n{output[-2000:]}"
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("blas", VARIANTS)
def test_matmul_variant_matches_double_reference(blas: str) -> None:
    make(f"dev/test/test_matmul_{blas}")
    # the exhaustive checks of the AVX-512 exp and bf16 roundings (8 s of the program's 9 here) are the same code in
    # every variant (the BLAS is not part of them): run in the built-in one's run, left out of the others
    vecmath = "1" if blas == "none" else "0"
    proc = run([REPO / "dev" / "test" / f"test_matmul_{blas}"], env={**TWO_THREADS, "LLMC_TEST_VECMATH": vecmath})
    backend = {"none": "blocked", "mkl-system": "mkl"}.get(blas, blas)
    assert f"matmul backend: {backend}" in proc.stdout
    assert ("LLMC_TEST_VECMATH=0" in proc.stdout) == (vecmath == "0"), proc.stdout[-2000:]
    passed, failed = summary_counts(proc.stdout)
    assert failed == 0 and passed > 300


@pytest.mark.parametrize("blas", VARIANTS)
def test_gpt2_variant_matches_reference(blas: str, d2_reference: Path) -> None:
    make(f"test_gpt2_{blas}")
    proc = run([REPO / f"test_gpt2_{blas}", "-e", "gpt2_d2.bin", "-s", "gpt2_d2_debug_state.bin"],
               cwd=d2_reference, env=TWO_THREADS)
    passed, failed = summary_counts(proc.stdout)
    assert failed == 0 and passed >= 28


# the three bf16 GEMMs, each asked for by name (LLMC_BF16_GEMM), so a run states which one it took: oneDNN's needs a
# CPU with AVX512-BF16 or AMX (elsewhere oneDNN has no bf16 kernel: its refusal is tested below and in
# tests/test_cpu_kernels.py), the AMX kernel a CPU with AMX (dev/test/test_amx_gemm checks its blocking and packing on
# any CPU, on emulated tiles), the built-in one runs on every CPU (emulated in fp32 without AVX512-BF16)
BF16_GEMMS = [pytest.param("onednn", marks=pytest.mark.skipif(not (HAS_AVX512_BF16 or HAS_AMX_BF16),
                                                              reason="no AVX512-BF16 or AMX: oneDNN has no bf16 kernel")),
              pytest.param("amx", marks=pytest.mark.skipif(not HAS_AMX_BF16, reason="no AMX: the AMX kernel cannot run")),
              "builtin"]
BF16_GEMM_NAMES = {"onednn": "oneDNN's bf16 GEMM (", "amx": "llmc's AMX bf16 GEMM (", "builtin": "the built-in bf16 GEMM ("}


@pytest.mark.parametrize("path, env", [
    ("refused", {"ONEDNN_MAX_CPU_ISA": "AVX2"}),
    pytest.param("kernel", {}, marks=pytest.mark.skipif(not (HAS_AVX512_BF16 or HAS_AMX_BF16),
                                                        reason="no AVX512-BF16 or AMX: oneDNN has no bf16 kernel")),
])
def test_onednn_bf16_takes_the_path_it_is_told_to_expect(path: str, env: dict[str, str]) -> None:
    """dev/test/test_matmul_onednn with LLMC_TEST_ONEDNN_BF16 set: the kernel path (oneDNN's bf16 against the rounded
    inputs' reference, the weight mirrors) or, with ONEDNN_MAX_CPU_ISA=AVX2 on any CPU, the refusal (-1, C kept,
    the built-in kernel behind matmul_gemm); told the other path, it fails."""
    make("dev/test/test_matmul_onednn")
    binary = REPO / "dev" / "test" / "test_matmul_onednn"
    # the AVX-512 loops' exhaustive checks are test_matmul_variant_matches_double_reference's (in the built-in variant)
    env = {**env, "LLMC_TEST_VECMATH": "0"}
    proc = run([binary], env={**TWO_THREADS, "LLMC_TEST_ONEDNN_BF16": path, **env})
    said = re.search(r"^oneDNN bf16 path: (.*)$", proc.stdout, re.M)
    assert said and said[1].startswith("refused: no bf16 kernel" if path == "refused" else "brg"), proc.stdout
    assert summary_counts(proc.stdout)[1] == 0
    other = "kernel" if path == "refused" else "refused"
    proc = run([binary], env={**TWO_THREADS, "LLMC_TEST_ONEDNN_BF16": other, **env}, check=False)
    assert proc.returncode != 0 and f"expected the {other} path, this run took the other" in proc.stdout


@pytest.mark.parametrize("gemm", BF16_GEMMS)
def test_gpt2_bf16_matches_reference_within_bf16_tolerances(gemm: str, d2_reference: Path) -> None:
    make("test_gpt2")
    proc = run([REPO / "test_gpt2", "-e", "gpt2_d2.bin", "-s", "gpt2_d2_debug_state.bin", "-p", "bf16"],
               cwd=d2_reference, env={**TWO_THREADS, "LLMC_BF16_GEMM": gemm})
    assert f"precision bf16 (GEMM inputs rounded to bf16) on {BF16_GEMM_NAMES[gemm]}" in proc.stdout, proc.stdout
    passed, failed = summary_counts(proc.stdout)
    assert failed == 0 and passed >= 28


@pytest.mark.parametrize("env, line", [
    ({"LLMC_BF16_GEMM": "fast"}, "error: LLMC_BF16_GEMM=fast: use builtin, onednn or amx"),
    ({"LLMC_BF16_GEMM": "onednn", "ONEDNN_MAX_CPU_ISA": "AVX2"},
     "error: LLMC_BF16_GEMM=onednn: oneDNN has no bf16 GEMM kernel on this CPU"),
    pytest.param({"LLMC_BF16_GEMM": "amx"}, "error: LLMC_BF16_GEMM=amx: this CPU has no AMX (amx_bf16), or the OS does "
                 "not let this process use it", marks=pytest.mark.skipif(HAS_AMX_BF16, reason="AMX here: the run works "
                                                                         "(test_gpt2_bf16_matches_reference... [amx])")),
])
def test_a_bf16_gemm_that_cannot_be_had_is_one_error_line(tinyshakespeare, tmp_path: Path, env, line) -> None:
    make("train_gpt2")
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-x", 1, "-p", "bf16", "-o", tmp_path],
               cwd=tmp_path, env={"LLMC_BF16": "force", **env}, check=False)
    assert assert_one_error_line(proc) == line


def overfit_losses(binary: Path, cwd: Path, precision: str, env: dict[str, str] | None = None,
                   name: str = "") -> list[float]:
    """Losses (main.log, 6 decimals) of 10 steps on the first batch (d2 from scratch, B=4, T=64, constant LR).
    -p bf16 runs the bf16 GEMMs on every CPU (LLMC_BF16=force) unless `env` says otherwise; the run's
    output directory is cwd/<name or precision>."""
    out = cwd / (name or precision)
    run([binary, "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", 4, "-t", 64, "-x", 10, "-a", 1, "-k", "constant",
         "-l", "1e-3", "-v", 0, "-s", 0, "-o", out, "-p", precision], cwd=cwd,
        env={**ONE_THREAD, "LLMC_BF16": "force", **(env or {})})
    steps = {int(m.group(1)): float(m.group(2))
             for m in re.finditer(r"^s:(\d+) trl:(\S+)", (out / "main.log").read_text(), re.M)}
    assert sorted(steps) == list(range(10)), steps
    return [steps[k] for k in range(10)]


@pytest.mark.parametrize("gemm", BF16_GEMMS)
def test_bf16_losses_follow_fp32_within_tolerance(tinyshakespeare, tmp_path: Path, gemm: str) -> None:
    make("train_gpt2")
    fp32 = overfit_losses(REPO / "train_gpt2", tmp_path, "fp32")
    bf16 = overfit_losses(REPO / "train_gpt2", tmp_path, "bf16", {"LLMC_BF16_GEMM": gemm})
    diffs = [abs(a - b) for a, b in zip(fp32, bf16)]
    assert max(diffs) <= BF16_LOSS_TOL, f"fp32 {fp32}\nbf16 {bf16}"
    assert max(diffs) > 0.0, "-p bf16 gave exactly the fp32 losses: the flag does not reach the GEMMs"
    assert bf16[-1] < bf16[0] - 1.0, f"bf16 training does not learn the batch: {bf16}"


def test_bad_precision_flag_is_one_error_line(tinyshakespeare, tmp_path: Path) -> None:
    make("train_gpt2")
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-p", "fp16"], cwd=tmp_path, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "flag -p" in lines[0] and "fp16" in lines[0], proc.stderr


# ---------------------------------------------------------------------------- which BLAS a build picks

MULTIARCH = subprocess.run(["cc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()


def fake_venv_with_openblas(root: Path) -> Path:
    """A venv holding the scipy-openblas32 wheel's header (all the BLAS choice looks at)."""
    inc = root / "venv" / "lib" / "python3.11" / "site-packages" / "scipy_openblas32" / "include"
    inc.mkdir(parents=True)
    (inc / "cblas.h").write_text("/* fake */\n")
    return root / "venv"


def fake_system_openblas(root: Path) -> tuple[Path, Path]:
    """Debian's layout of libopenblas-dev under `root` (Fedora's without a multiarch): (include dir, lib dir)."""
    if MULTIARCH:
        inc, lib = root / "usr/include" / MULTIARCH / "openblas-pthread", root / "usr/lib" / MULTIARCH
    else:
        inc, lib = root / "usr/include/openblas", root / "usr/lib64"
    inc.mkdir(parents=True)
    lib.mkdir(parents=True)
    (inc / "cblas.h").write_text("/* fake */\n")
    (lib / "libopenblas.so").write_text("")
    return inc, lib


def make_vars(venv: Path, root: Path, pkg_config: str = "false", mklroot: str = "") -> list[str]:
    return [f"VENV={venv}", f"BLAS_SEARCH_ROOT={root}", f"PKG_CONFIG={pkg_config}", f"MKLROOT={mklroot}"]


def blas_build(vars_: list[str], env: dict[str, str] | None = None) -> tuple[str, str]:
    """(the BLAS line, the compile command) make would print for `make train_gpt2` (make -n -B: nothing runs)."""
    out = run(["make", "-n", "-B", "--no-print-directory", "train_gpt2", *vars_], env=env).stdout
    lines = [ln for ln in out.splitlines() if "BLAS: " in ln and ln.lstrip().startswith("echo")]
    assert len(lines) == 1, out
    compile_line = next(ln for ln in out.splitlines() if "train_gpt2.c" in ln and "-o train_gpt2" in ln)
    info = run(["make", "-s", "--no-print-directory", "blas-info", *vars_], env=env).stdout.strip()
    assert info.startswith("BLAS: ") and info in lines[0], (info, lines[0])  # the build prints the blas-info line
    return info, compile_line


def test_with_the_venv_the_build_uses_its_openblas_wheel(tmp_path):
    venv = fake_venv_with_openblas(tmp_path)
    fake_system_openblas(tmp_path / "root")
    line, cmd = blas_build(make_vars(venv, tmp_path / "root"))
    assert line == f"BLAS: openblas (the scipy-openblas32 wheel in {venv})"
    assert "-DLLMC_BLAS_OPENBLAS " in cmd and "-lscipy_openblas" in cmd


def fake_onednn(prefix: Path, libs: tuple[str, ...]) -> Path:
    """A oneDNN prefix as pip install --prefix lays it out: the header the build looks for and empty libraries."""
    (prefix / "include" / "oneapi" / "dnnl").mkdir(parents=True)
    (prefix / "include" / "oneapi" / "dnnl" / "dnnl.h").write_text("/* fake */\n")
    (prefix / "lib").mkdir(parents=True, exist_ok=True)
    for name in ("libdnnl.so.3", *libs):
        (prefix / "lib" / name).write_text("")
    return prefix


ONEDNN_313_DEPS = ("libtbb.so.12", "libsycl.so.9", "libsvml.so", "libimf.so", "libintlc.so.5")


def test_onednn_dir_builds_the_bf16_gemms_against_another_onednn_and_links_what_its_library_needs(tmp_path):
    venv = fake_venv_with_openblas(tmp_path)
    fake_onednn(venv, ("libtbb.so.12",))  # the venv's oneDNN 3.2 (and MKL's TBB beside it)
    line, cmd = blas_build(make_vars(venv, tmp_path / "root"))
    assert line == f"BLAS: openblas (the scipy-openblas32 wheel in {venv}; bf16 GEMMs on oneDNN)", line
    assert f"-DLLMC_ONEDNN -I{venv}/include" in cmd and f"{venv}/lib/libdnnl.so.3 -Wl,-rpath,{venv}/lib" in cmd, cmd
    assert "libtbb" not in cmd, cmd  # the default links libdnnl alone, as before
    other = fake_onednn(tmp_path / "onednn313", ONEDNN_313_DEPS)
    line, cmd = blas_build([*make_vars(venv, tmp_path / "root"), f"ONEDNN_DIR={other}"])
    assert line == f"BLAS: openblas (the scipy-openblas32 wheel in {venv}; bf16 GEMMs on oneDNN in {other})", line
    assert f"-DLLMC_ONEDNN -I{other}/include" in cmd and f"-I{venv}/include" not in cmd, cmd
    # libdnnl's own dependencies linked directly: found by the program's rpath even where mpicc makes it a RUNPATH
    deps = " ".join(f"{other}/lib/{name}" for name in ONEDNN_313_DEPS)
    assert f"{other}/lib/libdnnl.so.3 -Wl,--no-as-needed {deps} -Wl,--as-needed -Wl,-rpath,{other}/lib" in cmd, cmd
    proc = run(["make", "-n", "--no-print-directory", "train_gpt2", *make_vars(venv, tmp_path / "root"),
                f"ONEDNN_DIR={tmp_path}/nosuch"], check=False)
    assert proc.returncode != 0, proc.stdout
    assert f"ONEDNN_DIR={tmp_path}/nosuch: no include/oneapi/dnnl/dnnl.h and lib/libdnnl.so.3 there" in proc.stderr


def test_without_a_venv_the_build_finds_the_system_openblas_on_the_usual_paths(tmp_path):
    inc, lib = fake_system_openblas(tmp_path / "root")
    line, cmd = blas_build(make_vars(tmp_path / "novenv", tmp_path / "root"))
    assert line.startswith(f"BLAS: openblas-system ({lib}/libopenblas.so)") and "make setup" in line, line
    assert f"-DLLMC_BLAS_OPENBLAS_SYSTEM -I{inc}" in cmd and f"-L{lib} -lopenblas" in cmd, cmd


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="no pkg-config")
def test_without_a_venv_the_build_takes_the_system_openblas_from_pkg_config(tmp_path):
    pc = tmp_path / "pc"
    pc.mkdir()
    (pc / "openblas.pc").write_text(f"Name: openblas\nDescription: fake\nVersion: 0.3.21\n"
                                    f"Libs: -L{tmp_path}/ob/lib -lopenblas\nCflags: -I{tmp_path}/ob/include\n")
    line, cmd = blas_build(make_vars(tmp_path / "novenv", tmp_path / "empty", pkg_config="pkg-config"),
                           env={"PKG_CONFIG_LIBDIR": str(pc), "PKG_CONFIG_PATH": ""})
    assert line.startswith(f"BLAS: openblas-system (pkg-config openblas: -L{tmp_path}/ob/lib -lopenblas)"), line
    assert f"-DLLMC_BLAS_OPENBLAS_SYSTEM -I{tmp_path}/ob/include" in cmd, cmd
    assert f"-Wl,-rpath,{tmp_path}/ob/lib" in cmd, cmd  # found at run time outside the loader's paths


def test_without_a_venv_the_build_finds_mkl_through_mklroot(tmp_path):
    mkl = tmp_path / "oneapi" / "mkl"
    (mkl / "include").mkdir(parents=True)
    (mkl / "lib" / "intel64").mkdir(parents=True)
    (mkl / "include" / "mkl_cblas.h").write_text("/* fake */\n")
    (mkl / "lib" / "intel64" / "libmkl_core.so").write_text("")
    line, cmd = blas_build(make_vars(tmp_path / "novenv", tmp_path / "empty", mklroot=str(mkl)))
    assert line.startswith(f"BLAS: mkl-system ({mkl}/lib/intel64/libmkl_core.so)"), line
    assert f"-DLLMC_BLAS_MKL -I{mkl}/include" in cmd and "-lmkl_core" in cmd, cmd


def test_with_no_blas_anywhere_the_build_says_it_uses_the_built_in_kernel_and_how_to_get_a_faster_one(tmp_path):
    line, cmd = blas_build(make_vars(tmp_path / "novenv", tmp_path / "empty"))
    assert line.startswith("BLAS: none (the built-in kernel of llmc/cpu/matmul.h; no OpenBLAS or MKL found)"), line
    assert "make setup" in line and "libopenblas-dev" in line, line
    assert "-DLLMC_BLAS" not in cmd and "blas" not in cmd.split("train_gpt2.c", 1)[1], cmd


def test_a_variant_without_its_blas_is_one_error_line(tmp_path):
    vars_ = make_vars(tmp_path / "novenv", tmp_path / "empty")
    proc = run(["make", "--no-print-directory", "blas-check", "BLAS=openblas-system", *vars_], check=False)
    assert proc.returncode != 0
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "BLAS=openblas-system: no OpenBLAS found" in errors[0], proc.stdout + proc.stderr
    # the variant's recipe runs that check before it compiles anything (make -n: the plan only)
    plan = run(["make", "-n", "-B", "--no-print-directory", "train_gpt2_openblas-system", *vars_]).stdout.splitlines()
    assert errors[0] in plan[0] and "exit 1" in plan[0], plan[:3]
