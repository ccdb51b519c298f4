/*
dev/test/test_gemm_host.c: the host half of llmc/cuda/matmul.cuh on the CPU -- every linear layer's cuBLAS call
(transposes, leading dimensions, operand roles) run through gemm_reference, a CPU model of cuBLAS, and
compared with plain row-major loops; the row chunks of the bias-gradient column sums.
*/
#include "../../llmc/cuda/matmul.cuh"
#include "test_common.h"

// ----------------------------------------------------------------------------
// GEMM layouts: the row-major <-> column-major bookkeeping of every cuBLAS call

static void test_linear_gemm_specs(void) {
    const int BT = 6, C = 5, OC = 7;
    float* inp = random_array((size_t)BT * C, 1);
    float* weight = random_array((size_t)OC * C, 2);
    float* dout = random_array((size_t)BT * OC, 3);
    float* got = (float*)calloc((size_t)BT * OC + (size_t)OC * C + (size_t)BT * C, sizeof(float));
    float* ref = (float*)calloc((size_t)BT * OC + (size_t)OC * C + (size_t)BT * C, sizeof(float));
    const float* ops[LIN_NUM_OPERANDS] = {inp, weight, NULL, NULL, NULL, dout};
    // forward: out (BT, OC) = inp @ weight^T
    GemmSpec f = linear_forward_spec(BT, C, OC);
    CHECK(f.d == LIN_OUT && f.m * f.n == BT * OC, "the forward GEMM writes out");
    gemm_reference(&f, ops[f.a], ops[f.b], got, 1.0f, 0.0f);
    matmul_rowmajor(ref, inp, 0, weight, 1, 1, BT, OC, C, 0.0f);
    CHECK(max_abs_diff(got, ref, (size_t)BT * OC) < 1e-5, "linear forward spec computes inp @ weight^T (row-major)");
    // dinp (BT, C) = dout @ weight
    GemmSpec di = linear_dinp_spec(BT, C, OC);
    CHECK(di.d == LIN_DINP, "the dinp GEMM writes dinp");
    gemm_reference(&di, ops[di.a], ops[di.b], got, 1.0f, 0.0f);
    matmul_rowmajor(ref, dout, 0, weight, 0, 1, BT, C, OC, 0.0f);
    CHECK(max_abs_diff(got, ref, (size_t)BT * C) < 1e-5, "linear dinp spec computes dout @ weight");
    // dweight (OC, C) += dout^T @ inp, accumulating onto what is there
    GemmSpec dw = linear_dweight_spec(BT, C, OC);
    CHECK(dw.d == LIN_DWEIGHT, "the dweight GEMM writes dweight");
    for (int i = 0; i < OC * C; i++) { got[i] = 1.0f; ref[i] = 1.0f; }
    gemm_reference(&dw, ops[dw.a], ops[dw.b], got, 1.0f, 1.0f);
    matmul_rowmajor(ref, dout, 1, inp, 0, 1, OC, C, BT, 1.0f);
    CHECK(max_abs_diff(got, ref, (size_t)OC * C) < 1e-5, "linear dweight spec accumulates dout^T @ inp");
    free(inp); free(weight); free(dout); free(got); free(ref);
}

// ----------------------------------------------------------------------------
// index maps and partitions used inside the kernels

static void test_row_chunks(void) {
    const int Ns[] = {1, 7, 32, 33, 1000, 65536};
    int bad = 0;
    for (size_t i = 0; i < sizeof(Ns) / sizeof(Ns[0]); i++) {
        int N = Ns[i];
        int next = 0;
        for (int chunk = 0; chunk < 32; chunk++) {
            int start, end;
            row_chunk(N, 32, chunk, &start, &end);
            bad += start != next || end < start || end > N;
            next = end;
        }
        bad += next != N;
    }
    CHECK(bad == 0, "the 32 row chunks of the column sums tile [0, N) in order, for N below and above 32");
}

int main(void) {
    test_linear_gemm_specs();
    test_row_chunks();
    return test_summary();
}
