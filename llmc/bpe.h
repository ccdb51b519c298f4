/*
llmc/bpe.h: byte-level BPE *encoding* in C (text -> token ids) for GPT-2, exactly like tiktoken's
"gpt2" encoding, for Llama 3, exactly like the `tokenizers` library on Llama 3's tokenizer.json, and for
Qwen (Qwen2 onwards: Qwen3's tokenizer), like `tokenizers` on its tokenizer.json for text in Unicode NFC.
The decoder side is just the token bytes (bpe_token_bytes, or llmc/tokenizer.h).
The two differ only in where the ranks come from and in the pre-tokenisation pattern (BPE.pattern).

How GPT-2 encodes text:
1. Pre-tokenisation splits the text into pieces with this regex (tiktoken's pattern):
       '(?:[sdmt]|ll|ve|re) | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ | \s+$ | \s+(?!\S) | \s
   i.e. at each position, the first alternative that matches wins:
     - an apostrophe contraction ('s 't 'd 'm 'll 've 're; lowercase only),
     - an optional single ' ' followed by a maximal run of letters, or of numbers, or of
       "other" characters (neither whitespace, letter nor number),
     - a whitespace run reaching the end of the text,
     - a whitespace run minus its last character when a non-space follows (so the last
       ' ' can join the next word), or a single whitespace character.
   This is implemented by hand below (bpe_next_piece): UTF-8 is decoded on the fly and
   characters are classified with llmc/unicode_tables.h (generated from Python's
   unicodedata by dev/write_bpe.py; \s is Unicode White_Space).
   Llama 3 splits with its tokenizer.json's pattern instead (bpe_next_piece_llama3):
       (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]*
       | \s*[\r\n]+ | \s+(?!\S) | \s+
   i.e. a contraction in any letter case (Oniguruma's case folding, which `tokenizers` uses, also
   matches 's as U+017F); a run of letters, with one optional leading character that is neither
   \r, \n, letter nor number; one to three numbers; an optional ' ' and a run of "other"
   characters with the \r and \n right after it; a whitespace run up to its last \r or \n;
   then GPT-2's two whitespace rules. Its classes are the same tables (checked against
   `tokenizers`' regex engine over every code point: \s is equal, \p{L} and \p{N} are equal on
   every code point the tables' Unicode version assigns; later ones are OTHER here).
   Qwen's pattern (BPE_PATTERN_QWEN, bpe_next_piece_llama3 with one digit a group) is Llama 3's with \p{N} in
   place of \p{N}{1,3}: every number is a piece of its own. Its tokenizer.json also normalises the text to
   Unicode NFC first, which this encoder does not: text already in NFC (what keyboards and most files hold)
   gives the same ids; a decomposed sequence (e + U+0301) is encoded as it is, not as the composed character.
2. Each piece that is itself a token is emitted as is. Otherwise the piece starts as one
   part per byte, and repeatedly the adjacent pair of parts whose concatenated bytes form
   the token of lowest rank (ties: leftmost) is merged, until no pair is a token. The ids
   are the ranks of the final parts. Llama 3's ranks are its token ids (its vocabulary comes from
   tiktoken's ranks; its tokenizer.json sets ignore_merges, so a piece that is a token is kept whole). Short pieces use a scan over an array (like tiktoken);
   long pieces use a linked list and a min-heap, so a megabyte without spaces stays fast.
   Ranks are looked up in an open-addressing hash map keyed by the token bytes.

Invalid UTF-8 (tiktoken and `tokenizers` only take valid text, so this is llmc's own rule): every byte that
does not start a valid, shortest-form UTF-8 sequence (no surrogates, <= U+10FFFF) is one
"other" character of its own. Pre-tokenisation goes on around it and byte-level BPE encodes
it like any byte, so decoding the ids always gives back the exact input bytes.

Special tokens: bpe_encode(..., allow_special = 0) encodes "<|endoftext|>" as ordinary text
(tiktoken's encode_ordinary); with allow_special = 1 each occurrence becomes eot_token and
the text between occurrences is encoded independently (tiktoken's encode(allowed_special="all")).

File format of gpt2_bpe.bin, written by `python dev/write_bpe.py` (little-endian), version 1:
    header: 256 x int32
        [0] = 20240530 (magic), [1] = 1 (version),
        [2] = n_tokens: number of mergeable tokens, ranks 0 .. n_tokens-1 (50256 for GPT-2)
        [3] = eot_token: id of <|endoftext|> (50256), >= n_tokens
        [4] = total_bytes: sum of all token lengths
        [5] = max_len: longest token in bytes (1..255)
    body: for each rank r = 0 .. n_tokens-1: uint8 length (1..max_len), then the raw bytes.
    Every single byte 0..255 is a token and no two tokens are equal.

Llama 3 (bpe_init_llama3) and Qwen (bpe_init_tokenizer_v3 with BPE_PATTERN_QWEN): the ranks come from the
tokenizer file version 3 (llama3_tokenizer.bin, qwen3_tokenizer.bin; llmc/tokenizer.h), which holds every
token's bytes in id order. Its ordinary tokens are the ids below the first special one, min(BOS, EOT) (Qwen3's
file: <|endoftext|> is both), and each one's rank is its id; the ids from there on are special tokens (their
text), which bpe_encode never produces from text.
*/
#ifndef LLMC_BPE_H
#define LLMC_BPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"
#include "tokenizer.h"
#include "unicode_tables.h"

