/*
dev/test/rand_dump.c: writes llmc/rand.h output as raw little-endian bytes to stdout,
so tests/test_c_headers.py can compare it bit for bit with torch's CPU generator.

usage: rand_dump SEED OP [OP ...]
  n:COUNT:MEAN:STD   normal_d  (float32 values; MEAN and STD parsed as doubles, like Python floats)
  u:COUNT:FROM:TO    uniform_  (float32 values)
  i:COUNT            randint32 (uint32 values)
  l:COUNT            randint64 (uint64 values)
  k:0                the generator's torch_avx2_or_above flag (one int32)
  s:SEED             manual_seed(SEED) again (no output), to run several cases in one process
All ops run on one generator, in order. The generator follows ATEN_CPU_CAPABILITY like torch.
*/
#include <stdio.h>
#include <stdlib.h>
#include "llmc/rand.h"
#include "llmc/utils.h"

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SEED OP [OP ...]\n", argv[0]);
        return 2;
    }
    mt19937_state rng;
    manual_seed(&rng, (unsigned int)strtoul(argv[1], NULL, 10));
    for (int a = 2; a < argc; a++) {
        char op = 0;
        size_t count = 0;
        double p1 = 0.0, p2 = 0.0;
        int fields = sscanf(argv[a], "%c:%zu:%lf:%lf", &op, &count, &p1, &p2);
        if (fields < 2) { llmc_die("bad op '%s'", argv[a]); }
        if (op == 'n' || op == 'u') {
            if (fields != 4) { llmc_die("bad op '%s' (expected %c:COUNT:A:B)", argv[a], op); }
            float* buf = (float*)mallocCheck(count * sizeof(float));
            if (op == 'n') { normal_d(buf, count, p1, p2, &rng); }
            else { uniform_(buf, count, (float)p1, (float)p2, &rng); }
            fwriteCheck(buf, sizeof(float), count, stdout, "<stdout>");
            free(buf);
        } else if (op == 'i') {
            for (size_t i = 0; i < count; i++) {
                uint32_t r = randint32(&rng);
                fwriteCheck(&r, sizeof(r), 1, stdout, "<stdout>");
            }
        } else if (op == 's') {
            manual_seed(&rng, (unsigned int)count);
        } else if (op == 'k') {
            int32_t flag = rng.torch_avx2_or_above;
            fwriteCheck(&flag, sizeof(flag), 1, stdout, "<stdout>");
        } else if (op == 'l') {
            for (size_t i = 0; i < count; i++) {
                uint64_t r = randint64(&rng);
                fwriteCheck(&r, sizeof(r), 1, stdout, "<stdout>");
            }
        } else {
            llmc_die("bad op '%s' (unknown op '%c')", argv[a], op);
        }
    }
    fflush(stdout);
    return 0;
}
