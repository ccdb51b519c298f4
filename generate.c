/*
generate: text generation from an llmc GPT-2 or Llama 3 model file on the CPU, with a KV cache.

    ./generate -e gpt2_124M.bin -p "The meaning of life is" -n 200 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1337
    ./generate -e gpt2_124M.bin -i          interactive: one prompt per stdin line
    ./generate -e llama3_d2.bin -t llama3_tokenizer.bin -p "ROMEO:"          a Llama 3 model
    ./generate -e llama3_d2.bin -t llama3_tokenizer.bin --ids "128000 791"   its prompt as token ids

The family comes from the model file's magic (20240326 GPT-2, 20240803 Llama 3). Llama 3 models use
train_llama3.c's model and the Llama 3 tokenizer file (llmc/tokenizer.h): it decodes, and its token
bytes are the BPE ranks that encode a text prompt (llmc/bpe.h, bpe_init_llama3: the same ids as the
`tokenizers` library on the tokenizer.json; text that looks like a special token stays text). A text
prompt starts with BOS; --ids gives the ids as they are (default: BOS alone). --print-ids prints the
prompt's ids to stderr. The Llama 3 cache holds the NKV key/value heads only (GQA: NH/NKV query heads
read each cached head).

The model and its layers are train_gpt2.c's (included with LLMC_NO_MAIN defined, so its main() is
left out). Generation keeps every layer's keys and values in a cache: the prompt goes through
the model once, then each new token costs the forward pass of ONE position (a matrix-vector
product per weight matrix and attention over the cached positions), not a recompute of the
whole sequence. Prompts are encoded with llmc/bpe.h (the same ids as tiktoken's gpt2; the
text "<|endoftext|>" in a prompt is the special token), tokens are drawn with llmc/sampler.h
and printed as they come (flushed per token). A fixed --seed gives the same text every run.

--check-kv recomputes the full sequence with train_gpt2.c's gpt2_forward at every step and
compares its last-position logits with the cached path's (fails above 1e-4): the test of the cache.
*/
#define LLMC_NO_MAIN
#include "train_gpt2.c"
#include "train_llama3.c"
#include "llmc/bpe.h"
#include "llmc/sampler.h"

#include <unistd.h>

// ----------------------------------------------------------------------------
// the KV-cached forward pass (batch 1), of either family: the cache holds NKV key/value heads per layer
// (GPT-2: NKV = NH) and the work buffers of up to maxT positions

typedef struct {
    int maxT, C, L, NH, NKV, HS, QKV, FFN, V;
    int pos;               // positions already in the cache
    float* key_cache;      // (L, maxT, NKV*HS), Llama 3's after RoPE
    float* value_cache;    // (L, maxT, NKV*HS)
    float* x;              // (maxT, C) the residual stream
    float* ln;             // (maxT, C)
    float* mean;           // (maxT)
    float* rstd;           // (maxT)
    float* qkv;            // (maxT, QKV) the NH query heads, then the NKV key and value heads
    float* atty;           // (maxT, C)
    float* proj;           // (maxT, C)
    float* fch;            // (maxT, FFN) the MLP's first hidden layer (GPT-2: fc, Llama 3: the gate)
    float* fch2;           // (maxT, FFN) its second (GPT-2: gelu(fc), Llama 3: the up projection)
    float* scores;         // (threads, maxT) attention scores scratch
    float* logits;         // (V) logits of the last position
} KVCache;

static void kvcache_init(KVCache* kv, int maxT, int C, int L, int NH, int NKV, int FFN, int V) {
    kv->maxT = maxT;
    kv->C = C;
    kv->L = L;
    kv->NH = NH;
    kv->NKV = NKV;
    kv->HS = C / NH;
    kv->QKV = (NH + 2 * NKV) * kv->HS;
    kv->FFN = FFN;
    kv->V = V;
    kv->pos = 0;
    size_t T = (size_t)maxT, KVC = (size_t)NKV * kv->HS;
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    kv->key_cache = (float*)mallocCheck((size_t)L * T * KVC * sizeof(float));
    kv->value_cache = (float*)mallocCheck((size_t)L * T * KVC * sizeof(float));
    kv->x = (float*)mallocCheck(T * C * sizeof(float));
    kv->ln = (float*)mallocCheck(T * C * sizeof(float));
    kv->mean = (float*)mallocCheck(T * sizeof(float));
    kv->rstd = (float*)mallocCheck(T * sizeof(float));
    kv->qkv = (float*)mallocCheck(T * kv->QKV * sizeof(float));
    kv->atty = (float*)mallocCheck(T * C * sizeof(float));
    kv->proj = (float*)mallocCheck(T * C * sizeof(float));
    kv->fch = (float*)mallocCheck(T * FFN * sizeof(float));
    kv->fch2 = (float*)mallocCheck(T * FFN * sizeof(float));
    kv->scores = (float*)mallocCheck((size_t)nthreads * T * sizeof(float));
    kv->logits = (float*)mallocCheck((size_t)V * sizeof(float));
}

