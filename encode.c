/*
encode: GPT-2 BPE from the command line, with llmc/bpe.h (the same ids as tiktoken's "gpt2").

    ./encode < text.txt            token ids of stdin, space-separated on one line
    ./encode -d < ids.txt          decodes whitespace-separated ids back to the exact bytes
    ./encode -d -t gpt2_tokenizer.bin < ids.txt   the same with the llm.c-format tokenizer (llmc/tokenizer.h)
    ./encode -t llama3_tokenizer.bin < text.txt   Llama 3 ids (the tokenizer file's ranks, Llama 3's split pattern)
    ./encode --allow-special       "<|endoftext|>" in the text becomes token 50256
    ./encode --bench 5 < text.txt  encodes stdin 5 times, prints the median MB/s to stderr
    ./encode -b path/gpt2_bpe.bin  the BPE ranks file (default gpt2_bpe.bin; `python dev/write_bpe.py` writes it)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmc/utils.h"
#include "llmc/bpe.h"
#include "llmc/tokenizer.h"

static void print_usage(FILE* out) {
    fprintf(out,
        "usage: ./encode [options] < input\n"
        "  GPT-2 BPE encoder/decoder (same ids as tiktoken's gpt2 encoding).\n"
        "  default: reads text on stdin, prints the token ids space-separated on one line\n"
        "  -d               decode: reads whitespace-separated ids on stdin, writes the raw bytes\n"
        "  -b <path>        BPE ranks file (default: gpt2_bpe.bin; `python dev/write_bpe.py` writes it)\n"
        "  -t <path>        with -d: decode with this llm.c-format tokenizer (gpt2_tokenizer.bin) instead;\n"
        "                   without -d, a Llama 3 tokenizer file (llama3_tokenizer.bin) encodes with Llama 3's BPE\n"
        "  --allow-special  encode \"<|endoftext|>\" (Llama 3: \"<|end_of_text|>\") as the special token (default: as text)\n"
        "  --bench <n>      encode stdin n times and print the median throughput in MB/s to stderr\n"
        "  -h, --help       this help\n");
}

// reads all of stdin into a malloc'ed buffer
static unsigned char* read_stdin(size_t* n_out) {
    size_t cap = 1 << 16, n = 0;
    unsigned char* buf = (unsigned char*)mallocCheck(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char* bigger = (unsigned char*)realloc(buf, cap);
            if (bigger == NULL) { llmc_die("stdin: out of memory reading %zu bytes", cap); }
            buf = bigger;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) {
            if (ferror(stdin)) { llmc_die("stdin: read error"); }
            break;
        }
    }
    *n_out = n;
    return buf;
}

static void run_encode(const BPE* bpe, int allow_special, int bench) {
    size_t n;
    unsigned char* text = read_stdin(&n);
    int* ids = (int*)mallocCheck((n + 1) * sizeof(int));
    if (bench > 0) {
        double* mbps = (double*)mallocCheck((size_t)bench * sizeof(double));
        size_t cnt = 0;
        for (int r = 0; r < bench; r++) {
            double t0 = wall_seconds();
            cnt = bpe_encode(bpe, text, n, allow_special, ids);
            double dt = wall_seconds() - t0;
            mbps[r] = (double)n / 1e6 / (dt > 0 ? dt : 1e-9);
        }
        qsort(mbps, (size_t)bench, sizeof(double), compare_doubles);
        fprintf(stderr, "encoded %zu bytes -> %zu tokens; median of %d runs: %.2f MB/s\n", n, cnt, bench, mbps[bench / 2]);
        free(mbps);
        free(ids);
        free(text);
        return;
    }
    size_t cnt = bpe_encode(bpe, text, n, allow_special, ids);
    char* line = (char*)mallocCheck(cnt * 12 + 2);
    size_t at = 0;
    for (size_t i = 0; i < cnt; i++) {
        at += (size_t)sprintf(line + at, i == 0 ? "%d" : " %d", ids[i]);
    }
    line[at++] = '\n';
    fwriteCheck(line, 1, at, stdout, "stdout");
    free(line);
    free(ids);
    free(text);
}

// decodes with the BPE file's token bytes, or with the tokenizer file when tok != NULL
static void run_decode(const BPE* bpe, Tokenizer* tok) {
    size_t n;
    unsigned char* text = read_stdin(&n);
    size_t i = 0, index = 0;
    while (i < n) {
        while (i < n && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) { i++; }
        if (i == n) { break; }
        size_t start = i;
        long long v = 0;
        int ok = 1;
        while (i < n && !(text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) {
            if (text[i] < '0' || text[i] > '9' || v > 100000000LL) { ok = 0; }
            else { v = v * 10 + (text[i] - '0'); }
            i++;
        }
        int len = (int)(i - start < 40 ? i - start : 40);
        if (!ok) { llmc_die("stdin: \"%.*s\" (item %zu) is not a token id", len, (const char*)text + start, index); }
        size_t blen;
        const unsigned char* bytes;
        int max_id;
        if (tok != NULL) {
            max_id = (int)tok->vocab_size - 1;
            bytes = v <= max_id ? (const unsigned char*)tokenizer_decode(tok, (uint32_t)v) : NULL;
            blen = v <= max_id ? tokenizer_decode_length(tok, (uint32_t)v) : 0;
        } else {
            max_id = bpe->eot_token;
            bytes = v <= max_id ? bpe_token_bytes(bpe, (int)v, &blen) : NULL;
        }
        if (bytes == NULL) {
            llmc_die("stdin: token id %lld (item %zu) out of range (0..%d)", v, index, max_id);
        }
        fwriteCheck(bytes, 1, blen, stdout, "stdout");
        index++;
    }
    free(text);
}

int main(int argc, char** argv) {
    const char* bpe_path = "gpt2_bpe.bin";
    const char* tokenizer_path = NULL;
    int decode = 0, allow_special = 0, bench = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { print_usage(stdout); return 0; }
        else if (strcmp(a, "-d") == 0) { decode = 1; }
        else if (strcmp(a, "--allow-special") == 0) { allow_special = 1; }
        else if (strcmp(a, "-b") == 0 || strcmp(a, "-t") == 0 || strcmp(a, "--bench") == 0) {
            if (i + 1 >= argc) { llmc_die("%s: missing value (see ./encode --help)", a); }
            if (a[1] == 'b') { bpe_path = argv[++i]; }
            else if (a[1] == 't') { tokenizer_path = argv[++i]; }
            else {
                char* end;
                long v = strtol(argv[++i], &end, 10);
                if (*end != '\0' || v < 1 || v > 1000) { llmc_die("--bench: \"%s\" is not a run count in 1..1000", argv[i]); }
                bench = (int)v;
            }
        } else {
            fprintf(stderr, "error: unknown argument \"%s\" (see ./encode --help)\n", a);
            return 1;
        }
    }
    if (tokenizer_path != NULL) {
        if (!file_exists(tokenizer_path)) {
            llmc_die("%s: tokenizer not found (`python train_gpt2.py` writes gpt2_tokenizer.bin, `python train_llama3.py` llama3_tokenizer.bin)", tokenizer_path);
        }
        Tokenizer tok;
        tokenizer_init(&tok, tokenizer_path);
        if (!tok.init_ok) { return 1; }   // tokenizer_init printed why
        if (decode) {
            run_decode(NULL, &tok);
        } else {
            if (tok.version != 3) {
                llmc_die("-t %s: a GPT-2 tokenizer file (version %d) only decodes (-d); GPT-2 encodes with the BPE ranks file (-b)", tokenizer_path, tok.version);
            }
            BPE bpe;
            bpe_init_llama3(&bpe, &tok, tokenizer_path);
            run_encode(&bpe, allow_special, bench);
            bpe_free(&bpe);
        }
        tokenizer_free(&tok);
    } else {
        BPE bpe;
        bpe_init(&bpe, bpe_path);
        if (decode) { run_decode(&bpe, NULL); }
        else { run_encode(&bpe, allow_special, bench); }
        bpe_free(&bpe);
    }
    if (fflush(stdout) != 0) { llmc_die("stdout: write failed"); }
    return 0;
}
