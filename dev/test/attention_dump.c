/*
dev/test/attention_dump.c: runs llmc/cpu/attention_cpu.h's attention on given tensors, for the tests that
compare it with torch (tests/test_cpu_attention.py).

    dev/test/attention_dump IN OUT [weights]

IN: int32 B, T, C, NH, then float32 inp (B,T,3C) and dout (B,T,C). OUT receives float32 out (B,T,C)
then dinp (B,T,3C): attention_forward, then attention_backward into a zeroed dinp. Without
`weights` both run the trainer's blocked path (att NULL); with it, through an (B,NH,T,T) buffer.
Bad input (missing or short file, sizes out of range) is one error line and exit status 1.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/cpu/attention_cpu.h"

static void read_exact(FILE* f, void* dst, size_t n, const char* path, const char* what) {
    if (fread(dst, 1, n, f) != n) {
        fprintf(stderr, "error: %s: file too short for %s\n", path, what);
        exit(1);
    }
}

int main(int argc, char** argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "weights") == 0)) {
        fprintf(stderr, "error: usage: %s IN OUT [weights]\n", argv[0]);
        return 1;
    }
    FILE* f = fopen(argv[1], "rb");
    if (f == NULL) {
        fprintf(stderr, "error: %s: cannot open\n", argv[1]);
        return 1;
    }
    int dims[4];
    read_exact(f, dims, sizeof(dims), argv[1], "the header");
    int B = dims[0], T = dims[1], C = dims[2], NH = dims[3];
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0 || B > 64 || T > 8192 || C > 8192) {
        fprintf(stderr, "error: %s: bad sizes B=%d T=%d C=%d NH=%d\n", argv[1], B, T, C, NH);
        return 1;
    }
    size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float* inp = (float*)mallocCheck(nin * sizeof(float));
    float* dout = (float*)mallocCheck(nout * sizeof(float));
    float* out = (float*)mallocCheck(nout * sizeof(float));
    float* dinp = (float*)calloc(nin, sizeof(float));
    float* att = argc == 4 ? (float*)mallocCheck((size_t)B * NH * T * T * sizeof(float)) : NULL;
    if (dinp == NULL) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    read_exact(f, inp, nin * sizeof(float), argv[1], "inp");
    read_exact(f, dout, nout * sizeof(float), argv[1], "dout");
    fclose(f);
    attention_forward(out, att, inp, B, T, C, NH);
    attention_backward(dinp, dout, inp, att, B, T, C, NH);
    FILE* g = fopen(argv[2], "wb");
    if (g == NULL || fwrite(out, sizeof(float), nout, g) != nout || fwrite(dinp, sizeof(float), nin, g) != nin ||
        fclose(g) != 0) {
        fprintf(stderr, "error: %s: cannot write\n", argv[2]);
        return 1;
    }
    free(inp); free(dout); free(out); free(dinp); free(att);
    return 0;
}