#define BPE_MAGIC 20240530
#define BPE_VERSION 1
#define BPE_EOT_TEXT "<|endoftext|>"
#define BPE_NO_RANK INT32_MAX


typedef struct {
    int pattern;             // pre-tokenisation: BPE_PATTERN_GPT2, _LLAMA3 or _QWEN (llmc/tokenizer.h)
    int n_tokens;            // mergeable tokens, ranks 0..n_tokens-1
    int eot_token;           // id of the end-of-text token
    const char* eot_text;    // its text: "<|endoftext|>" (GPT-2), "<|end_of_text|>" (Llama 3)
    int max_token_len;       // longest token in bytes
    unsigned char* blob;     // token bytes concatenated in rank order
    uint32_t* offsets;       // (n_tokens+1,) token r is blob[offsets[r] .. offsets[r+1])
    int32_t* slots;          // hash map: token bytes -> rank, -1 = empty slot
    uint32_t slot_mask;      // number of slots - 1 (a power of two)
    int byte_rank[256];      // rank of each single byte
} BPE;

// ----------------------------------------------------------------------------
// the rank hash map

static inline uint32_t bpe_hash(const unsigned char* p, size_t n) {
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (size_t i = 0; i < n; i++) { h = (h ^ p[i]) * 16777619u; }
    return h ^ (h >> 15);
}

// rank of the token with bytes p[0..n), or BPE_NO_RANK
static inline int32_t bpe_rank(const BPE* b, const unsigned char* p, size_t n) {
    if (n == 1) { return b->byte_rank[p[0]]; }
    if (n > (size_t)b->max_token_len) { return BPE_NO_RANK; }
    uint32_t i = bpe_hash(p, n) & b->slot_mask;
    for (;;) {
        int32_t r = b->slots[i];
        if (r < 0) { return BPE_NO_RANK; }
        uint32_t off = b->offsets[r];
        if (b->offsets[r + 1] - off == n && memcmp(b->blob + off, p, n) == 0) { return r; }
        i = (i + 1) & b->slot_mask;
    }
}

