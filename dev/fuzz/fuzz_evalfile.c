/*
dev/fuzz/fuzz_evalfile.c: libFuzzer harness for the HellaSwag EvalLoader of llmc/dataloader.h.
Input: 2 parameter bytes (B = 4 or 8, T, and 1 or 2 processes), then the eval file. A file that
loads must give batches whose every row fits T, whose masked positions lie inside the row, and
whose labels are 0..3; every rank does the same number of batches.
*/
#include "harness.h"
#include "../../llmc/dataloader.h"

static EvalLoader loader;
static float losses[8 * 256];

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    unsigned p0 = fuzz_take_byte(&data, &size);
    unsigned p1 = fuzz_take_byte(&data, &size);
    size_t B = (p0 & 1) ? 8 : 4;
    int nproc = (p0 & 2) ? 2 : 1;
    int rank = (p0 & 4) ? nproc - 1 : 0;
    size_t T = 1 + p1 % 256;
    const char* path = fuzz_write_file(data, size);
    FUZZ_BEGIN
        evalloader_init(&loader, path, B, T, rank, nproc);
        if (loader.num_batches < 0 || loader.start_example_index > loader.end_example_index) { abort(); }
        for (int b = 0; b < loader.num_batches; b++) {
            evalloader_next_batch(&loader);
            for (int e = 0; e < loader.num_examples_in_batch; e++) {
                if (loader.labels[e] < 0 || loader.labels[e] >= EVAL_NUM_COMPLETIONS) { abort(); }
            }
            for (size_t i = 0; i < B * T; i++) {
                if (loader.inputs[i] < 0 || loader.inputs[i] > 65535) { abort(); }
                if (loader.mask[i] && (i % T) + 1 >= T) { abort(); }  // a masked position predicts a token inside the row
                losses[i] = (float)(loader.inputs[i] % 7);
            }
            int correct = evalloader_stat_losses(&loader, losses);
            if (correct < 0 || correct > loader.num_examples_in_batch) { abort(); }
        }
        evalloader_reset(&loader);
        evalloader_free(&loader);
    FUZZ_END
    memset(&loader, 0, sizeof(loader));
    return 0;
}