static void kvcache_free(KVCache* kv) {
    free(kv->key_cache); free(kv->value_cache); free(kv->x); free(kv->ln); free(kv->mean); free(kv->rstd);
    free(kv->qkv); free(kv->atty); free(kv->proj); free(kv->fch); free(kv->fch2); free(kv->scores); free(kv->logits);
}

// out[o] = bias[o] + weight[o,:] . inp, for one position. Each dot product keeps MV_LANES
// independent partial sums (so the compiler can use SIMD without reordering float math) and
// adds them in a fixed order: the result does not depend on the thread count.
#define MV_LANES 16
static void matvec_forward(float* out, const float* inp, const float* weight, const float* bias, int C, int OC) {
    // out is (OC), inp is (C), weight is (OC, C), bias is (OC) or NULL
    int Cv = C - C % MV_LANES;
    #pragma omp parallel for schedule(static) if ((size_t)OC * C >= (1u << 16))
    for (int o = 0; o < OC; o++) {
        const float* w = weight + (size_t)o * C;
        float acc[MV_LANES] = {0.0f};
        for (int c = 0; c < Cv; c += MV_LANES) {
            for (int j = 0; j < MV_LANES; j++) { acc[j] += w[c + j] * inp[c + j]; }
        }
        float s = 0.0f;
        for (int j = 0; j < MV_LANES; j++) { s += acc[j]; }
        for (int c = Cv; c < C; c++) { s += w[c] * inp[c]; }
        out[o] = s + (bias != NULL ? bias[o] : 0.0f);
    }
}

// The element-wise layers over n positions: train_gpt2.c's functions for a prompt, a plain loop
// for one position (the same math; a parallel region would cost more than the work).
static void layernorm_rows(KVCache* kv, float* out, const float* inp, const float* weight, const float* bias, int n, int C) {
    // out and inp are (n, C), weight and bias are (C)
    if (n > 1) { layernorm_forward(out, kv->mean, kv->rstd, inp, weight, bias, 1, n, C); return; }
    float m = layernorm_mean(inp, C);
    float s = layernorm_rstd(inp, m, C);
    for (int i = 0; i < C; i++) { out[i] = (inp[i] - m) * s * weight[i] + bias[i]; }
}

static void gelu_rows(float* out, const float* inp, int n, size_t N) {
    // out and inp are (N) = (n, 4C)
    if (n > 1) { gelu_forward(out, inp, N); return; }
    for (size_t i = 0; i < N; i++) { out[i] = gelu_tanh_forward(inp[i]); }
}

static void residual_rows(float* x, const float* y, int n, size_t N) {
    // x += y, both (N) = (n, C)
    if (n > 1) { residual_forward(x, x, y, N); return; }
    for (size_t i = 0; i < N; i++) { x[i] += y[i]; }
}

// a linear layer over n positions: one position is a matrix-vector product
static void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int n, int C, int OC) {
    // out is (n, OC), inp is (n, C)
    if (n == 1) { matvec_forward(out, inp, weight, bias, C, OC); }
    else { matmul_forward(out, inp, weight, bias, 1, n, C, OC); }
}

