/*
dev/fuzz/fuzz_tokenizer.c: libFuzzer harness for llmc/tokenizer.h (gpt2_tokenizer.bin).
The input is the whole file. A file that loads must decode every id to a piece of the length
its table says, refuse ids >= vocab size, and print safely.
*/
#include "harness.h"
#include "../../llmc/tokenizer.h"

static Tokenizer tok;
static FILE* devnull;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file(data, size);
    if (devnull == NULL) { devnull = (fopen)("/dev/null", "w"); }
    FUZZ_BEGIN
        tokenizer_init(&tok, path);
        if (!tok.init_ok) { abort(); }  // the file exists: missing-file mode must not trigger
        if (tok.eot_token < 0 || (uint32_t)tok.eot_token >= tok.vocab_size) { abort(); }
        for (uint32_t i = 0; i < tok.vocab_size; i++) {
            const char* piece = tokenizer_decode(&tok, i);
            size_t len = tokenizer_decode_length(&tok, i);
            if (piece == NULL || len == 0) { abort(); }
            volatile char last = piece[len - 1];  // the whole piece is readable (ASan checks)
            (void)last;
            safe_fprintf(devnull, piece);
        }
        if (tokenizer_decode(&tok, tok.vocab_size) != NULL || tokenizer_decode(&tok, UINT32_MAX) != NULL) { abort(); }
        tokenizer_free(&tok);
    FUZZ_END
    return 0;
}
