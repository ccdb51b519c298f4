/*
dev/fuzz/fuzz_shard.c: libFuzzer harness for the token-shard DataLoader of llmc/dataloader.h.
Input: 4 parameter bytes (B, T, flags: shuffle / 2 processes / vocab check / resume / llama-3
format expected, resume position), then the shard file. A shard that loads must give batches whose every id is below the vocab
size and whose targets are the inputs shifted by one (a chat shard's: that, or -1 where not supervised and at
every row's last position).
*/
#include "harness.h"
#include "../../llmc/dataloader.h"

static DataLoader loader;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    size_t B = 1 + fuzz_take_byte(&data, &size) % 4;
    size_t T = 1 + fuzz_take_byte(&data, &size) % 16;
    unsigned flags = fuzz_take_byte(&data, &size);
    unsigned resume = fuzz_take_byte(&data, &size);
    int shuffle = flags & 1;
    int nproc = (flags & 2) ? 2 : 1;
    int rank = (flags & 4) ? nproc - 1 : 0;
    int vocab = (flags & 8) ? 50257 : ((flags & 16) ? 1000 : 0);
    ShardFormat format = (flags & 64) ? SHARD_FORMAT_LLAMA3 : SHARD_FORMAT_GPT2;
    const char* path = fuzz_write_file(data, size);
    FUZZ_BEGIN
        dataloader_init(&loader, path, B, T, rank, nproc, shuffle, vocab, format);
        if (flags & 32) { dataloader_resume(&loader, resume >> 4, resume & 15); }
        for (int step = 0; step < 6; step++) {
            dataloader_next_batch(&loader);
            for (size_t i = 0; i < B * T; i++) {
                int x = loader.inputs[i], y = loader.targets[i];
                if (loader.masked) { // chat shards: -1 (not supervised) always at a row's end, else the next input
                    if (i % T == T - 1 ? y != -1 : (y != -1 && y != loader.inputs[i + 1])) { abort(); }
                    if (x < 0 || (vocab > 0 && x >= vocab)) { abort(); }
                    continue;
                }
                if (x < 0 || y < 0 || (vocab > 0 && (x >= vocab || y >= vocab))) { abort(); }
                if (i + 1 < B * T && loader.targets[i] != loader.inputs[i + 1]) { abort(); }
            }
        }
        dataloader_reset(&loader);
        dataloader_next_batch(&loader);
        dataloader_free(&loader);
    FUZZ_END
    globfree(&loader.glob_result);  // after a die: glob's own memory (not tracked); a no-op after _free
    memset(&loader, 0, sizeof(loader));
    return 0;
}
