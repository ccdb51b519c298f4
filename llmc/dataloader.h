/*
llmc/dataloader.h: token shards -> (B, T) batches of inputs and targets, and the HellaSwag eval loader.

Token shard format (llm.c-compatible): a header of 256 int32, then the tokens.
    GPT-2:   header[0] = 20240520, header[1] = 1, header[2] = ntok, then ntok uint16 tokens
    llama-3: header[0] = 20240801, header[1] = 7, header[2] = ntok, then ntok uint32 tokens
A loader reads ONE of the two (ShardFormat, given to dataloader_init): a trainer the format of its
model family (llmc/model_family.h's shard_format). A shard of the other format is refused, as
every GPT-2 id is also a valid Llama 3 id and the run would otherwise train on the wrong tokenization:
    error: x.bin: a gpt-2 token shard (magic 20240520, uint16 tokens), but this model reads llama-3
    shards (magic 20240801, uint32 tokens); python dev/data/tinyshakespeare.py --model_desc llama-3
    --tokenizer DIR writes them                                          (one line, wrapped here)
shard_data_command names the dev/data script and flags that write a format (from the shard's name).
Every shard matched by the glob, train or val, is validated at init, not when the loader reaches
it: format, magic, version, header token count against the real file size, at least one batch of tokens,
and every token id below vocab_size (below 2^31 when vocab_size is 0, so ids fit an int). The ids
are read in 1 MiB chunks and checked with a max-reduction the compiler vectorises, so a bad id deep
in the last shard stops the run before the first step. Any problem stops the program with one line
"error: <shard>: <reason>", e.g. (the wording of dev/data/data_common.py's reader)
    error: train.bin: token id 60000 at position 15000 >= vocab size 50257
(position counts tokens from the start of the shard's token array). Each batch is checked again as
it is read, which only fires if a shard is rewritten while training runs.

Chat shards (a loss mask; pyllmc/token_shards.py writes them, dev/data/chat.py from conversations):
    header[0] = the format's magic, header[1] = its chat version (GPT-2: 2, llama-3: 8), header[2] = ntok,
    header[3] = T, then ntok tokens as above, then ntok uint8 mask bytes: 1 where the token is a supervised
    target (an assistant's reply and its end token), else 0. Conversations of exactly T tokens each, so
    ntok is a multiple of T and the first token of every conversation has mask 0.
Init validates them like plain shards (size = header + ntok * (token bytes + 1), ids, at least one
batch) plus the mask: every byte 0 or 1, ntok % T == 0, mask 0 at every conversation's start; the
shard's T must equal the loader's (the trainer's -t), and one pattern holds chat shards or plain ones,
not both. Each is one error line. A loader of chat shards has masked = 1.

Reading rule. Let n = num_processes, r = process_rank. A "sample" is n*B*T tokens: sample i of
a shard starts at token i*n*B*T, and rank r reads the B*T+1 tokens starting at i*n*B*T + r*B*T
(inputs = the first B*T, targets = the same shifted by one). A shard of ntok tokens holds
(ntok - 1) / (n*B*T) samples; after its last one the loader moves on to the next shard, wrapping
around after the last. So 2 ranks with B=2 read exactly the tokens 1 rank with B=4 reads.
Chat shards: rank r reads the B*T tokens from i*n*B*T + r*B*T (each row one conversation); inputs = those
tokens, targets[j] = tokens[j+1] where mask[j+1] == 1, else -1 ("not supervised", PyTorch's
ignore_index), and -1 at every row's last position (its next token is the next conversation's first).
A chat shard of ntok tokens holds ntok / (n*B*T) samples.

Position. current_shard_idx counts the shards opened since the start, ACROSS epochs: the epoch is
current_shard_idx / num_shards and the place in the epoch's shard order is current_shard_idx %
num_shards. current_sample_idx is the place in the current shard's sample order of the NEXT batch.
Saving both and calling dataloader_resume(shard_idx, sample_idx) continues exactly, shuffled or not.

Shuffling (should_shuffle = 1): each epoch visits the shards in a permuted order, and each shard's
samples in a permuted order. The permutations are Fisher-Yates shuffles driven by an mt19937
(llmc/rand.h) seeded from (epoch) for the shard order and (epoch, shard) for the sample order,
so they are identical on every rank, deterministic, and need no saved RNG state to resume.
No memory is allocated per batch.
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rand.h"
#include "utils.h"

#define DATALOADER_HEADER_INTS 256
#define DATALOADER_MAGIC_GPT2 20240520
#define DATALOADER_VERSION_GPT2 1
#define DATALOADER_CHAT_VERSION_GPT2 2
#define DATALOADER_MAGIC_LLAMA3 20240801
#define DATALOADER_VERSION_LLAMA3 7
#define DATALOADER_CHAT_VERSION_LLAMA3 8
#define DATALOADER_SHUFFLE_SEED 42u

// ----------------------------------------------------------------------------
// shard formats and headers

// the token shard formats, indices into SHARD_FORMATS below; every loader reads exactly one of them (its model
// family's, llmc/model_family.h)
typedef enum { SHARD_FORMAT_GPT2, SHARD_FORMAT_LLAMA3, SHARD_FORMAT_COUNT } ShardFormat;

typedef struct {
    const char* name;        // the dev/data scripts' --model_desc: "gpt-2" or "llama-3"
    int magic;               // header[0]
    int version;             // header[1]
    int chat_version;        // header[1] of its chat shards (a loss mask after the tokens)
    int token_bytes;         // 2 or 4
    const char* token_type;  // "uint16" or "uint32"
    const char* data_flags;  // what the dev/data scripts need to write it ("": their default)
} ShardFormatSpec;

static const ShardFormatSpec SHARD_FORMATS[SHARD_FORMAT_COUNT] = {
    {"gpt-2", DATALOADER_MAGIC_GPT2, DATALOADER_VERSION_GPT2, DATALOADER_CHAT_VERSION_GPT2, 2, "uint16", ""},
    {"llama-3", DATALOADER_MAGIC_LLAMA3, DATALOADER_VERSION_LLAMA3, DATALOADER_CHAT_VERSION_LLAMA3, 4, "uint32",
     "--model_desc llama-3 --tokenizer DIR"},
};

static inline const ShardFormatSpec* shard_format_spec(ShardFormat format) { return &SHARD_FORMATS[format]; }

// Into buf: the command that writes shards of `format` for data named like `pattern`, e.g.
// "python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer DIR", or for a name no
// script writes "one of the dev/data/*.py scripts with --model_desc llama-3 --tokenizer DIR". Returns buf.
static inline const char* shard_data_command(char* buf, size_t size, const char* pattern, ShardFormat format) {
    static const char* const datasets[3] = {"tinyshakespeare", "tinystories", "fineweb"};
    const char* flags = shard_format_spec(format)->data_flags;
    for (int i = 0; i < 3; i++) {
        if (strstr(pattern, datasets[i]) != NULL) {
            snprintf(buf, size, "python dev/data/%s.py%s%s", datasets[i], flags[0] ? " " : "", flags);
            return buf;
        }
    }
    snprintf(buf, size, "one of the dev/data/*.py scripts%s%s", flags[0] ? " with " : "", flags);
    return buf;
}

// dies with one line if header[0..1] is not a shard of `format` (a shard of another format: names both and
// the command that writes the right one); returns 1 for a chat shard of it, 0 for a plain one
static inline int shard_check_format(const char* path, const int* header, ShardFormat format) {
    const ShardFormatSpec* want = shard_format_spec(format);
    for (int k = 0; k < SHARD_FORMAT_COUNT; k++) {
        const ShardFormatSpec* other = &SHARD_FORMATS[k];
        if (k == (int)format || header[0] != other->magic) { continue; }
        char command[256];
        llmc_die("%s: a %s token shard (magic %d, %s tokens), but this model reads %s shards (magic %d, %s tokens); "
                 "%s writes them", path, other->name, other->magic, other->token_type, want->name, want->magic,
                 want->token_type, shard_data_command(command, sizeof(command), path, format));
    }
    if (header[0] != want->magic) {
        llmc_die("%s: not a token shard (magic %d, expected %d or %d)", path, header[0],
                 DATALOADER_MAGIC_GPT2, DATALOADER_MAGIC_LLAMA3);
    }
    if (header[1] == want->chat_version) { return 1; }
    if (header[1] != want->version) {
        llmc_die("%s: unsupported token shard version %d (expected %d for magic %d); chat shards are version %d", path,
                 header[1], want->version, want->magic, want->chat_version);
    }
    return 0;
}

// reads and validates a shard's header against `format` and the file's real size; returns the
// number of tokens. Into *chat_T: 0 for a plain shard, a chat shard's conversation length T (header[3]).
// Dies with one line on any problem.
static inline size_t shard_read_header(FILE* f, const char* path, ShardFormat format, size_t* chat_T) {
    size_t file_bytes = file_size_check(f, path);
    int header[DATALOADER_HEADER_INTS];
    if (file_bytes < sizeof(header)) {
        llmc_die("%s: not a token shard (file has %zu bytes, shorter than the 1024-byte header)", path, file_bytes);
    }
    fseekCheck(f, 0, SEEK_SET, path);
    freadCheck(header, sizeof(int), DATALOADER_HEADER_INTS, f, path);
    int chat = shard_check_format(path, header, format);
    if (header[2] <= 0) {
        llmc_die("%s: empty shard (header says %d tokens)", path, header[2]);
    }
    size_t ntok = (size_t)header[2];
    if (chat) {
        if (header[3] < 2) {
            llmc_die("%s: chat shard (version %d) with conversation length T = %d in header[3], expected at least 2", path,
                     header[1], header[3]);
        }
        if (ntok % (size_t)header[3] != 0) {
            llmc_die("%s: chat shard of %zu tokens, not a whole number of T = %d token conversations", path, ntok, header[3]);
        }
    }
    // a chat shard's mask bytes follow its tokens, one per token
    size_t expected = sizeof(header) + ntok * ((size_t)shard_format_spec(format)->token_bytes + (size_t)chat);
    if (file_bytes != expected) {
        llmc_die("%s: size mismatch (header says %zu tokens%s = %zu bytes, file has %zu bytes)%s", path, ntok,
                 chat ? " and as many mask bytes" : "", expected, file_bytes, file_bytes < expected ? ": truncated" : "");
    }
    *chat_T = chat ? (size_t)header[3] : 0;
    return ntok;
}

// ----------------------------------------------------------------------------
// token ids

#define DATALOADER_CHECK_CHUNK_BYTES ((size_t)1 << 20)  // init reads the tokens in pieces of this size

// the exclusive upper bound on token ids: vocab_size, or 2^31 (ids must fit an int) when vocab_size is 0
static inline uint32_t shard_token_bound(int vocab_size) {
    return vocab_size > 0 ? (uint32_t)vocab_size : (uint32_t)INT32_MAX + 1u;
}

// token i of an array of uint16 (token_bytes 2) or uint32 (token_bytes 4) tokens
static inline uint32_t shard_token_at(const void* tokens, int token_bytes, size_t i) {
    return token_bytes == 2 ? (uint32_t)((const uint16_t*)tokens)[i] : ((const uint32_t*)tokens)[i];
}

#if defined(__GNUC__) || defined(__clang__)
#define DATALOADER_NOINLINE __attribute__((noinline, unused))  // unused: no warning where nothing calls it
#else
#define DATALOADER_NOINLINE
#endif

// the largest of t[0..n): a max-reduction the compiler vectorises. Kept out of line, because inlined
// into a caller whose other paths end in llmc_die the compiler may judge the loop cold and leave it
// scalar (4x slower on a 100M-token shard with gcc 12).
static DATALOADER_NOINLINE uint32_t shard_max_u16(const uint16_t* t, size_t n) {
    uint16_t m = 0;
    for (size_t i = 0; i < n; i++) { m = t[i] > m ? t[i] : m; }
    return m;
}

static DATALOADER_NOINLINE uint32_t shard_max_u32(const uint32_t* t, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) { m = t[i] > m ? t[i] : m; }
    return m;
}

// index of the first of tokens[0..n) that is >= bound, or n if there is none. The common case (no
// bad id) is one max-reduction; only an array that holds a bad id is scanned a second time, to find where.
static inline size_t shard_find_bad_token(const void* tokens, size_t n, int token_bytes, uint32_t bound) {
    if (token_bytes == 2 && bound > UINT16_MAX) { return n; }  // every uint16 is in range
    uint32_t max = token_bytes == 2 ? shard_max_u16((const uint16_t*)tokens, n) : shard_max_u32((const uint32_t*)tokens, n);
    if (max < bound) { return n; }
    for (size_t i = 0; i < n; i++) {
        if (shard_token_at(tokens, token_bytes, i) >= bound) { return i; }
    }
    return n;
}

// dies naming the shard and the position if one of tokens[0..n), the shard's tokens from
// position first_pos on, is out of range for vocab_size (see shard_token_bound)
static inline void shard_check_tokens(const char* path, const void* tokens, size_t n, int token_bytes,
                                      int vocab_size, size_t first_pos) {
    size_t bad = shard_find_bad_token(tokens, n, token_bytes, shard_token_bound(vocab_size));
    if (bad < n) {
        uint32_t tok = shard_token_at(tokens, token_bytes, bad);
        if (vocab_size > 0) {
            llmc_die("%s: token id %u at position %zu >= vocab size %d", path, tok, first_pos + bad, vocab_size);
        }
        llmc_die("%s: token id %u at position %zu does not fit an int (>= 2^31)", path, tok, first_pos + bad);
    }
}

#ifdef _OPENMP
#define DATALOADER_OMP(directive) _Pragma(directive)
#else
#define DATALOADER_OMP(directive)
#endif

// Checks all ntok tokens of the shard f, which starts them at file offset `offset` (just after the
// header), in DATALOADER_CHECK_CHUNK_BYTES pieces read with pread: with OpenMP the pieces of a shard of
// 16 MiB or more are shared out over the threads (reading from the page cache is memory-bound, and two
// cores read about twice as fast as one).
// Dies naming the first bad position.
static inline void shard_check_all_tokens(FILE* f, const char* path, size_t ntok, int token_bytes, int vocab_size,
                                          long offset) {
    uint32_t bound = shard_token_bound(vocab_size);
    if (token_bytes == 2 && bound > UINT16_MAX) { return; }  // nothing can be out of range
    size_t chunk_tokens = DATALOADER_CHECK_CHUNK_BYTES / (size_t)token_bytes;
    size_t nchunks = (ntok + chunk_tokens - 1) / chunk_tokens;
    int fd = fileno(f);
    size_t first_bad = ntok;  // the smallest bad position found
    int failed_read = 0;
    // small shards (fewer than 16 pieces, and so the forked death tests) stay on one thread
    DATALOADER_OMP("omp parallel if(nchunks >= 16)")
    {
        void* chunk = malloc(DATALOADER_CHECK_CHUNK_BYTES);
        DATALOADER_OMP("omp for schedule(static)")
        for (size_t k = 0; k < nchunks; k++) {
            size_t pos = k * chunk_tokens;
            size_t n = ntok - pos < chunk_tokens ? ntok - pos : chunk_tokens;
            size_t bytes = n * (size_t)token_bytes;
            if (chunk == NULL || pread(fd, chunk, bytes, (off_t)offset + (off_t)(pos * (size_t)token_bytes)) != (ssize_t)bytes) {
                DATALOADER_OMP("omp atomic write")
                failed_read = 1;
                continue;
            }
            size_t bad = shard_find_bad_token(chunk, n, token_bytes, bound);
            if (bad < n) {
                DATALOADER_OMP("omp critical(llmc_shard_first_bad)")
                { if (pos + bad < first_bad) { first_bad = pos + bad; } }
            }
        }
        free(chunk);
    }
    if (failed_read) { llmc_die("%s: truncated or unreadable (%zu tokens of %d bytes expected)", path, ntok, token_bytes); }
    if (first_bad < ntok) {
        uint32_t tok = 0;
        if (pread(fd, &tok, (size_t)token_bytes, (off_t)offset + (off_t)(first_bad * (size_t)token_bytes)) != token_bytes) {
            llmc_die("%s: unreadable at token %zu", path, first_bad);
        }
        shard_check_tokens(path, &tok, 1, token_bytes, vocab_size, first_bad); // little-endian: tok holds the id
    }
}

// Checks a chat shard's ntok mask bytes, which start at file offset `offset`: each 0 or 1, and 0 at every
// conversation's first token (a multiple of T). Dies naming the first bad position.
static inline void shard_check_chat_mask(FILE* f, const char* path, size_t ntok, size_t T, long offset) {
    uint8_t* chunk = (uint8_t*)mallocCheck(DATALOADER_CHECK_CHUNK_BYTES);
    fseekCheck(f, offset, SEEK_SET, path);
    size_t bad = ntok;  // the first bad position
    unsigned value = 0; // its byte
    for (size_t pos = 0; pos < ntok && bad == ntok; pos += DATALOADER_CHECK_CHUNK_BYTES) {
        size_t n = ntok - pos < DATALOADER_CHECK_CHUNK_BYTES ? ntok - pos : DATALOADER_CHECK_CHUNK_BYTES;
        freadCheck(chunk, 1, n, f, path);
        for (size_t i = 0; i < n; i++) {
            if (chunk[i] > 1 || (chunk[i] == 1 && (pos + i) % T == 0)) {
                bad = pos + i;
                value = chunk[i];
                break;
            }
        }
    }
    free(chunk);
    if (bad < ntok && value > 1) { llmc_die("%s: mask byte %u at position %zu, expected 0 or 1", path, value, bad); }
    if (bad < ntok) { llmc_die("%s: mask 1 at position %zu, the first token of a conversation (T = %zu)", path, bad, T); }
}

// every loader's place among the processes: rank in [0, num_processes); `path` names the data in the error
static inline void loader_check_rank(const char* path, int process_rank, int num_processes) {
    if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes) {
        llmc_die("%s: bad process rank %d of %d", path, process_rank, num_processes);
    }
}

// ----------------------------------------------------------------------------
// shuffling

// Fisher-Yates shuffle of perm[0..n-1] (filled with 0..n-1 first) with a seeded mt19937
static inline void dataloader_permutation(size_t* perm, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) { perm[i] = i; }
    if (n < 2) { return; }
    mt19937_state rng;
    manual_seed(&rng, seed);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(randint64(&rng) % (uint64_t)(i + 1));
        size_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

// a 32-bit seed from (a, b, c): splitmix64 mixing, so nearby inputs give unrelated seeds
static inline uint32_t dataloader_mix_seed(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ULL + b * 0xBF58476D1CE4E5B9ULL + c * 0x94D049BB133111EBULL + 0x2545F4914F6CDD1DULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (uint32_t)(z ^ (z >> 32));
}

// ----------------------------------------------------------------------------
// DataLoader

typedef struct {
    // configuration
    int process_rank;
    int num_processes;
    size_t B;
    size_t T;
    int should_shuffle;
    int vocab_size;  // 0 = no token range check
    ShardFormat format;         // every shard must be of this format
    int masked;                 // 1: chat shards (every shard of the pattern), targets -1 where not supervised
    // the shards
    glob_t glob_result;
    size_t num_shards;
    size_t* shard_num_tokens;   // (num_shards,)
    size_t num_tokens;          // total over all shards
    int token_bytes;            // of the format: 2 (uint16, GPT-2) or 4 (uint32, llama-3)
    size_t max_shard_samples;
    // the current shard
    FILE* tokens_file;
    const char* current_path;
    size_t current_file_idx;    // index into glob_result of the open shard
    size_t shard_num_samples;   // samples in the open shard
    size_t current_shard_idx;   // shards opened since the start, across epochs (see the top of this file)
    size_t current_sample_idx;  // place of the next batch in the shard's sample order
    // shuffling
    size_t shard_perm_epoch;    // the epoch shard_indices was computed for
    size_t* shard_indices;      // (num_shards,) shard order of the current epoch
    size_t* sample_indices;     // (max_shard_samples,) sample order of the open shard
    // batch buffers
    void* buffer;               // (B*T+1) raw tokens
    uint8_t* mask;              // (B, T) a chat shard's mask bytes of the batch's tokens (masked loaders only)
    int* inputs;                // (B, T)
    int* targets;               // (B, T)
} DataLoader;

// opens the shard at place current_shard_idx and prepares its sample order
static inline void dataloader_load_shard_(DataLoader* l) {
    size_t epoch = l->current_shard_idx / l->num_shards;
    size_t place = l->current_shard_idx % l->num_shards;
    if (l->should_shuffle) {
        if (epoch != l->shard_perm_epoch) {
            dataloader_permutation(l->shard_indices, l->num_shards,
                                   dataloader_mix_seed(DATALOADER_SHUFFLE_SEED, epoch, 0));
            l->shard_perm_epoch = epoch;
        }
    }
    size_t file_idx = l->shard_indices[place];
    if (l->tokens_file != NULL) {
        fcloseCheck(l->tokens_file, l->current_path);
    }
    l->current_file_idx = file_idx;
    l->current_path = l->glob_result.gl_pathv[file_idx];
    l->tokens_file = fopenCheck(l->current_path, "rb");
    size_t chat_T;
    size_t ntok = shard_read_header(l->tokens_file, l->current_path, l->format, &chat_T);
    if (ntok != l->shard_num_tokens[file_idx] || (chat_T != 0) != l->masked) {
        llmc_die("%s: shard changed on disk since the data loader started", l->current_path);
    }
    size_t sample_tokens = (size_t)l->num_processes * l->B * l->T;
    l->shard_num_samples = l->masked ? ntok / sample_tokens : (ntok - 1) / sample_tokens;
    if (l->should_shuffle) {
        dataloader_permutation(l->sample_indices, l->shard_num_samples,
                               dataloader_mix_seed(DATALOADER_SHUFFLE_SEED, epoch, place + 1));
    } else {
        for (size_t i = 0; i < l->shard_num_samples; i++) { l->sample_indices[i] = i; }
    }
}

// format: the shard format this loader reads (the model family's); a shard of the other one is refused
static inline void dataloader_init(DataLoader* l, const char* filename_pattern, size_t B, size_t T,
                                   int process_rank, int num_processes, int should_shuffle, int vocab_size,
                                   ShardFormat format) {
    memset(l, 0, sizeof(*l));
    if (B == 0 || T == 0) {
        llmc_die("%s: data loader needs B >= 1 and T >= 1 (got B=%zu, T=%zu)", filename_pattern, B, T);
    }
    loader_check_rank(filename_pattern, process_rank, num_processes);
    l->process_rank = process_rank;
    l->num_processes = num_processes;
    l->B = B;
    l->T = T;
    l->should_shuffle = should_shuffle;
    l->vocab_size = vocab_size;
    l->format = format;
    l->token_bytes = shard_format_spec(format)->token_bytes;

    int rc = glob(filename_pattern, 0, NULL, &l->glob_result);
    if (rc == GLOB_NOMATCH || (rc == 0 && l->glob_result.gl_pathc == 0)) {
        llmc_die("%s: no files match this pattern", filename_pattern);
    }
    if (rc != 0) {
        llmc_die("%s: glob failed (code %d)", filename_pattern, rc);
    }
    l->num_shards = l->glob_result.gl_pathc;

    // validate every shard up front, so a bad one fails now rather than hours into training
    size_t sample_tokens = (size_t)num_processes * B * T;
    l->shard_num_tokens = (size_t*)mallocCheck(l->num_shards * sizeof(size_t));
    for (size_t i = 0; i < l->num_shards; i++) {
        const char* path = l->glob_result.gl_pathv[i];
        FILE* f = fopenCheck(path, "rb");
        size_t chat_T;
        size_t ntok = shard_read_header(f, path, format, &chat_T);
        long tokens_offset = ftell(f);
        int chat = chat_T != 0;
        if (i == 0) { l->masked = chat; }
        if (chat != l->masked) {
            llmc_die("%s: a %s shard, but %s is a %s one: one pattern holds chat shards (with a loss mask) or plain "
                     "ones, not both", path, chat ? "chat" : "plain token", l->glob_result.gl_pathv[0],
                     l->masked ? "chat" : "plain token");
        }
        if (chat && chat_T != T) {
            llmc_die("%s: chat shard of T = %zu token conversations, but the trainer's -t is %zu (they must be equal)",
                     path, chat_T, T);
        }
        shard_check_all_tokens(f, path, ntok, l->token_bytes, vocab_size, tokens_offset);
        if (chat) { shard_check_chat_mask(f, path, ntok, chat_T, tokens_offset + (long)(ntok * (size_t)l->token_bytes)); }
        fcloseCheck(f, path);
        size_t need = sample_tokens + (size_t)!chat; // a plain shard's last target is one token past the batch
        if (ntok < need) {
            llmc_die("%s: too small for one batch (%zu tokens, need at least %zu = %d processes x B=%zu x T=%zu%s)",
                     path, ntok, need, num_processes, B, T, chat ? "" : " + 1");
        }
        l->shard_num_tokens[i] = ntok;
        l->num_tokens += ntok;
        size_t samples = chat ? ntok / sample_tokens : (ntok - 1) / sample_tokens;
        if (samples > l->max_shard_samples) { l->max_shard_samples = samples; }
    }

    l->shard_indices = (size_t*)mallocCheck(l->num_shards * sizeof(size_t));
    for (size_t i = 0; i < l->num_shards; i++) { l->shard_indices[i] = i; }
    l->shard_perm_epoch = (size_t)-1;  // nothing computed yet
    l->sample_indices = (size_t*)mallocCheck(l->max_shard_samples * sizeof(size_t));
    l->buffer = mallocCheck((B * T + 1) * (size_t)l->token_bytes);
    l->mask = l->masked ? (uint8_t*)mallocCheck(B * T) : NULL;
    l->inputs = (int*)mallocCheck(B * T * sizeof(int));
    l->targets = (int*)mallocCheck(B * T * sizeof(int));
    l->tokens_file = NULL;
    l->current_shard_idx = 0;
    l->current_sample_idx = 0;
    dataloader_load_shard_(l);
}

// back to the first batch of epoch 0
static inline void dataloader_reset(DataLoader* l) {
    l->current_shard_idx = 0;
    l->current_sample_idx = 0;
    dataloader_load_shard_(l);
}

// continue from a saved (current_shard_idx, current_sample_idx)
static inline void dataloader_resume(DataLoader* l, size_t shard_idx, size_t sample_idx) {
    l->current_shard_idx = shard_idx;
    dataloader_load_shard_(l);
    if (sample_idx > l->shard_num_samples) {
        llmc_die("%s: cannot resume at sample %zu: the shard has %zu samples of %d x %zu x %zu tokens",
                 l->current_path, sample_idx, l->shard_num_samples, l->num_processes, l->B, l->T);
    }
    l->current_sample_idx = sample_idx;
}

// a chat shard's batch at token `start` of the open shard into inputs and targets: targets -1 where the next token
// is not supervised and at each row's last position (the reading rule at the top of this file)
static inline void dataloader_read_chat_batch_(DataLoader* l, size_t start) {
    size_t BT = l->B * l->T, T = l->T, ntok = l->shard_num_tokens[l->current_file_idx];
    size_t offset = DATALOADER_HEADER_INTS * sizeof(int) + start * (size_t)l->token_bytes;
    fseekCheck(l->tokens_file, (long)offset, SEEK_SET, l->current_path);
    freadCheck(l->buffer, (size_t)l->token_bytes, BT, l->tokens_file, l->current_path);
    size_t mask_offset = DATALOADER_HEADER_INTS * sizeof(int) + ntok * (size_t)l->token_bytes + start;
    fseekCheck(l->tokens_file, (long)mask_offset, SEEK_SET, l->current_path);
    freadCheck(l->mask, 1, BT, l->tokens_file, l->current_path);
    // init checked every id and mask byte; this only fires if the shard was rewritten since
    shard_check_tokens(l->current_path, l->buffer, BT, l->token_bytes, l->vocab_size, start);
    for (size_t i = 0; i < BT; i++) {
        if (l->mask[i] > 1) { llmc_die("%s: mask byte %u at position %zu, expected 0 or 1", l->current_path, l->mask[i], start + i); }
        l->inputs[i] = (int)shard_token_at(l->buffer, l->token_bytes, i);
    }
    for (size_t i = 0; i < BT; i++) {
        int last_of_row = i % T == T - 1;
        l->targets[i] = !last_of_row && l->mask[i + 1] ? l->inputs[i + 1] : -1;
    }
}

// fills inputs (B, T) and targets (B, T) with the next batch of this rank
static inline void dataloader_next_batch(DataLoader* l) {
    if (l->current_sample_idx >= l->shard_num_samples) {
        l->current_shard_idx++;
        l->current_sample_idx = 0;
        dataloader_load_shard_(l);
    }
    size_t BT = l->B * l->T;
    size_t sample = l->sample_indices[l->current_sample_idx];
    size_t start = sample * (size_t)l->num_processes * BT + (size_t)l->process_rank * BT;  // in tokens
    if (l->masked) {
        dataloader_read_chat_batch_(l, start);
        l->current_sample_idx++;
        return;
    }
    size_t offset = DATALOADER_HEADER_INTS * sizeof(int) + start * (size_t)l->token_bytes;
    fseekCheck(l->tokens_file, (long)offset, SEEK_SET, l->current_path);
    freadCheck(l->buffer, (size_t)l->token_bytes, BT + 1, l->tokens_file, l->current_path);
    // init checked every id; this only fires if the shard was rewritten since
    shard_check_tokens(l->current_path, l->buffer, BT + 1, l->token_bytes, l->vocab_size, start);
    for (size_t i = 0; i < BT; i++) {
        l->inputs[i] = (int)shard_token_at(l->buffer, l->token_bytes, i);
        l->targets[i] = (int)shard_token_at(l->buffer, l->token_bytes, i + 1);
    }
    l->current_sample_idx++;
}

// releases everything and leaves the struct zeroed, as before init (a second free is harmless)
static inline void dataloader_free(DataLoader* l) {
    if (l->tokens_file != NULL) { fclose(l->tokens_file); }
    void* buffers[] = {l->buffer, l->mask, l->inputs, l->targets, l->shard_indices, l->sample_indices, l->shard_num_tokens};
    FREE_ALL(buffers);
    if (l->num_shards > 0) { globfree(&l->glob_result); }
    memset(l, 0, sizeof(*l));
}

// ----------------------------------------------------------------------------
// EvalLoader: multiple-choice eval (HellaSwag) in the llm.c-compatible format
//
// header: [0] = 20240522, [1] = 1, [2] = number of examples, [3] = longest example in bytes.
// Then per example, uint16 values:
//     65535, example bytes (of the whole example, these fields included), example index, label,
//     number of completions (4), context length, context tokens, then per completion its
//     length and tokens.
// A batch holds B/4 examples, one row per completion: inputs = context + completion (zero padded),
// targets = inputs shifted by one, mask = 1 at the positions whose target is a completion token.
// Examples are split across ranks in contiguous ranges of ceil(examples / num_processes); every
// rank does the same num_batches (rows past its last example are empty, mask 0).

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_NUM_COMPLETIONS 4
#define EVAL_DELIMITER 65535
#define EVAL_VOCAB_SIZE 50257  // eval files hold GPT-2 tokens

typedef struct {
    int process_rank;
    int num_processes;
    size_t B;
    size_t T;
    FILE* eval_file;
    char path[4096];
    int num_examples;
    int longest_example_bytes;
    long* example_offsets;       // (num_examples,) file offset of each example
    int start_example_index;     // this rank's examples are [start, end)
    int end_example_index;
    int current_example_index;
    int num_batches;             // the same on every rank
    int examples_per_batch;      // B / 4
    int num_examples_in_batch;   // examples in the last batch filled
    uint16_t* buffer;            // (longest example,)
    int* labels;                 // (B/4,) label of each example of the batch
    int* inputs;                 // (B, T)
    int* targets;                // (B, T)
    char* mask;                  // (B, T)
} EvalLoader;

// reads one example at the current file position into l->buffer, validating it; returns its length in uint16
static inline size_t evalloader_read_example_(EvalLoader* l, int expected_index) {
    uint16_t head[3];
    freadCheck(head, sizeof(uint16_t), 3, l->eval_file, l->path);
    if (head[0] != EVAL_DELIMITER) {
        llmc_die("%s: example %d: missing example delimiter (found %u, expected %u)", l->path, expected_index,
                 head[0], EVAL_DELIMITER);
    }
    size_t nbytes = head[1];
    if (nbytes % 2 != 0 || nbytes < 2 * 6 || nbytes > (size_t)l->longest_example_bytes) {
        llmc_die("%s: example %d: bad size %zu bytes (longest example per header: %d)", l->path, expected_index,
                 nbytes, l->longest_example_bytes);
    }
    if (head[2] != (uint16_t)expected_index) {
        llmc_die("%s: example %d: index field says %u", l->path, expected_index, head[2]);
    }
    size_t n = nbytes / 2;
    l->buffer[0] = head[0];
    l->buffer[1] = head[1];
    l->buffer[2] = head[2];
    freadCheck(l->buffer + 3, sizeof(uint16_t), n - 3, l->eval_file, l->path);
    // [3] label, [4] completions, [5] context length, context, per completion: length, tokens
    if (l->buffer[3] >= EVAL_NUM_COMPLETIONS) {
        llmc_die("%s: example %d: label %u out of range 0..%d", l->path, expected_index, l->buffer[3],
                 EVAL_NUM_COMPLETIONS - 1);
    }
    if (l->buffer[4] != EVAL_NUM_COMPLETIONS) {
        llmc_die("%s: example %d: %u completions, expected %d", l->path, expected_index, l->buffer[4],
                 EVAL_NUM_COMPLETIONS);
    }
    size_t pos = 5;
    size_t ctx_len = l->buffer[pos];
    if (ctx_len == 0 || pos + 1 + ctx_len > n) {
        llmc_die("%s: example %d: bad context length %zu", l->path, expected_index, ctx_len);
    }
    pos += 1 + ctx_len;
    for (int c = 0; c < EVAL_NUM_COMPLETIONS; c++) {
        size_t comp_len = pos < n ? l->buffer[pos] : 0;
        if (pos >= n || comp_len == 0 || pos + 1 + comp_len > n) {
            llmc_die("%s: example %d: bad length of completion %d", l->path, expected_index, c);
        }
        if (ctx_len + comp_len > l->T) {
            llmc_die("%s: example %d: context + completion %d is %zu tokens, longer than T=%zu (use a larger -t)",
                     l->path, expected_index, c, ctx_len + comp_len, l->T);
        }
        pos += 1 + comp_len;
    }
    if (pos != n) {
        llmc_die("%s: example %d: size field says %zu bytes but its fields take %zu", l->path, expected_index,
                 n * 2, pos * 2);
    }
    // token ids: everything after the context length field except the completion length fields
    pos = 6;
    for (int part = 0; part <= EVAL_NUM_COMPLETIONS; part++) {
        size_t count = l->buffer[pos - 1];
        for (size_t i = 0; i < count; i++) {
            if (l->buffer[pos + i] >= EVAL_VOCAB_SIZE) {
                llmc_die("%s: example %d: token id %u >= vocab size %d", l->path, expected_index,
                         l->buffer[pos + i], EVAL_VOCAB_SIZE);
            }
        }
        pos += count + 1;  // skip the tokens and land after the next length field
    }
    return n;
}

static inline void evalloader_reset(EvalLoader* l) {
    l->current_example_index = l->start_example_index;
    l->num_examples_in_batch = 0;
}

static inline void evalloader_init(EvalLoader* l, const char* path, size_t B, size_t T, int process_rank,
                                   int num_processes) {
    memset(l, 0, sizeof(*l));
    size_t len = strlen(path);
    if (len >= sizeof(l->path)) { llmc_die("%s: path too long", path); }
    memcpy(l->path, path, len + 1);
    if (B < EVAL_NUM_COMPLETIONS || B % EVAL_NUM_COMPLETIONS != 0 || T == 0) {
        llmc_die("%s: the eval loader needs B to be a multiple of %d and T >= 1 (got B=%zu, T=%zu)", path,
                 EVAL_NUM_COMPLETIONS, B, T);
    }
    loader_check_rank(path, process_rank, num_processes);
    l->B = B;
    l->T = T;
    l->process_rank = process_rank;
    l->num_processes = num_processes;
    l->eval_file = fopenCheck(path, "rb");
    size_t file_bytes = file_size_check(l->eval_file, path);
    int header[256];
    read_header_check(l->eval_file, path, header, EVAL_MAGIC, EVAL_VERSION, EVAL_VERSION, "HellaSwag eval");
    if (header[2] <= 0) {
        llmc_die("%s: no examples (header says %d)", path, header[2]);
    }
    if (header[3] < 2 * 6 || header[3] > 2 * 65535) {
        llmc_die("%s: bad longest example size %d bytes in the header", path, header[3]);
    }
    if ((size_t)header[2] > (file_bytes - 256 * sizeof(int)) / (2 * 6)) {  // before allocating per-example state
        llmc_die("%s: header says %d examples, more than the file's %zu bytes can hold", path, header[2], file_bytes);
    }
    l->num_examples = header[2];
    l->longest_example_bytes = header[3];
    l->buffer = (uint16_t*)mallocCheck((size_t)l->longest_example_bytes);

    // walk and validate every example once, remembering where each starts
    l->example_offsets = (long*)mallocCheck((size_t)l->num_examples * sizeof(long));
    long offset = 256 * (long)sizeof(int);
    for (int i = 0; i < l->num_examples; i++) {
        l->example_offsets[i] = offset;
        if ((size_t)offset + 6 > file_bytes) {
            llmc_die("%s: truncated (header says %d examples, the file ends in example %d)", path, l->num_examples, i);
        }
        size_t n = evalloader_read_example_(l, i);
        offset += (long)(n * 2);
    }
    if ((size_t)offset != file_bytes) {
        llmc_die("%s: %zu bytes of trailing data after the last example", path, file_bytes - (size_t)offset);
    }

    int per_process = (l->num_examples + num_processes - 1) / num_processes;
    l->examples_per_batch = (int)(B / EVAL_NUM_COMPLETIONS);
    l->num_batches = (per_process + l->examples_per_batch - 1) / l->examples_per_batch;
    l->start_example_index = per_process * process_rank;
    l->end_example_index = per_process * (process_rank + 1);
    if (l->start_example_index > l->num_examples) { l->start_example_index = l->num_examples; }
    if (l->end_example_index > l->num_examples) { l->end_example_index = l->num_examples; }

    l->labels = (int*)mallocCheck((size_t)l->examples_per_batch * sizeof(int));
    l->inputs = (int*)mallocCheck(B * T * sizeof(int));
    l->targets = (int*)mallocCheck(B * T * sizeof(int));
    l->mask = (char*)mallocCheck(B * T);
    evalloader_reset(l);
}

// fills inputs, targets, mask (B, T) with the next B/4 examples of this rank
static inline void evalloader_next_batch(EvalLoader* l) {
    size_t B = l->B, T = l->T;
    memset(l->inputs, 0, B * T * sizeof(int));
    memset(l->targets, 0, B * T * sizeof(int));
    memset(l->mask, 0, B * T);
    int count = 0;
    while (count < l->examples_per_batch && l->current_example_index < l->end_example_index) {
        int idx = l->current_example_index;
        fseekCheck(l->eval_file, l->example_offsets[idx], SEEK_SET, l->path);
        evalloader_read_example_(l, idx);
        l->labels[count] = l->buffer[3];
        size_t ctx_len = l->buffer[5];
        const uint16_t* ctx = l->buffer + 6;
        const uint16_t* p = ctx + ctx_len;
        for (int c = 0; c < EVAL_NUM_COMPLETIONS; c++) {
            size_t comp_len = *p++;
            size_t row = (size_t)count * EVAL_NUM_COMPLETIONS + (size_t)c;
            int* inp = l->inputs + row * T;
            int* tgt = l->targets + row * T;
            char* msk = l->mask + row * T;
            for (size_t i = 0; i < ctx_len; i++) { inp[i] = ctx[i]; }
            for (size_t i = 0; i < comp_len; i++) { inp[ctx_len + i] = p[i]; }
            size_t len = ctx_len + comp_len;
            for (size_t i = 0; i + 1 < len; i++) { tgt[i] = inp[i + 1]; }
            // position t predicts token t+1: the completion tokens are the targets at ctx_len-1 .. len-2
            for (size_t i = ctx_len - 1; i + 1 < len; i++) { msk[i] = 1; }
            p += comp_len;
        }
        count++;
        l->current_example_index++;
    }
    l->num_examples_in_batch = count;
}

// losses: (B, T) per-position losses of the last batch. Returns how many of its examples have
// the completion with the lowest mean loss over its masked positions equal to the label.
static inline int evalloader_stat_losses(EvalLoader* l, const float* losses) {
    int correct = 0;
    size_t T = l->T;
    for (int e = 0; e < l->num_examples_in_batch; e++) {
        int best = -1;
        double best_loss = 0.0;
        for (int c = 0; c < EVAL_NUM_COMPLETIONS; c++) {
            size_t row = (size_t)e * EVAL_NUM_COMPLETIONS + (size_t)c;
            double sum = 0.0;
            int n = 0;
            for (size_t t = 0; t < T; t++) {
                if (l->mask[row * T + t]) {
                    sum += losses[row * T + t];
                    n++;
                }
            }
            double mean = n > 0 ? sum / n : 0.0;
            if (best < 0 || mean < best_loss) {
                best = c;
                best_loss = mean;
            }
        }
        if (best == l->labels[e]) { correct++; }
    }
    return correct;
}

// releases everything and leaves the struct zeroed, as before init (a second free is harmless)
static inline void evalloader_free(EvalLoader* l) {
    if (l->eval_file != NULL) { fclose(l->eval_file); }
    void* buffers[] = {l->buffer, l->example_offsets, l->labels, l->inputs, l->targets, l->mask};
    FREE_ALL(buffers);
    memset(l, 0, sizeof(*l));
}

#endif // LLMC_DATALOADER_H