// causal attention of n new positions (pos0 .. pos0+n-1) over the cached keys/values 0 .. pos0+n-1;
// query head h reads cached head h / (NH/NKV) (GPT-2: NKV = NH)
static void attention_forward_cached(float* out, float* scores, const float* q_rows, int q_stride, const float* key_cache,
                                     const float* value_cache, int pos0, int n, int C, int NH, int NKV, int maxT) {
    // out is (n, C); q_rows is (n, q_stride) with the NH query heads first; key/value_cache are
    // (maxT, NKV*HS); scores is (threads, maxT) scratch
    int HS = C / NH, KVC = NKV * HS, rep = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2) if ((size_t)n * (pos0 + n) * C >= (1u << 16))
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < NH; h++) {
#ifdef _OPENMP
            float* s = scores + (size_t)omp_get_thread_num() * maxT;
#else
            float* s = scores;
#endif
            const float* q = q_rows + (size_t)t * q_stride + h * HS;
            int kvh = (h / rep) * HS;
            int last = pos0 + t;   // attends to positions 0..last
            float maxval = -INFINITY;
            for (int t2 = 0; t2 <= last; t2++) {
                const float* k = key_cache + (size_t)t2 * KVC + kvh;
                float dot = 0.0f;
                for (int i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                dot *= scale;
                s[t2] = dot;
                if (dot > maxval) { maxval = dot; }
            }
            float sum = 0.0f;
            for (int t2 = 0; t2 <= last; t2++) {
                s[t2] = expf(s[t2] - maxval);
                sum += s[t2];
            }
            float inv = 1.0f / sum;
            float* o = out + (size_t)t * C + h * HS;
            for (int i = 0; i < HS; i++) { o[i] = 0.0f; }
            for (int t2 = 0; t2 <= last; t2++) {
                const float* v = value_cache + (size_t)t2 * KVC + kvh;
                float a = s[t2] * inv;
                for (int i = 0; i < HS; i++) { o[i] += a * v[i]; }
            }
        }
    }
}

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void gpt2_forward_cached(GPT2* model, KVCache* kv, const int* tokens, int n) {
    int C = kv->C, L = kv->L, NH = kv->NH, maxT = kv->maxT;
    if (n < 1 || kv->pos + n > maxT) {
        llmc_die("internal: cached forward of %d tokens at position %d exceeds the context %d", n, kv->pos, maxT);
    }
    GPT2Params p = model->params;
    size_t nC = (size_t)n * C;
    encoder_forward(kv->x, tokens, p.wte, p.wpe + (size_t)kv->pos * C, 1, n, C); // (n, C)
    for (int l = 0; l < L; l++) {
        GPT2LayerParams w = gpt2_layer_params(&model->params, &model->config, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * C;
        float* l_vc = kv->value_cache + (size_t)l * maxT * C;
        // attention block
        layernorm_rows(kv, kv->ln, kv->x, w.ln1w, w.ln1b, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, w.qkvb, n, C, 3 * C);
        for (int t = 0; t < n; t++) {
            memcpy(l_kc + (size_t)(kv->pos + t) * C, kv->qkv + (size_t)t * 3 * C + C, C * sizeof(float));
            memcpy(l_vc + (size_t)(kv->pos + t) * C, kv->qkv + (size_t)t * 3 * C + 2 * C, C * sizeof(float));
        }
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, 3 * C, l_kc, l_vc, kv->pos, n, C, NH, NH, maxT);
        linear_forward(kv->proj, kv->atty, w.attprojw, w.attprojb, n, C, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // MLP block
        layernorm_rows(kv, kv->ln, kv->x, w.ln2w, w.ln2b, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, w.fcb, n, C, 4 * C);
        gelu_rows(kv->fch2, kv->fch, n, nC * 4);
        linear_forward(kv->proj, kv->fch2, w.fcprojw, w.fcprojb, n, 4 * C, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final layernorm and the tied lm_head, for the last position only
    const float* last = kv->x + (size_t)(n - 1) * C;
    layernorm_rows(kv, kv->ln, last, p.lnfw, p.lnfb, 1, C);
    matvec_forward(kv->logits, kv->ln, p.wte, NULL, C, kv->V);
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// the Llama 3 KV-cached forward pass (batch 1)

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void llama3_forward_cached(Llama3* model, KVCache* kv, const int* tokens, int n) {
    const Llama3Config* cfg = &model->config;
    int C = kv->C, NH = kv->NH, NKV = kv->NKV, HS = kv->HS, QKV = kv->QKV, FFN = kv->FFN, maxT = kv->maxT;
    int KVC = NKV * HS, half = HS / 2;
    if (n < 1 || kv->pos + n > maxT) {
        llmc_die("internal: cached forward of %d tokens at position %d exceeds the context %d", n, kv->pos, maxT);
    }
    Llama3Params p = model->params;
    size_t nC = (size_t)n * C;
    embedding_forward(kv->x, tokens, p.wte, 1, n, C); // (n, C)
    for (int l = 0; l < kv->L; l++) {
        Llama3LayerParams w = llama3_layer_params(&model->params, cfg, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * KVC;
        float* l_vc = kv->value_cache + (size_t)l * maxT * KVC;
        // attention block: q and k rotated at their absolute positions, k and v appended to the cache
        rmsnorm_forward(kv->ln, kv->rstd, kv->x, w.ln1w, cfg->norm_eps, 1, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, NULL, n, C, QKV);
        rope_forward(kv->qkv, model->rope_cos + (size_t)kv->pos * half, model->rope_sin + (size_t)kv->pos * half,
                     1, n, QKV, NH + NKV, HS);
        for (int t = 0; t < n; t++) {
            const float* row = kv->qkv + (size_t)t * QKV;
            memcpy(l_kc + (size_t)(kv->pos + t) * KVC, row + C, KVC * sizeof(float));
            memcpy(l_vc + (size_t)(kv->pos + t) * KVC, row + C + KVC, KVC * sizeof(float));
        }
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, QKV, l_kc, l_vc, kv->pos, n, C, NH, NKV, maxT);
        linear_forward(kv->proj, kv->atty, w.attprojw, NULL, n, C, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // SwiGLU MLP block
        rmsnorm_forward(kv->ln, kv->rstd, kv->x, w.ln2w, cfg->norm_eps, 1, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, NULL, n, C, FFN);
        linear_forward(kv->fch2, kv->ln, w.fcw2, NULL, n, C, FFN);
        swiglu_forward(kv->fch, kv->fch, kv->fch2, (size_t)n * FFN);
        linear_forward(kv->proj, kv->fch, w.fcprojw, NULL, n, FFN, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final RMSNorm and the lm_head (or wte when tied), for the last position only
    rmsnorm_forward(kv->ln, kv->rstd, kv->x + (size_t)(n - 1) * C, p.lnfw, cfg->norm_eps, 1, 1, C);
    matvec_forward(kv->logits, kv->ln, llama3_lm_head(&p, cfg), NULL, C, kv->V);
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// generation

typedef struct {
    const char* model_path;
    const char* bpe_path;
    const char* tokenizer_path;  // Llama 3: the tokenizer file that decodes
    const char* ids;             // Llama 3: the prompt as token ids
    const char* prompt;
    int print_ids;               // print the prompt's token ids to stderr
    int num_tokens;
    float temperature;
    int top_k;
    float top_p;
    unsigned long long seed;
    int interactive;
    int check_kv;
    int stop_at_eot;
} GenerateArgs;

typedef struct {
    double max_diff;   // largest |cached - full| logit difference seen (--check-kv)
    int checks;
} KVCheck;

// "prompt ids: 1 2 3" on stderr (--print-ids)
static void print_prompt_ids(const int* ids, int n) {
    fprintf(stderr, "prompt ids:");
    for (int k = 0; k < n; k++) { fprintf(stderr, " %d", ids[k]); }
    fputc('\n', stderr);
}

// What the generation loop needs of a model, whatever its family: its KV-cached forward pass (the
// family's cache: tokens in at the cache's position, the last position's logits out), the full forward
// of train_gpt2.c / train_llama3.c that --check-kv compares with, and how a token is written out.
typedef struct {
    void* model;                      // GPT2 or Llama3
    const CpuModelCalls* calls;       // its calls (llmc/cpu/cpu_model.h): the full forward
    const CpuModel* cpu;              // the full forward's logits
    KVCache* kv;                      // its cache, and the cache's logits of the last position
    void (*forward_cached)(void* model, KVCache* kv, const int* tokens, int n);
    int eot;                          // the token that ends a document
    void (*write_token)(void* decoder, int id);   // the token's bytes to stdout
    void* decoder;
} Generator;

// compares the cached logits with a full forward of seq[0..T) (last position)
static void check_kv_step(const Generator* g, const int* seq, int T, KVCheck* chk) {
    g->calls->forward(g->model, seq, NULL, 1, T);
    const float* full = g->cpu->logits + (size_t)(T - 1) * g->cpu->logits_stride;
    double d = 0.0;
    for (int i = 0; i < g->kv->V; i++) {
        double e = fabs((double)full[i] - (double)g->kv->logits[i]);
        if (e > d) { d = e; }
    }
    if (d > chk->max_diff) { chk->max_diff = d; }
    chk->checks++;
    if (d > 1e-4) {
        llmc_die("--check-kv: cached logits differ from a full recompute by %.3g at position %d (limit 1e-4)", d, T - 1);
    }
}

// how many tokens to generate after n_prompt: -n, or up to the model's context (and a note that says so)
static int generate_budget(const GenerateArgs* args, int n_prompt, int maxT) {
    int budget = args->num_tokens;
    if (n_prompt + budget > maxT) {
        budget = maxT - n_prompt;
        fprintf(stderr, "note: stopping after %d tokens at the model's context length %d\n", budget, maxT);
    }
    return budget;
}

// Generates up to budget tokens after the prompt seq[0..n_prompt) from a fresh cache, each written to stdout
// as it comes, then a newline; stops at the end-of-document token unless --no-stop. seq needs room for maxT
// ids. Returns the tokens generated.
static int generate_tokens(const Generator* g, Sampler* sampler, const GenerateArgs* args, int* seq, int n_prompt,
                           int budget, KVCheck* chk) {
    g->kv->pos = 0;
    g->forward_cached(g->model, g->kv, seq, n_prompt);
    if (args->check_kv) { check_kv_step(g, seq, n_prompt, chk); }
    int T = n_prompt, made = 0;
    while (made < budget) {
        int next = sampler_sample(sampler, g->kv->logits);
        made++;
        if (next == g->eot && args->stop_at_eot) { break; }
        g->write_token(g->decoder, next);
        fflush(stdout);
        seq[T++] = next;
        if (made == budget) { break; }
        g->forward_cached(g->model, g->kv, &next, 1);
        if (args->check_kv) { check_kv_step(g, seq, T, chk); }
    }
    fputc('\n', stdout);
    fflush(stdout);
    return made;
}

// GPT-2's cached forward and its token bytes (the BPE ranks file's), for the Generator
static void gpt2_forward_cached_(void* model, KVCache* kv, const int* tokens, int n) {
    gpt2_forward_cached((GPT2*)model, kv, tokens, n);
}

static void gpt2_write_token(void* bpe, int id) {
    size_t len;
    const unsigned char* bytes = bpe_token_bytes((const BPE*)bpe, id, &len);
    if (bytes != NULL) { fwriteCheck(bytes, 1, len, stdout, "stdout"); }
}

// generates a continuation of `prompt` (bytes), streaming it to stdout; returns tokens generated
static int generate_one(const Generator* g, const BPE* bpe, Sampler* sampler, const GenerateArgs* args, const char* prompt,
                        int echo_prompt, KVCheck* chk) {
    int maxT = g->kv->maxT;
    size_t plen = strlen(prompt);
    int* seq = (int*)mallocCheck(((size_t)maxT + plen + 1) * sizeof(int));
    int n_prompt = (int)bpe_encode(bpe, (const unsigned char*)prompt, plen, 1, seq);
    if (n_prompt == 0) { seq[n_prompt++] = bpe->eot_token; }   // no prompt: start a new document
    if (args->print_ids) { print_prompt_ids(seq, n_prompt); }
    if (n_prompt >= maxT) {
        llmc_die("-p: the prompt is %d tokens, the model's context is %d (it must leave room to generate)", n_prompt, maxT);
    }
    int budget = generate_budget(args, n_prompt, maxT);
    if (echo_prompt) {
        fwriteCheck(prompt, 1, plen, stdout, "stdout");
        fflush(stdout);
    }
    int made = generate_tokens(g, sampler, args, seq, n_prompt, budget, chk);
    free(seq);
    return made;
}

// ----------------------------------------------------------------------------
// Llama 3 generation: prompt ids in, decoded bytes out

// parses --ids ("id id ..." separated by spaces or commas) into ids; returns how many
static int llama3_parse_ids(const char* s, int* ids, int max, int V) {
    int n = 0;
    while (*s != '\0') {
        if (*s == ' ' || *s == ',') { s++; continue; }
        char* end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno != 0 || v < 0 || v >= V) { llmc_die("--ids: \"%s\" is not a token id in 0..%d", s, V - 1); }
        if (n == max) { llmc_die("--ids: more than %d ids: the prompt must leave room to generate", max); }
        ids[n++] = (int)v;
        s = end;
    }
    return n;
}

// Llama 3's cached forward and its token bytes (the tokenizer file's), for the Generator
static void llama3_forward_cached_(void* model, KVCache* kv, const int* tokens, int n) {
    llama3_forward_cached((Llama3*)model, kv, tokens, n);
}

static void llama3_write_token(void* tok, int id) {
    Tokenizer* t = (Tokenizer*)tok;
    fwriteCheck(tokenizer_decode(t, (uint32_t)id), 1, tokenizer_decode_length(t, (uint32_t)id), stdout, "stdout");
}

// a text prompt in ids: BOS, then the text encoded with Llama 3's BPE (special-token text stays text);
// dies when it leaves no room to generate in the context maxT. seq needs room for maxT ids.
static int llama3_encode_prompt(const BPE* bpe, const Tokenizer* tok, const char* text, int* seq, int maxT) {
    size_t len = strlen(text);
    int* ids = (int*)mallocCheck((len + 1) * sizeof(int));
    size_t n = bpe_encode(bpe, (const unsigned char*)text, len, 0, ids);
    if (n + 1 >= (size_t)maxT) {
        llmc_die("-p: the prompt is %zu tokens with BOS, the model's context is %d (it must leave room to generate)", n + 1, maxT);
    }
    seq[0] = tok->bos_token;
    memcpy(seq + 1, ids, n * sizeof(int));
    free(ids);
    return (int)n + 1;
}

// generates a continuation of the prompt seq[0..n_prompt), streaming it to stdout after the prompt's
// text (echo, or the decoded ids when echo is NULL); returns tokens generated
static int llama3_generate_one(const Generator* g, Tokenizer* tok, Sampler* sampler, const GenerateArgs* args,
                               int* seq, int n_prompt, const char* echo, KVCheck* chk) {
    if (args->print_ids) { print_prompt_ids(seq, n_prompt); }
    int budget = generate_budget(args, n_prompt, g->kv->maxT);
    if (echo != NULL) {
        fwriteCheck(echo, 1, strlen(echo), stdout, "stdout");
    } else {
        for (int i = 0; i < n_prompt; i++) {
            if (seq[i] != tok->bos_token) { llama3_write_token(tok, seq[i]); }
        }
    }
    fflush(stdout);
    return generate_tokens(g, sampler, args, seq, n_prompt, budget, chk);
}

// the prompts of -i: one per stdin line, without its newline, "> " before each when stdin is a terminal
typedef struct {
    char* line;
    size_t cap;
    int tty;
} PromptReader;

static void prompt_reader_init(PromptReader* r) {
    r->tty = isatty(fileno(stdin));
    r->cap = 256;
    r->line = (char*)mallocCheck(r->cap);
}

// the next prompt into r->line; returns 0 at end of input
static int prompt_reader_next(PromptReader* r) {
    if (r->tty) { fprintf(stderr, "> "); fflush(stderr); }
    size_t n = 0;
    int c;
    while ((c = getchar()) != EOF && c != '\n') {
        if (n + 1 >= r->cap) {
            r->cap *= 2;
            char* bigger = (char*)realloc(r->line, r->cap);
            if (bigger == NULL) { llmc_die("stdin: out of memory reading a line of %zu bytes", r->cap); }
            r->line = bigger;
        }
        r->line[n++] = (char)c;
    }
    r->line[n] = '\0';
    return !(c == EOF && n == 0);
}

// the whole run for a Llama 3 model file: returns the exit status
static int llama3_generate(const GenerateArgs* args) {
    int text = args->prompt[0] != '\0' || args->interactive;
    if (text && args->ids != NULL) { llmc_die("--ids: give the prompt either as text (-p, -i) or as token ids (--ids), not both"); }
    Llama3 model;
    llama3_build_from_file(&model, args->model_path);
    Llama3Config cfg = model.config;
    if (!file_exists(args->tokenizer_path)) {
        llmc_die("%s: no such Llama 3 tokenizer file (flag -t; python train_llama3.py writes llama3_tokenizer.bin)", args->tokenizer_path);
    }
    Tokenizer tok;
    tokenizer_init(&tok, args->tokenizer_path);
    if (tok.bos_token < 0) { llmc_die("%s: a GPT-2 tokenizer file, not a Llama 3 one (version 3)", args->tokenizer_path); }
    if ((int)tok.vocab_size != cfg.vocab_size) {
        llmc_die("%s: %u tokens, but the model %s has V = %d", args->tokenizer_path, tok.vocab_size, args->model_path, cfg.vocab_size);
    }
    BPE bpe;
    if (text) { bpe_init_llama3(&bpe, &tok, args->tokenizer_path); }
    int maxT = cfg.max_seq_len;
    int* seq = (int*)mallocCheck((size_t)maxT * sizeof(int));
    if (args->check_kv) { llama3_allocate_activations(&model, 1, maxT); }
    KVCache kv;
    kvcache_init(&kv, maxT, cfg.channels, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.ffn_hidden, cfg.vocab_size);
    Sampler sampler;
    sampler_init(&sampler, cfg.vocab_size, args->temperature, args->top_k, args->top_p, (uint64_t)args->seed);
    KVCheck chk = {0.0, 0};
    Generator g = {&model, &llama3_calls, &model.cpu, &kv, llama3_forward_cached_, tok.eot_token, llama3_write_token, &tok};
    double t0 = wall_seconds();
    int made = 0;
    if (args->interactive) {
        PromptReader prompts;
        prompt_reader_init(&prompts);
        while (prompt_reader_next(&prompts)) {
            int n_prompt = llama3_encode_prompt(&bpe, &tok, prompts.line, seq, maxT);
            made += llama3_generate_one(&g, &tok, &sampler, args, seq, n_prompt, NULL, &chk);
        }
        free(prompts.line);
    } else if (text) {
        int n_prompt = llama3_encode_prompt(&bpe, &tok, args->prompt, seq, maxT);
        made = llama3_generate_one(&g, &tok, &sampler, args, seq, n_prompt, args->prompt, &chk);
    } else {
        int n_prompt = args->ids != NULL ? llama3_parse_ids(args->ids, seq, maxT - 1, cfg.vocab_size) : 0;
        if (n_prompt == 0) { seq[n_prompt++] = tok.bos_token; }
        made = llama3_generate_one(&g, &tok, &sampler, args, seq, n_prompt, NULL, &chk);
    }
    double dt = wall_seconds() - t0;
    fprintf(stderr, "generated %d tokens in %.2f s (%.1f tokens/s)\n", made, dt, dt > 0 ? made / dt : 0.0);
    if (args->check_kv) {
        fprintf(stderr, "check-kv: %d steps, max |cached - full| logit difference %.3g\n", chk.checks, chk.max_diff);
    }
    free(seq);
    sampler_free(&sampler);
    kvcache_free(&kv);
    if (text) { bpe_free(&bpe); }
    tokenizer_free(&tok);
    llama3_free(&model);
    return 0;
}

static void print_usage(FILE* out) {
    fprintf(out,
        "usage: ./generate [options]\n"
        "  -e <path|dN>        GPT-2 or Llama 3 model file (default gpt2_124M.bin; `make model` writes it), or dN (GPT-2) from scratch\n"
        "  -b <path>           BPE ranks file (default gpt2_bpe.bin; `python dev/write_bpe.py` writes it)\n"
        "  -t <path>           Llama 3 models: tokenizer file that encodes and decodes (default llama3_tokenizer.bin)\n"
        "  --ids \"<id> ...\"    Llama 3 models: the prompt as token ids, instead of -p (default: BOS alone)\n"
        "  -p <text>           prompt (default: none, start of a document; Llama 3: BOS, then the text)\n"
        "  --print-ids         print the prompt's token ids to stderr (\"prompt ids: ...\")\n"
        "  -n <int>            tokens to generate (default 256; stops at the context length)\n"
        "  --temperature <f>   sampling temperature, 0 = greedy (default 1.0)\n"
        "  --top-k <int>       keep the k most likely tokens, 0 = off (default 0)\n"
        "  --top-p <f>         nucleus sampling threshold, 1.0 = off (default 1.0)\n"
        "  --seed <int>        sampler seed (default 1337); the same seed gives the same text\n"
        "  -i                  interactive: read prompts from stdin, one per line (each starts a fresh context)\n"
        "  --no-stop           keep going after <|endoftext|> (default: stop there)\n"
        "  --check-kv          verify the KV cache against a full recompute at every step (slow)\n"
        "  -h, --help          this help\n");
}

static const char* need_value(int argc, char** argv, int i) {
    if (i + 1 >= argc) { llmc_die("%s: missing value (see ./generate --help)", argv[i]); }
    return argv[i + 1];
}

static long parse_long_flag(const char* flag, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        llmc_die("%s: \"%s\" is not an integer in %ld..%ld", flag, s, lo, hi);
    }
    return v;
}

static float parse_float_flag(const char* flag, const char* s, float lo, float hi) {
    char* end;
    float v = strtof(s, &end);
    if (end == s || *end != '\0' || !(v >= lo && v <= hi)) { llmc_die("%s: \"%s\" is not a number in %g..%g", flag, s, lo, hi); }
    return v;
}

static void parse_args(int argc, char** argv, GenerateArgs* a) {
    a->model_path = "gpt2_124M.bin";
    a->bpe_path = "gpt2_bpe.bin";
    a->tokenizer_path = "llama3_tokenizer.bin";
    a->ids = NULL;
    a->prompt = "";
    a->print_ids = 0;
    a->num_tokens = 256;
    a->temperature = 1.0f;
    a->top_k = 0;
    a->top_p = 1.0f;
    a->seed = 1337;
    a->interactive = 0;
    a->check_kv = 0;
    a->stop_at_eot = 1;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) { print_usage(stdout); exit(0); }
        else if (strcmp(f, "-i") == 0) { a->interactive = 1; }
        else if (strcmp(f, "--check-kv") == 0) { a->check_kv = 1; }
        else if (strcmp(f, "--no-stop") == 0) { a->stop_at_eot = 0; }
        else if (strcmp(f, "--print-ids") == 0) { a->print_ids = 1; }
        else if (strcmp(f, "-e") == 0) { a->model_path = need_value(argc, argv, i); i++; }
        else if (strcmp(f, "-b") == 0) { a->bpe_path = need_value(argc, argv, i); i++; }
        else if (strcmp(f, "-t") == 0) { a->tokenizer_path = need_value(argc, argv, i); i++; }
        else if (strcmp(f, "--ids") == 0) { a->ids = need_value(argc, argv, i); i++; }
        else if (strcmp(f, "-p") == 0) { a->prompt = need_value(argc, argv, i); i++; }
        else if (strcmp(f, "-n") == 0) { a->num_tokens = (int)parse_long_flag(f, need_value(argc, argv, i), 1, 1 << 20); i++; }
        else if (strcmp(f, "--temperature") == 0) { a->temperature = parse_float_flag(f, need_value(argc, argv, i), 0.0f, 100.0f); i++; }
        else if (strcmp(f, "--top-k") == 0) { a->top_k = (int)parse_long_flag(f, need_value(argc, argv, i), 0, 1 << 20); i++; }
        else if (strcmp(f, "--top-p") == 0) { a->top_p = parse_float_flag(f, need_value(argc, argv, i), 0.0f, 1.0f); i++; }
        else if (strcmp(f, "--seed") == 0) { a->seed = (unsigned long long)parse_long_flag(f, need_value(argc, argv, i), 0, 0x7fffffffL); i++; }
        else {
            fprintf(stderr, "error: unknown argument \"%s\" (see ./generate --help)\n", f);
            exit(1);
        }
    }
}

int main(int argc, char** argv) {
    GenerateArgs args;
    parse_args(argc, argv, &args);
    if (llmc_model_file_magic(args.model_path) == LLAMA3_MAGIC) { return llama3_generate(&args); }
    if (args.ids != NULL) { llmc_die("--ids: token-id prompts are for Llama 3 models; %s is GPT-2 (use -p \"text\")", args.model_path); }

    // the model: a checkpoint, or a descriptor (dN, gpt2:dN, gpt3:cN) initialised from scratch
    GPT2 model;
    GPT2Config cfg;
    const char* why;
    int desc = gpt2_config_from_descriptor(args.model_path, &cfg, &why);
    if (desc < 0) { llmc_die("-e %s: %s", args.model_path, why); }
    if (desc == 1) {
        gpt2_build_from_scratch(&model, &cfg, 42);
        fprintf(stderr, "note: %s is initialised from scratch (seed 42): expect random text\n", args.model_path);
    } else {
        if (!file_exists(args.model_path)) {
            llmc_die("%s: checkpoint not found (`make model` writes gpt2_124M.bin; or pass -e dN for a random model)", args.model_path);
        }
        gpt2_build_from_checkpoint(&model, args.model_path);
    }
    if (args.check_kv) { gpt2_allocate_activations(&model, 1, model.config.max_seq_len); }

    BPE bpe;
    bpe_init(&bpe, args.bpe_path);
    if (bpe.eot_token >= model.config.vocab_size) {
        llmc_die("%s: vocabulary of %d tokens does not fit the model's %d", args.bpe_path, bpe.eot_token + 1, model.config.vocab_size);
    }
    KVCache kv;
    kvcache_init(&kv, model.config.max_seq_len, model.config.channels, model.config.num_layers, model.config.num_heads,
                 model.config.num_heads, 4 * model.config.channels, model.config.vocab_size);
    Sampler sampler;
    sampler_init(&sampler, model.config.vocab_size, args.temperature, args.top_k, args.top_p, (uint64_t)args.seed);
    KVCheck chk = { 0.0, 0 };
    Generator g = {&model, &gpt2_calls, &model.cpu, &kv, gpt2_forward_cached_, bpe.eot_token, gpt2_write_token, &bpe};

    double t0 = wall_seconds();
    int total = 0;
    if (args.interactive) {
        PromptReader prompts;
        prompt_reader_init(&prompts);
        while (prompt_reader_next(&prompts)) { total += generate_one(&g, &bpe, &sampler, &args, prompts.line, 0, &chk); }
        free(prompts.line);
    } else {
        total = generate_one(&g, &bpe, &sampler, &args, args.prompt, 1, &chk);
    }
    double dt = wall_seconds() - t0;
    fprintf(stderr, "generated %d tokens in %.2f s (%.1f tokens/s)\n", total, dt, dt > 0 ? total / dt : 0.0);
    if (args.check_kv) {
        fprintf(stderr, "check-kv: %d steps, max |cached - full| logit difference %.3g\n", chk.checks, chk.max_diff);
    }
    sampler_free(&sampler);
    kvcache_free(&kv);
    bpe_free(&bpe);
    gpt2_free(&model);
    return 0;
}