// builds the rank lookup of the n_tokens tokens in b->blob / b->offsets: every single byte must be a
// token and no two tokens equal (path names the file in the error line)
static inline void bpe_index(BPE* b, const char* path) {
    int n = b->n_tokens;
    // hash map at most half full
    uint32_t nslots = 1;
    while (nslots < 2u * (uint32_t)n) { nslots <<= 1; }
    b->slot_mask = nslots - 1;
    b->slots = (int32_t*)mallocCheck((size_t)nslots * sizeof(int32_t));
    for (uint32_t i = 0; i < nslots; i++) { b->slots[i] = -1; }
    for (int i = 0; i < 256; i++) { b->byte_rank[i] = BPE_NO_RANK; }
    for (int r = 0; r < n; r++) {
        const unsigned char* p = b->blob + b->offsets[r];
        uint32_t len = b->offsets[r + 1] - b->offsets[r];
        if (len == 1) {
            if (b->byte_rank[p[0]] != BPE_NO_RANK) { llmc_die("%s: tokens %d and %d are equal", path, b->byte_rank[p[0]], r); }
            b->byte_rank[p[0]] = r;
            continue;
        }
        uint32_t i = bpe_hash(p, len) & b->slot_mask;
        while (b->slots[i] >= 0) {
            int32_t o = b->slots[i];
            if (b->offsets[o + 1] - b->offsets[o] == len && memcmp(b->blob + b->offsets[o], p, len) == 0) {
                llmc_die("%s: tokens %d and %d are equal", path, o, r);
            }
            i = (i + 1) & b->slot_mask;
        }
        b->slots[i] = r;
    }
    for (int i = 0; i < 256; i++) {
        if (b->byte_rank[i] == BPE_NO_RANK) { llmc_die("%s: byte 0x%02x is not a token (every single byte must be)", path, i); }
    }
}

// ----------------------------------------------------------------------------
// loading gpt2_bpe.bin

static inline void bpe_init(BPE* b, const char* path) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        if (!file_exists(path)) {
            llmc_die("%s: BPE ranks file not found (`python dev/write_bpe.py` creates it)", path);
        }
        f = fopenCheck(path, "rb");
    }
    size_t file_size = file_size_check(f, path);
    int header[256];
    read_header_check(f, path, header, BPE_MAGIC, BPE_VERSION, BPE_VERSION, "BPE ranks");
    int n = header[2], eot = header[3], total = header[4], max_len = header[5];
    if (n < 256 || n > (1 << 24)) { llmc_die("%s: header field n_tokens = %d out of range (256..16777216)", path, n); }
    if (eot < n) { llmc_die("%s: header field eot_token = %d must be >= n_tokens = %d", path, eot, n); }
    if (max_len < 1 || max_len > 255) { llmc_die("%s: header field max_len = %d out of range (1..255)", path, max_len); }
    if (total < n || (long long)total > (long long)n * max_len) { llmc_die("%s: header field total_bytes = %d inconsistent with n_tokens = %d, max_len = %d", path, total, n, max_len); }
    size_t expected = 1024 + (size_t)n + (size_t)total;
    if (file_size != expected) {
        llmc_die("%s: file size %zu bytes does not match the header (expected %zu = 1024 + n_tokens + total_bytes)", path, file_size, expected);
    }
    unsigned char* body = (unsigned char*)mallocCheck((size_t)n + (size_t)total);
    freadCheck(body, 1, (size_t)n + (size_t)total, f, path);
    fcloseCheck(f, path);

    b->n_tokens = n;
    b->eot_token = eot;
    b->max_token_len = max_len;
    b->blob = (unsigned char*)mallocCheck((size_t)total);
    b->offsets = (uint32_t*)mallocCheck(((size_t)n + 1) * sizeof(uint32_t));
    size_t at = 0, out = 0;
    for (int r = 0; r < n; r++) {
        int len = body[at++];
        if (len < 1 || len > max_len) { llmc_die("%s: token %d has length %d (expected 1..%d)", path, r, len, max_len); }
        if (out + (size_t)len > (size_t)total) { llmc_die("%s: token %d runs past total_bytes = %d", path, r, total); }
        b->offsets[r] = (uint32_t)out;
        memcpy(b->blob + out, body + at, (size_t)len);
        at += (size_t)len;
        out += (size_t)len;
    }
    b->offsets[n] = (uint32_t)out;
    free(body);
    if (out != (size_t)total) { llmc_die("%s: token lengths sum to %zu, header field total_bytes = %d", path, out, total); }
    b->pattern = BPE_PATTERN_GPT2;
    b->eot_text = BPE_EOT_TEXT;
    bpe_index(b, path);
}

