#!/bin/bash
# dev/onednn_313.sh: oneDNN 3.2 (the venv's onednn-cpu-gomp wheel, GNU OpenMP) against oneDNN 3.13 (the onednn
# 2026.1.0 wheel: SYCL + TBB) on the GEMMs of one GPT-2 d12 training step, alternating runs on a noisy machine;
# doc/onednn-3.13.md has the results and what they mean.
#
#   dev/onednn_313.sh [DIR]          DIR: where it works (default /tmp/onednn313); the project's files are only read
#   ROUNDS=8 ROUNDS_1024=3 dev/onednn_313.sh      alternating rounds at B*T = 256 (B=4, T=64) and 4096 (T=1024)
#   SUMMARY_ONLY=1 dev/onednn_313.sh              the tables again from DIR/results
#   WAIT_IDLE=1 dev/onednn_313.sh                 each group of alternating runs starts only when both cores were
#                                                 >= 95 % idle for half a second (on a machine others share)
#   RESULTS=dir, LLMC_ROOT=checkout               results elsewhere; another checkout's .venv (3.2) and headers
#
# It makes DIR/venv and pip-installs onednn==2026.1.0 onednn-devel==2026.1.0 there (with their dependencies: about
# 2 GB; never into the project's .venv), writes DIR/onednn_step.c (below), builds it with llmc/cpu/onednn_gemm.h
# against the project's .venv (3.2) and against DIR/venv (3.13), and runs, per round, each variant:
#   3.2                  OMP_NUM_THREADS=2, called from the main thread (the trainer's -p bf16 GEMMs)
#   3.2+region           the same with an OpenMP region right before every GEMM (the trainer's pattern)
#   3.13                 TBB's threads (2: the affinity mask), no OpenMP in the process
#   3.13+region          OpenMP linked as well, a 2-thread OpenMP region before every GEMM, libgomp's default wait
#   3.13+region-passive  the same under OMP_WAIT_POLICY=passive
#   3.2-1t, 3.13-1t      one thread each (OMP_NUM_THREADS=1; taskset -c 0 for both): the kernels alone
# 3.13's libdnnl needs libtbb, libsycl, libsvml, libimf, libintlc from DIR/venv/lib, which the executable's
# RUNPATH does not give to libdnnl: it is linked with -Wl,--disable-new-dtags (an RPATH, which libraries inherit).
# Its CPU engine is a SYCL CPU device: the OpenCL CPU runtime of intel-opencl-rt, found only through
# OCL_ICD_FILENAMES (the wheel's icd file names a conda build path), so that is set here.
set -e
ROOT=${LLMC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
W=${1:-/tmp/onednn313}
V=$W/venv
R=${RESULTS:-$W/results}
ROUNDS=${ROUNDS:-8}
ROUNDS_1024=${ROUNDS_1024:-3}
mkdir -p "$W" "$R"

summary() {
python3 - "$R" <<'PY'
import sys, re, glob, os, statistics as st
from collections import defaultdict
steps = defaultdict(list); gemms = defaultdict(lambda: defaultdict(list)); impl = {}; regions = defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.txt"))):
    r, var, prec, bt = os.path.basename(f)[:-4].split("_", 3)
    for line in open(f):
        m = re.match(r"gemm (\S+)\s+(\S+)\s+M=\d+\s+N=\d+\s+K=\d+\s+[\d.]+ ms\s+([\d.]+) GFLOP/s\s+min\s+[\d.]+ ms\s+([\d.]+) GFLOP/s\s+(\S*)", line)
        if m:
            gemms[(var, prec, bt)][(m[1], m[2])].append((float(m[3]), float(m[4])))
            impl[(var, prec)] = m[5]
        m = re.match(r"step \S+ BT=\d+: ([\d.]+) ms, ([\d.]+) GFLOP/s; from the fastest calls ([\d.]+) ms", line)
        if m: steps[(var, prec, bt)].append((float(m[1]), float(m[2]), float(m[3])))
        m = re.match(r"region: .* took ([\d.]+) us", line)
        if m: regions[(var, prec, bt)].append(float(m[1]))
print("Sum of one d12 step's GEMM times (12 layers x 4 linears x 3 GEMMs + the lm_head's 3), per run the sum of")
print("each GEMM's median (and of its fastest call); over the runs: median (min)")
print()
print("| variant | precision | B*T | runs | step GEMMs, ms | GFLOP/s | from fastest calls, ms | GFLOP/s | OpenMP region, us |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k in sorted(steps, key=lambda k: (int(k[2]), k[1], k[0])):
    ms = [s[0] for s in steps[k]]; fast = [s[2] for s in steps[k]]
    gf = steps[k][0][1] * steps[k][0][0] / 1e3  # GFLOP per step
    reg = f"{st.median(regions[k]):.0f}" if regions[k] else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {len(ms)} | {st.median(ms):.0f} ({min(ms):.0f}) | {gf/st.median(ms)*1e3:.0f} |"
          f" {st.median(fast):.0f} ({min(fast):.0f}) | {gf/min(fast)*1e3:.0f} | {reg} |")
print()
for bt in sorted({k[2] for k in gemms}, key=int):
    for prec in ("bf16", "fp32"):
        ks = sorted([k for k in gemms if k[2] == bt and k[1] == prec])
        if not ks: continue
        print(f"GFLOP/s per GEMM, {prec}, B*T={bt}: median over runs of each run's median (best call of all runs)")
        print()
        print("| GEMM | " + " | ".join(k[0] for k in ks) + " |")
        print("| --- " * (len(ks) + 1) + "|")
        for g in gemms[ks[0]]:
            print(f"| {g[0]} {g[1]} | " + " | ".join(
                f"{st.median(x[0] for x in gemms[k][g]):.0f} ({max(x[1] for x in gemms[k][g]):.0f})" for k in ks) + " |")
        print()
print("kernels (oneDNN's impl string):", ", ".join(f"{v} {p}: {i}" for (v, p), i in sorted(impl.items())))
PY
}
if [ -n "$SUMMARY_ONLY" ]; then summary; exit 0; fi

if [ ! -e "$V/lib/libdnnl.so.3.13" ]; then
    python3 -m venv "$V"
    "$V/bin/pip" install -q --disable-pip-version-check onednn==2026.1.0 onednn-devel==2026.1.0
fi
test -e "$ROOT/.venv/lib/libdnnl.so.3" || { echo "error: no oneDNN 3.2 in $ROOT/.venv (make setup)"; exit 1; }

cat > "$W/onednn_step.c" <<'C_SOURCE'
/*
onednn_step.c: the GEMMs of one GPT-2 training step on oneDNN's matmul primitive, through llmc/cpu/onednn_gemm.h
(the trainer's own calls), so one source builds against any oneDNN 3.x and the rates compare.

    onednn_step [-t BT] [-C 768] [-V 50304] [-L 12] [-r reps] [-p fp32|bf16] [-i]

Per layer the qkv, attention projection, fc and fc projection GEMMs and the lm_head: forward
out (BT,OC) = inp (BT,IC) . W (OC,IC)^T (beta 1: the bias is copied in first; lm_head beta 0), input gradient
dinp (BT,IC) += dout (BT,OC) . W (OC,IC), weight gradient dW (OC,IC) += dout^T (OC,BT) . inp (BT,IC), each the median
of -r timed calls after one untimed one (the primitive's creation), and the fastest of them. Prints one line per GEMM
and the step's sums of medians and of minima (layers counted L times). -i (builds with -fopenmp): before every call an OpenMP parallel region copies 1 MB, as
the trainer's bias copy / element-wise loops do, and the GEMM is called right after it from the main thread; the
regions' own times (each right after the previous GEMM) are printed too.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmc/cpu/onednn_gemm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static uint16_t bf16(float f) { // round to nearest even, as matmul_round_bf16
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#define MAX_REGIONS 4096
static double region_s[MAX_REGIONS];
static int nregion = 0;
static float* spin_src;
static float* spin_dst;
static void omp_region(void) {
#ifdef _OPENMP
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < 256; r++) { memcpy(spin_dst + r * 1024, spin_src + r * 1024, 1024 * sizeof(float)); }
#endif
}

int main(int argc, char** argv) {
    int BT = 256, C = 768, V = 50304, L = 12, reps = 7, prec = ONEDNN_BF16, interleave = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) { BT = atoi(argv[++i]); }
        else if (!strcmp(argv[i], "-C") && i + 1 < argc) { C = atoi(argv[++i]); }
        else if (!strcmp(argv[i], "-V") && i + 1 < argc) { V = atoi(argv[++i]); }
        else if (!strcmp(argv[i], "-L") && i + 1 < argc) { L = atoi(argv[++i]); }
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) { reps = atoi(argv[++i]); }
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) { prec = !strcmp(argv[++i], "bf16") ? ONEDNN_BF16 : ONEDNN_F32; }
        else if (!strcmp(argv[i], "-i")) { interleave = 1; }
        else { fprintf(stderr, "usage: %s [-t BT] [-C C] [-V Vp] [-L layers] [-r reps] [-p fp32|bf16] [-i]\n", argv[0]); return 1; }
    }
    spin_src = calloc(256 * 1024, sizeof(float));
    spin_dst = calloc(256 * 1024, sizeof(float));
    char ver[128];
    onednn_version(ver, sizeof(ver));
    int omp = 0;
#ifdef _OPENMP
    omp = omp_get_max_threads();
#endif
    const char* kernel = onednn_gemm_kernel(prec, BT, C, C);
    printf("# %s, %s, BT=%d C=%d V=%d L=%d, median of %d, OpenMP %s (%d threads)%s; kernel %s\n", ver, onednn_type_name(prec),
           BT, C, V, L, reps, omp ? "linked" : "not linked", omp, interleave ? ", an OpenMP region before each call" : "",
           kernel ? kernel : "none");
    const int outs[4] = {3 * C, C, 4 * C, C}, ins[4] = {C, C, C, 4 * C};
    const char* names[5] = {"qkv", "attproj", "fc", "fcproj", "lm_head"};
    const char* kinds[3] = {"fwd", "dinp", "dW"};
    double step_s = 0, step_min_s = 0, step_flops = 0;
    double* secs = malloc(sizeof(double) * (size_t)reps);
    size_t esz = prec == ONEDNN_BF16 ? 2 : 4;
    for (int l = 0; l < 5; l++) {
        int OC = l < 4 ? outs[l] : V, IC = l < 4 ? ins[l] : C, times = l < 4 ? L : 1;
        for (int g = 0; g < 3; g++) {
            int M, N, K, ta, tb, lda, ldb;
            float beta;
            if (g == 0) { M = BT; N = OC; K = IC; ta = 0; tb = 1; lda = IC; ldb = IC; beta = l < 4 ? 1.0f : 0.0f; }
            else if (g == 1) { M = BT; N = IC; K = OC; ta = 0; tb = 0; lda = OC; ldb = IC; beta = 1.0f; }
            else { M = OC; N = IC; K = BT; ta = 1; tb = 0; lda = OC; ldb = IC; beta = 1.0f; }
            size_t an = (size_t)M * K, bn = (size_t)K * N;
            void* A = malloc(an * esz);
            void* B = malloc(bn * esz);
            float* Cm = calloc((size_t)M * N, sizeof(float));
            for (size_t k = 0; k < an; k++) {
                float v = (float)((k * 7919u) % 1000u) * 1e-3f - 0.5f;
                if (esz == 2) { ((uint16_t*)A)[k] = bf16(v); } else { ((float*)A)[k] = v; }
            }
            for (size_t k = 0; k < bn; k++) {
                float v = (float)((k * 104729u) % 1000u) * 1e-3f - 0.5f;
                if (esz == 2) { ((uint16_t*)B)[k] = bf16(v); } else { ((float*)B)[k] = v; }
            }
            for (int r = -1; r < reps; r++) {
                if (interleave) {
                    double r0 = now();
                    omp_region();
                    if (nregion < MAX_REGIONS) { region_s[nregion++] = now() - r0; }
                }
                double t0 = now();
                if (onednn_gemm(prec, ta, tb, M, N, K, A, lda, B, ldb, beta, Cm, N) != 0) {
                    fprintf(stderr, "no oneDNN kernel for %s %s\n", names[l], kinds[g]);
                    return 1;
                }
                if (r >= 0) { secs[r] = now() - t0; }
            }
            qsort(secs, (size_t)reps, sizeof(double), cmp);
            double med = reps % 2 ? secs[reps / 2] : 0.5 * (secs[reps / 2 - 1] + secs[reps / 2]);
            OnednnKey key = onednn_key(prec, ta, tb, M, N, K, lda, ldb, N, beta);
            OnednnEntry* e = onednn_entry(&key);
            double fl = 2.0 * M * N * K;
            printf("gemm %-7s %-4s M=%-5d N=%-5d K=%-5d %8.3f ms %7.1f GFLOP/s  min %8.3f ms %7.1f GFLOP/s  %s\n",
                   names[l], kinds[g], M, N, K, med * 1e3, fl / med / 1e9, secs[0] * 1e3, fl / secs[0] / 1e9, e->impl);
            step_s += med * times;
            step_min_s += secs[0] * times;
            step_flops += fl * times;
            free(A); free(B); free(Cm);
        }
    }
    if (nregion > 0) { // each region ran right after a GEMM (or the previous GEMM's data setup)
        qsort(region_s, (size_t)nregion, sizeof(double), cmp);
        printf("region: the OpenMP region before a GEMM took %.1f us (median of %d), %.1f us (90th percentile)\n",
               region_s[nregion / 2] * 1e6, nregion, region_s[nregion * 9 / 10] * 1e6);
    }
    printf("step %s BT=%d: %.1f ms, %.1f GFLOP/s; from the fastest calls %.1f ms, %.1f GFLOP/s\n", onednn_type_name(prec), BT,
           step_s * 1e3, step_flops / step_s / 1e9, step_min_s * 1e3, step_flops / step_min_s / 1e9);
    return 0;
}
C_SOURCE

cd "$W"
gcc -O2 -fopenmp -I"$ROOT" -I"$ROOT/.venv/include" onednn_step.c -o step32 "$ROOT/.venv/lib/libdnnl.so.3" \
    -Wl,-rpath,"$ROOT/.venv/lib" -lpthread
gcc -O2 -I"$ROOT" -I"$V/include" onednn_step.c -o step313 "$V/lib/libdnnl.so.3" -Wl,--disable-new-dtags,-rpath,"$V/lib" -lpthread
gcc -O2 -fopenmp -I"$ROOT" -I"$V/include" onednn_step.c -o step313omp "$V/lib/libdnnl.so.3" \
    -Wl,--disable-new-dtags,-rpath,"$V/lib" -lpthread
export OCL_ICD_FILENAMES=$V/lib/libintelocl.so

run() { # round variant precision BT reps
    local f=$R/$1_$2_$3_$4.txt cmd
    case $2 in
        3.2) cmd="env OMP_NUM_THREADS=2 ./step32" ;;
        3.2+region) cmd="env OMP_NUM_THREADS=2 ./step32 -i" ;;
        3.2-1t) cmd="env OMP_NUM_THREADS=1 taskset -c 0 ./step32" ;;
        3.13) cmd="./step313" ;;
        3.13-1t) cmd="taskset -c 0 ./step313" ;;
        3.13+region) cmd="env OMP_NUM_THREADS=2 ./step313omp -i" ;;
        3.13+region-passive) cmd="env OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ./step313omp -i" ;;
    esac
    { echo "# load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T): $cmd"; $cmd -p $3 -t $4 -r $5; } > "$f" 2>&1
    echo "$(date +%T) round $1 $2 $3 B*T=$4: $(tail -1 "$f")"
}
order() { if (( $1 % 2 )); then printf '%s\n' "${@:2}" | tac; else printf '%s\n' "${@:2}"; fi; } # alternate the order
idle_pct() { # percent of the CPUs' time idle over the next half second
    local a b t=0 i
    a=($(head -1 /proc/stat)); sleep 0.5; b=($(head -1 /proc/stat))
    for i in 1 2 3 4 5 6 7 8; do t=$((t + b[i] - a[i])); done
    echo $(( (b[4] - a[4]) * 100 / (t > 0 ? t : 1) ))
}
settle() { if [ -n "$WAIT_IDLE" ]; then until [ "$(idle_pct)" -ge 95 ]; do :; done; fi; }
for ((i = 1; i <= ROUNDS; i++)); do
    settle; for v in $(order $i 3.2 3.13); do run $i $v bf16 256 9; done
    settle; for v in $(order $i 3.2 3.13); do run $i $v fp32 256 9; done
    settle; for v in $(order $i 3.13+region 3.13+region-passive 3.2+region); do run $i $v bf16 256 9; done
    settle; for v in $(order $i 3.2-1t 3.13-1t); do run $i $v bf16 256 5; run $i $v fp32 256 5; done
done
for ((i = 1; i <= ROUNDS_1024; i++)); do
    settle; for v in $(order $i 3.2 3.13); do run $i $v bf16 4096 3; done
    settle; for v in $(order $i 3.2 3.13); do run $i $v fp32 4096 3; done
    settle; for v in $(order $i 3.13+region-passive 3.2-1t 3.13-1t); do run $i $v bf16 4096 1; done
done
summary
