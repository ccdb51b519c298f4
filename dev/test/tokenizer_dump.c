/*
dev/test/tokenizer_dump.c: writes what llmc/tokenizer.h decodes, for tests/test_c_headers.py.

usage: tokenizer_dump TOKENIZER_FILE
stdout: uint32 vocab_size, uint32 eot_token, then per token id a uint32 length and the piece's
bytes, then one byte: 1 if decoding id vocab_size returns NULL.
*/
#include <stdio.h>
#include "llmc/tokenizer.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TOKENIZER_FILE\n", argv[0]);
        return 2;
    }
    Tokenizer t;
    tokenizer_init(&t, argv[1]);
    if (!t.init_ok) { return 1; }
    uint32_t head[2] = {t.vocab_size, (uint32_t)t.eot_token};
    fwriteCheck(head, sizeof(uint32_t), 2, stdout, "<stdout>");
    for (uint32_t i = 0; i < t.vocab_size; i++) {
        uint32_t len = (uint32_t)tokenizer_decode_length(&t, i);
        fwriteCheck(&len, sizeof(len), 1, stdout, "<stdout>");
        fwriteCheck(tokenizer_decode(&t, i), 1, len, stdout, "<stdout>");
    }
    unsigned char past_end_null = tokenizer_decode(&t, t.vocab_size) == NULL ? 1 : 0;
    fwriteCheck(&past_end_null, 1, 1, stdout, "<stdout>");
    tokenizer_free(&t);
    return 0;
}
