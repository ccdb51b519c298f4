/*
dev/test/dataloader_dump.c: writes what llmc/dataloader.h produces, for tests/test_c_headers.py.

usage: dataloader_dump PATTERN B T RANK NPROC SHUFFLE VOCAB NBATCHES
    reads GPT-2 token shards (uint16), like ./train_gpt2; stdout per batch: int32 inputs (B*T), int32 targets (B*T), uint64 shard_idx, uint64 sample_idx
usage: dataloader_dump --eval PATH B T RANK NPROC
    stdout: int32 num_batches, then per batch: int32 examples in the batch, int32 inputs (B*T),
    int32 targets (B*T), uint8 mask (B*T)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/dataloader.h"

int main(int argc, char** argv) {
    if (argc == 7 && strcmp(argv[1], "--eval") == 0) {
        size_t B = strtoul(argv[3], NULL, 10), T = strtoul(argv[4], NULL, 10);
        EvalLoader l;
        evalloader_init(&l, argv[2], B, T, atoi(argv[5]), atoi(argv[6]));
        int32_t nb = l.num_batches;
        fwriteCheck(&nb, sizeof(nb), 1, stdout, "<stdout>");
        for (int b = 0; b < l.num_batches; b++) {
            evalloader_next_batch(&l);
            int32_t count = l.num_examples_in_batch;
            fwriteCheck(&count, sizeof(count), 1, stdout, "<stdout>");
            fwriteCheck(l.inputs, sizeof(int), B * T, stdout, "<stdout>");
            fwriteCheck(l.targets, sizeof(int), B * T, stdout, "<stdout>");
            fwriteCheck(l.mask, 1, B * T, stdout, "<stdout>");
        }
        evalloader_free(&l);
        return 0;
    }
    if (argc != 9) {
        fprintf(stderr, "usage: %s PATTERN B T RANK NPROC SHUFFLE VOCAB NBATCHES | --eval PATH B T RANK NPROC\n", argv[0]);
        return 2;
    }
    size_t B = strtoul(argv[2], NULL, 10), T = strtoul(argv[3], NULL, 10);
    DataLoader l;
    dataloader_init(&l, argv[1], B, T, atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]), SHARD_FORMAT_GPT2);
    int nbatches = atoi(argv[8]);
    for (int b = 0; b < nbatches; b++) {
        dataloader_next_batch(&l);
        uint64_t pos[2] = {l.current_shard_idx, l.current_sample_idx};
        fwriteCheck(l.inputs, sizeof(int), B * T, stdout, "<stdout>");
        fwriteCheck(l.targets, sizeof(int), B * T, stdout, "<stdout>");
        fwriteCheck(pos, sizeof(uint64_t), 2, stdout, "<stdout>");
    }
    dataloader_free(&l);
    return 0;
}
