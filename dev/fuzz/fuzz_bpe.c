/*
dev/fuzz/fuzz_bpe.c: libFuzzer harness for llmc/bpe.h: the gpt2_bpe.bin loader (bpe_init) and,
when the file loads, the encoder on the rest of the input.
Input: a 4-byte little-endian length n, then n bytes of BPE file, then text. Every text must
encode to ids that decode back to exactly its bytes (llmc's rule, also for invalid UTF-8), with
and without special tokens, split by GPT-2's pattern and by Llama 3's.
*/
#include "harness.h"
#include "../../llmc/bpe.h"

static BPE bpe;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 4) { return 0; }
    uint32_t n;
    memcpy(&n, data, 4);
    data += 4;
    size -= 4;
    if (n > size) { n = (uint32_t)size; }
    const uint8_t* text = data + n;
    size_t text_len = size - n;
    const char* path = fuzz_write_file(data, n);
    FUZZ_BEGIN
        memset(&bpe, 0, sizeof(bpe));
        bpe_init(&bpe, path);
        int* ids = (int*)mallocCheck((text_len + 1) * sizeof(int));
        unsigned char* back = (unsigned char*)mallocCheck(text_len + 1);
        for (int run = 0; run < 4; run++) {
            int special = run & 1;
            bpe.pattern = run < 2 ? BPE_PATTERN_GPT2 : BPE_PATTERN_LLAMA3;
            size_t count = bpe_encode(&bpe, text, text_len, special, ids);
            if (count > text_len) { abort(); }
            size_t at = 0;
            for (size_t i = 0; i < count; i++) {
                if (special && ids[i] == bpe.eot_token) {
                    if (at + strlen(BPE_EOT_TEXT) > text_len) { abort(); }
                    memcpy(back + at, BPE_EOT_TEXT, strlen(BPE_EOT_TEXT));
                    at += strlen(BPE_EOT_TEXT);
                    continue;
                }
                if (ids[i] < 0 || ids[i] >= bpe.n_tokens) { abort(); }
                size_t len = 0;
                const unsigned char* piece = bpe_token_bytes(&bpe, ids[i], &len);
                if (piece == NULL || at + len > text_len) { abort(); }
                memcpy(back + at, piece, len);
                at += len;
            }
            if (at != text_len || (text_len > 0 && memcmp(back, text, text_len) != 0)) { abort(); }
        }
        free(ids);
        free(back);
        bpe_free(&bpe);
    FUZZ_END
    return 0;
}