// the ranks of a tokenizer file t (read from path) whose first n tokens are the mergeable ones, each one's rank its
// id (Llama 3's; also GPT-2's vocabulary, below <|endoftext|>), pre-tokenised with pattern
static inline void bpe_init_from_tokenizer(BPE* b, const Tokenizer* t, const char* path, int n, int pattern) {
    size_t total = 0;
    int max_len = 0;
    for (int r = 0; r < n; r++) {
        total += t->token_lengths[r];
        if (t->token_lengths[r] > max_len) { max_len = t->token_lengths[r]; }
    }
    b->pattern = pattern;
    b->n_tokens = n;
    b->eot_token = t->eot_token;
    b->eot_text = t->token_table[t->eot_token];
    b->max_token_len = max_len;
    b->blob = (unsigned char*)mallocCheck(total);
    b->offsets = (uint32_t*)mallocCheck(((size_t)n + 1) * sizeof(uint32_t));
    size_t out = 0;
    for (int r = 0; r < n; r++) {
        b->offsets[r] = (uint32_t)out;
        memcpy(b->blob + out, t->token_table[r], t->token_lengths[r]);
        out += t->token_lengths[r];
    }
    b->offsets[n] = (uint32_t)out;
    bpe_index(b, path);
}

// the ranks of a tokenizer file version 3 t (read from path: Llama 3's layout), pre-tokenised with pattern, as
// described at the top
static inline void bpe_init_tokenizer_v3(BPE* b, const Tokenizer* t, const char* path, int pattern) {
    int n = t->bos_token < t->eot_token ? t->bos_token : t->eot_token;
    if (t->version != 3 || t->bos_token < 0) { llmc_die("%s: not a Llama 3 tokenizer file (version %d, expected 3)", path, t->version); }
    if (n < 256) {
        llmc_die("%s: the first special token is id %d: byte-level BPE needs the 256 byte tokens below it", path, n);
    }
    bpe_init_from_tokenizer(b, t, path, n, pattern);
}

// Llama 3's ranks from its tokenizer file t (read from path)
static inline void bpe_init_llama3(BPE* b, const Tokenizer* t, const char* path) {
    bpe_init_tokenizer_v3(b, t, path, BPE_PATTERN_LLAMA3);
}

static inline void bpe_free(BPE* b) {
    free(b->blob);
    free(b->offsets);
    free(b->slots);
    b->blob = NULL; b->offsets = NULL; b->slots = NULL;
}

// bytes of token id (eot_token gives its text, eot_text); NULL if id is not a token
static inline const unsigned char* bpe_token_bytes(const BPE* b, int id, size_t* len) {
    if (id == b->eot_token) {
        *len = strlen(b->eot_text);
        return (const unsigned char*)b->eot_text;
    }
    if (id < 0 || id >= b->n_tokens) { *len = 0; return NULL; }
    *len = b->offsets[id + 1] - b->offsets[id];
    return b->blob + b->offsets[id];
}

// ----------------------------------------------------------------------------
// pre-tokenisation

// decodes the character at s[i] (i < n); returns its byte length and sets *cls.
// a byte that does not start a valid shortest-form sequence is one OTHER character.
static inline size_t bpe_char_at(const unsigned char* s, size_t n, size_t i, int* cls) {
    unsigned c = s[i];
    if (c < 0x80) { *cls = unicode_ascii_class[c]; return 1; }
    uint32_t cp;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else { *cls = UCLASS_OTHER; return 1; }
    if (i + len > n) { *cls = UCLASS_OTHER; return 1; }
    for (size_t k = 1; k < len; k++) {
        unsigned cc = s[i + k];
        if ((cc & 0xC0) != 0x80) { *cls = UCLASS_OTHER; return 1; }
        cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
        *cls = UCLASS_OTHER;
        return 1;
    }
    *cls = unicode_class(cp);
    return len;
}

// end of the maximal run of characters of class cls starting at i
static inline size_t bpe_run_end(const unsigned char* s, size_t n, size_t i, int cls) {
    while (i < n) {
        int c;
        size_t len = bpe_char_at(s, n, i, &c);
        if (c != cls) { break; }
        i += len;
    }
    return i;
}

