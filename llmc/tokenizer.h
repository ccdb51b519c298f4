/*
llmc/tokenizer.h: decodes token ids to bytes with the table in gpt2_tokenizer.bin (GPT-2) or
llama3_tokenizer.bin (Llama 3).

File format (llm.c-compatible): a header of 256 uint32
    [0] = 20240328, [1] = version (1, 2: GPT-2; 3: Llama 3), [2] = vocab size, [3] = EOT token id
    (versions 2 and 3; version 1 files assume 50256), [4] = BOS token id (version 3 only:
    <|begin_of_text|>, the token every document and every sample starts with; a tokenizer without a BOS,
    Qwen3's, writes its document delimiter <|endoftext|> in both [3] and [4])
then for each token id in order: one uint8 length (>= 1), then that many raw bytes (Llama 3's
byte-level BPE pieces as real bytes, special tokens as their text).
Every length is checked against the real file size, so a truncated or corrupt file stops the
program with one line "error: <path>: <reason>" instead of reading garbage.
Decoding only; llmc/bpe.h encodes text (GPT-2: gpt2_bpe.bin; Llama 3: bpe_init_llama3 takes the ranks
from a version 3 file read here).
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_V1_EOT 50256

// how a tokenizer splits text into pieces before BPE (its pre-tokenizer's pattern; llmc/bpe.h implements each): GPT-2's
// (tiktoken's "gpt2"), Llama 3's (numbers in groups of up to three), Qwen's (Qwen2 onwards: Llama 3's, but every number
// alone). A family names its own (ModelFamily.tokenizer_pattern)
enum { BPE_PATTERN_GPT2 = 0, BPE_PATTERN_LLAMA3 = 1, BPE_PATTERN_QWEN = 2 };

typedef struct {
    uint32_t vocab_size;
    char** token_table;  // (vocab_size,) NUL-terminated pieces, pointing into `bytes`
    int init_ok;         // 0 when the file was missing: decoding is unavailable
    int eot_token;       // <|endoftext|> (GPT-2), <|end_of_text|> (Llama 3)
    int bos_token;       // <|begin_of_text|> (version 3), -1 for GPT-2's files
    int version;         // 1, 2 or 3
    char* bytes;         // all pieces, each followed by a NUL
    unsigned char* token_lengths;  // (vocab_size,) byte length of each piece (a piece may contain a NUL byte)
} Tokenizer;

// missing file: init_ok = 0 and a one-line warning on stderr; corrupt file: dies with one line
static inline void tokenizer_init(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "warning: %s: cannot open tokenizer (%s); python train_gpt2.py (GPT-2), train_llama3.py (Llama 3) or train_nanochat.py (nanochat) writes it "
                        "(token ids will not be decoded)\n", path, strerror(errno));
        t->init_ok = 0;
        return;
    }
    size_t file_bytes = file_size_check(f, path);
    uint32_t header[256];
    if (file_bytes < sizeof(header)) {
        llmc_die("%s: not a tokenizer file (%zu bytes, shorter than the 1024-byte header)", path, file_bytes);
    }
    freadCheck(header, sizeof(uint32_t), 256, f, path);
    if (header[0] != TOKENIZER_MAGIC) {
        llmc_die("%s: not a tokenizer file (magic %u, expected %d)", path, header[0], TOKENIZER_MAGIC);
    }
    if (header[1] != 1 && header[1] != 2 && header[1] != 3) {
        llmc_die("%s: unsupported tokenizer version %u (expected 1 or 2 for GPT-2, 3 for Llama 3)", path, header[1]);
    }
    uint32_t vocab_size = header[2];
    if (vocab_size == 0 || vocab_size > (file_bytes - sizeof(header)) / 2) {
        llmc_die("%s: bad vocab size %u for a file of %zu bytes", path, vocab_size, file_bytes);
    }
    uint32_t eot = header[1] == 1 ? (uint32_t)TOKENIZER_V1_EOT : header[3];
    if (eot >= vocab_size) {
        llmc_die("%s: EOT token %u is not below the vocab size %u", path, eot, vocab_size);
    }
    if (header[1] == 3 && header[4] >= vocab_size) {
        llmc_die("%s: BOS token %u is not below the vocab size %u", path, header[4], vocab_size);
    }
    // the pieces take (body - vocab_size) bytes; with one NUL each that is exactly the body size
    size_t body = file_bytes - sizeof(header);
    t->bytes = (char*)mallocCheck(body);
    t->token_table = (char**)mallocCheck((size_t)vocab_size * sizeof(char*));
    t->token_lengths = (unsigned char*)mallocCheck((size_t)vocab_size);
    size_t used = 0;  // bytes of the body consumed so far
    char* out = t->bytes;
    for (uint32_t i = 0; i < vocab_size; i++) {
        unsigned char len = 0;
        if (used + 1 > body) {
            llmc_die("%s: truncated at token %u of %u (no length byte)", path, i, vocab_size);
        }
        freadCheck(&len, 1, 1, f, path);
        used += 1;
        if (len == 0) {
            llmc_die("%s: token %u has length 0", path, i);
        }
        if (used + len > body) {
            llmc_die("%s: truncated: token %u needs %u bytes, only %zu left", path, i, (unsigned)len, body - used);
        }
        freadCheck(out, 1, len, f, path);
        used += len;
        t->token_table[i] = out;
        t->token_lengths[i] = len;
        out[len] = '\0';
        out += len + 1;
    }
    if (used != body) {
        llmc_die("%s: %zu bytes of trailing data after the last of %u tokens", path, body - used, vocab_size);
    }
    fcloseCheck(f, path);
    t->vocab_size = vocab_size;
    t->eot_token = (int)eot;
    t->bos_token = header[1] == 3 ? (int)header[4] : -1;
    t->version = (int)header[1];
    t->init_ok = 1;
}

// the token a sample starts from: BOS for Llama 3, <|endoftext|> for GPT-2
static inline int tokenizer_start_token(const Tokenizer* t) {
    return t->bos_token >= 0 ? t->bos_token : t->eot_token;
}

// the piece of token_id, or NULL when it is out of range or the tokenizer did not load
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t token_id) {
    if (!t->init_ok || token_id >= t->vocab_size) {
        return NULL;
    }
    return t->token_table[token_id];
}

// the byte length of token_id's piece (0 when out of range)
static inline size_t tokenizer_decode_length(const Tokenizer* t, uint32_t token_id) {
    if (!t->init_ok || token_id >= t->vocab_size) {
        return 0;
    }
    return t->token_lengths[token_id];
}

// prints a piece unless it is a single unprintable byte (control characters, raw continuation bytes)
static inline void safe_fprintf(FILE* out, const char* piece) {
    if (piece == NULL || piece[0] == '\0') {
        return;
    }
    if (piece[1] == '\0') {
        unsigned char c = (unsigned char)piece[0];
        if (!(isprint(c) || isspace(c))) {
            return;
        }
    }
    fputs(piece, out);
}

static inline void safe_printf(const char* piece) {
    safe_fprintf(stdout, piece);
}

// releases the pieces and leaves the struct zeroed (init_ok = 0), as a missing file does (a second free is harmless)
static inline void tokenizer_free(Tokenizer* t) {
    void* buffers[] = {t->token_table, t->bytes, t->token_lengths};
    FREE_ALL(buffers);
    memset(t, 0, sizeof(*t));
}

// The vocab size of the tokenizer file at path, for a family whose -e desc (dN) takes V from it: family names it in
// the error lines ("Llama 3"), reference is the script that writes the file. One error line when the file is missing
// or is a GPT-2 tokenizer's (version 1 or 2: no BOS or delimiter id of its own).
static inline int tokenizer_vocab_size_for(const char* path, const char* family, const char* reference, const char* desc) {
    if (!file_exists(path)) {
        llmc_die("%s: no such file (-e %s takes the vocab size from the %s tokenizer file; python %s writes it)", path,
                 desc, family, reference);
    }
    Tokenizer tok;
    tokenizer_init(&tok, path);
    if (tok.bos_token < 0) {
        llmc_die("%s: a GPT-2 tokenizer file (version %d), not a %s one (version 3)", path, tok.version, family);
    }
    int V = (int)tok.vocab_size;
    tokenizer_free(&tok);
    return V;
}

#endif // LLMC_TOKENIZER_H