// end of the piece starting at i (i < n), following the regex in the comment at the top
static inline size_t bpe_next_piece(const unsigned char* s, size_t n, size_t i) {
    // '(?:[sdmt]|ll|ve|re)
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 'd' || a == 'm' || a == 't') { return i + 2; }
        if (i + 2 < n) {
            unsigned char b2 = s[i + 2];
            if ((a == 'l' && b2 == 'l') || (a == 'v' && b2 == 'e') || (a == 'r' && b2 == 'e')) { return i + 3; }
        }
    }
    int c0;
    size_t len0 = bpe_char_at(s, n, i, &c0);
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' with the optional leading space
    if (s[i] == ' ' && i + 1 < n) {
        int c1;
        size_t len1 = bpe_char_at(s, n, i + 1, &c1);
        if (c1 != UCLASS_SPACE) { return bpe_run_end(s, n, i + 1 + len1, c1); }
    }
    if (c0 != UCLASS_SPACE) { return bpe_run_end(s, n, i + len0, c0); }
    // whitespace: '\s+$', then '\s+(?!\S)' (the run minus its last character), then '\s'
    size_t last = i, j = i;
    while (j < n) {
        int c;
        size_t len = bpe_char_at(s, n, j, &c);
        if (c != UCLASS_SPACE) { break; }
        last = j;
        j += len;
    }
    if (j == n) { return n; }
    return last > i ? last : j;
}

static inline int bpe_is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

static inline unsigned char bpe_ascii_lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c; }

// Llama 3: end of the contraction (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i when there is none
static inline size_t bpe_llama3_contraction(const unsigned char* s, size_t n, size_t i) {
    if (s[i] != '\'' || i + 1 >= n) { return i; }
    unsigned char a = bpe_ascii_lower(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') { return i + 2; }
    if (i + 2 >= n) { return i; }
    if (s[i + 1] == 0xC5 && s[i + 2] == 0xBF) { return i + 3; }   // U+017F, which case-folds to s
    unsigned char b2 = bpe_ascii_lower(s[i + 2]);
    if ((a == 'r' && b2 == 'e') || (a == 'v' && b2 == 'e') || (a == 'l' && b2 == 'l')) { return i + 3; }
    return i;
}

// Llama 3 (max_digits 3) and Qwen (max_digits 1): end of the piece starting at i (i < n), following the pattern in
// the comment at the top
static inline size_t bpe_next_piece_llama3(const unsigned char* s, size_t n, size_t i, int max_digits) {
    size_t j = bpe_llama3_contraction(s, n, i);
    if (j > i) { return j; }
    int c0;
    size_t len0 = bpe_char_at(s, n, i, &c0);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0 == UCLASS_LETTER) { return bpe_run_end(s, n, i + len0, UCLASS_LETTER); }
    if (c0 != UCLASS_NUMBER && !bpe_is_newline(s[i]) && i + len0 < n) {
        int c1;
        size_t len1 = bpe_char_at(s, n, i + len0, &c1);
        if (c1 == UCLASS_LETTER) { return bpe_run_end(s, n, i + len0 + len1, UCLASS_LETTER); }
    }
    // \p{N}{1,max_digits}
    if (c0 == UCLASS_NUMBER) {
        j = i + len0;
        for (int k = 1; k < max_digits && j < n; k++) {
            int c;
            size_t len = bpe_char_at(s, n, j, &c);
            if (c != UCLASS_NUMBER) { break; }
            j += len;
        }
        return j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    j = i;
    if (s[i] == ' ' && i + 1 < n) {
        int c1;
        bpe_char_at(s, n, i + 1, &c1);
        if (c1 == UCLASS_OTHER) { j = i + 1; }
    }
    if (j > i || c0 == UCLASS_OTHER) {
        j = bpe_run_end(s, n, j, UCLASS_OTHER);
        while (j < n && bpe_is_newline(s[j])) { j++; }
        return j;
    }
    // whitespace: '\s*[\r\n]+' (the run up to its last \r or \n), then '\s+(?!\S)', then '\s+'
    size_t end = i, last = i, after_newline = i;
    while (end < n) {
        int c;
        size_t len = bpe_char_at(s, n, end, &c);
        if (c != UCLASS_SPACE) { break; }
        if (bpe_is_newline(s[end])) { after_newline = end + 1; }
        last = end;
        end += len;
    }
    if (after_newline > i) { return after_newline; }
    if (end == n) { return n; }
    return last > i ? last : end;
}

// ----------------------------------------------------------------------------
// byte pair merging of one piece

// merges a piece of n >= 2 bytes given as part start offsets; writes ranks to out, returns count.
// small pieces: arrays and a linear scan for the lowest rank (leftmost on ties)
static inline size_t bpe_merge_small(const BPE* b, const unsigned char* p, size_t n, int* out) {
    uint32_t start[130];      // part boundaries, start[m-1] == n
    int32_t rank[130];        // rank[k]: merging parts k and k+1
    size_t m = n + 1;
    for (size_t k = 0; k < m; k++) { start[k] = (uint32_t)k; }
    for (size_t k = 0; k + 2 < m; k++) { rank[k] = bpe_rank(b, p + k, 2); }
    rank[m - 2] = BPE_NO_RANK;
    while (m > 2) {
        int32_t best = BPE_NO_RANK;
        size_t bi = 0;
        for (size_t k = 0; k + 2 < m; k++) {
            if (rank[k] < best) { best = rank[k]; bi = k; }
        }
        if (best == BPE_NO_RANK) { break; }
        // parts bi and bi+1 become one part [start[bi], start[bi+2])
        rank[bi] = (bi + 3 < m) ? bpe_rank(b, p + start[bi], start[bi + 3] - start[bi]) : BPE_NO_RANK;
        if (bi > 0) { rank[bi - 1] = bpe_rank(b, p + start[bi - 1], start[bi + 2] - start[bi - 1]); }
        memmove(start + bi + 1, start + bi + 2, (m - bi - 2) * sizeof(uint32_t));
        memmove(rank + bi + 1, rank + bi + 2, (m - bi - 3) * sizeof(int32_t));
        m--;
        rank[m - 2] = BPE_NO_RANK;
    }
    for (size_t k = 0; k + 1 < m; k++) {
        out[k] = bpe_rank(b, p + start[k], start[k + 1] - start[k]);
    }
    return m - 1;
}

typedef struct { int32_t rank; uint32_t pos; uint32_t ver; } BPEHeapItem;

static inline int bpe_heap_less(const BPEHeapItem* a, const BPEHeapItem* c) {
    return a->rank < c->rank || (a->rank == c->rank && a->pos < c->pos);
}

static inline void bpe_heap_push(BPEHeapItem* h, size_t* size, BPEHeapItem x) {
    size_t i = (*size)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bpe_heap_less(&x, &h[parent])) { break; }
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

static inline BPEHeapItem bpe_heap_pop(BPEHeapItem* h, size_t* size) {
    BPEHeapItem top = h[0];
    BPEHeapItem x = h[--(*size)];
    size_t i = 0, sz = *size;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= sz) { break; }
        if (c + 1 < sz && bpe_heap_less(&h[c + 1], &h[c])) { c++; }
        if (!bpe_heap_less(&h[c], &x)) { break; }
        h[i] = h[c];
        i = c;
    }
    if (sz > 0) { h[i] = x; }
    return top;
}

// long pieces: parts are a linked list indexed by their first byte, candidate pairs sit in a
// min-heap ordered by (rank, position); entries made stale by a merge are skipped via versions
static inline size_t bpe_merge_large(const BPE* b, const unsigned char* p, size_t n, int* out) {
    uint32_t* next = (uint32_t*)mallocCheck((n + 1) * sizeof(uint32_t));   // next part start (n = end)
    uint32_t* prev = (uint32_t*)mallocCheck((n + 1) * sizeof(uint32_t));
    uint32_t* ver = (uint32_t*)mallocCheck((n + 1) * sizeof(uint32_t));    // bumped when the part changes
    uint8_t* alive = (uint8_t*)mallocCheck(n + 1);
    BPEHeapItem* heap = (BPEHeapItem*)mallocCheck(3 * (n + 1) * sizeof(BPEHeapItem));
    size_t hsize = 0;
    for (size_t k = 0; k <= n; k++) {
        next[k] = (uint32_t)(k + 1);
        prev[k] = (uint32_t)(k - 1);
        ver[k] = 0;
        alive[k] = 1;
    }
    for (size_t k = 0; k + 1 < n; k++) {
        int32_t r = bpe_rank(b, p + k, 2);
        if (r != BPE_NO_RANK) { BPEHeapItem it = { r, (uint32_t)k, 0 }; bpe_heap_push(heap, &hsize, it); }
    }
    while (hsize > 0) {
        BPEHeapItem it = bpe_heap_pop(heap, &hsize);
        uint32_t a = it.pos;
        if (!alive[a] || ver[a] != it.ver) { continue; }
        uint32_t c = next[a];            // right part, merged into a
        if (c >= n) { continue; }
        uint32_t d = next[c];
        alive[c] = 0;
        next[a] = d;
        if (d <= n) { prev[d] = a; }
        ver[a]++;
        // new candidate pairs: (a, d) and (prev[a], a); each recomputation bumps the left part's version
        if (d < n) {
            int32_t r = bpe_rank(b, p + a, next[d] - a);
            if (r != BPE_NO_RANK) { BPEHeapItem x = { r, a, ver[a] }; bpe_heap_push(heap, &hsize, x); }
        }
        if (a > 0) {
            uint32_t z = prev[a];
            ver[z]++;
            int32_t r = bpe_rank(b, p + z, next[a] - z);
            if (r != BPE_NO_RANK) { BPEHeapItem x = { r, z, ver[z] }; bpe_heap_push(heap, &hsize, x); }
        }
    }
    size_t cnt = 0;
    for (uint32_t k = 0; k < n; k = next[k]) {
        out[cnt++] = bpe_rank(b, p + k, next[k] - k);
    }
    free(next); free(prev); free(ver); free(alive); free(heap);
    return cnt;
}

// encodes one piece; returns the number of ids written to out
static inline size_t bpe_encode_piece(const BPE* b, const unsigned char* p, size_t n, int* out) {
    int32_t whole = bpe_rank(b, p, n);
    if (whole != BPE_NO_RANK) { out[0] = whole; return 1; }
    if (n <= 128) { return bpe_merge_small(b, p, n, out); }
    return bpe_merge_large(b, p, n, out);
}

// ----------------------------------------------------------------------------
// public encoder

// encodes text[0..n) as ordinary text (no special tokens); out needs room for n ids
static inline size_t bpe_encode_ordinary(const BPE* b, const unsigned char* text, size_t n, int* out) {
    size_t cnt = 0, i = 0;
    while (i < n) {
        size_t j = b->pattern == BPE_PATTERN_GPT2 ? bpe_next_piece(text, n, i)
                 : bpe_next_piece_llama3(text, n, i, b->pattern == BPE_PATTERN_QWEN ? 1 : 3);
        cnt += bpe_encode_piece(b, text + i, j - i, out + cnt);
        i = j;
    }
    return cnt;
}

// encodes text[0..n); allow_special = 1 turns each occurrence of eot_text into eot_token.
// out needs room for n ids (a text of n bytes never needs more). Returns the number of ids.
static inline size_t bpe_encode(const BPE* b, const unsigned char* text, size_t n, int allow_special, int* out) {
    if (!allow_special) { return bpe_encode_ordinary(b, text, n, out); }
    const size_t elen = strlen(b->eot_text);
    size_t cnt = 0, seg = 0;
    for (size_t i = 0; i + elen <= n; ) {
        if (text[i] == (unsigned char)b->eot_text[0] && memcmp(text + i, b->eot_text, elen) == 0) {
            cnt += bpe_encode_ordinary(b, text + seg, i - seg, out + cnt);
            out[cnt++] = b->eot_token;
            i += elen;
            seg = i;
        } else {
            i++;
        }
    }
    cnt += bpe_encode_ordinary(b, text + seg, n - seg, out + cnt);
    return cnt;
}

#endif // LLMC_BPE_H
