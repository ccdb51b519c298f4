/*
llmc/cpu/generator.h: what generate.c needs of a model family, and what it hands each family. Each family has its
GenerateFamily, <name>_generate (the pre-norm decoders': llmc/cpu/decoder_inference.h's DECODER_GENERATE, named in
llmc/families.h; GPT-2's at the end of llmc/cpu/gpt2_inference.h); generate.c lists them from llmc/families.h and
tells them apart by their model files' magic.

    GenerateArgs          generate's command line (generate.c parses it)
    Generator             a model ready to generate, whatever its family: filled by the family's open hook
    GenerateFamily        a family's hooks and data: open, the cached forward pass, the prompt encoder, the token
                          writer, close
    generator_set(g, model, V, start, end, tokenizer, state)
    GenerateTokenizer     a tokenizer file (llmc/tokenizer.h) that decodes and, for text prompts, the BPE ranks
                          taken from it (llmc/bpe.h) that encode; generate_tokenizer_write_token prints a token's
                          bytes (" <id>" where the file is missing or does not have the id), generate_tokenizer_free
*/
#ifndef LLMC_CPU_GENERATOR_H
#define LLMC_CPU_GENERATOR_H

#include <stdio.h>
#include <stdlib.h>

#include "../utils.h"
#include "../model_family.h"
#include "../tokenizer.h"
#include "../bpe.h"
#include "kv_cache.h"

// the command line's settings
typedef struct {
    const char* model_path;
    const char* bpe_path;
    const char* tokenizer_path;  // the tokenizer file that decodes, for the families that read one (NULL: the family's own)
    const char* ids;             // the prompt as token ids
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

// A model ready to generate, whatever its family: what the generation loop reads besides the family's hooks.
// The family's open hook fills it (generator_set).
typedef struct GenerateFamily GenerateFamily;
typedef struct {
    const GenerateFamily* family;
    const void* model;              // the family's inference struct (GPT2Inference, DecoderInference)
    KVCache kv;                     // the model's cache, its whole context
    int vocab_size;                 // V: the logits sampled, the ids --ids takes
    int start_token;                // the prompt when there is none (GPT-2 <|endoftext|>, Llama 3 BOS); never echoed
    int end_token;                  // the token that ends a document
    const void* tokenizer;          // what the family's encode and write_token read
    void* state;                    // what open made, for close
} Generator;

// A family, as generate sees it: its description (the magic of its model files), its hooks and its data.
struct GenerateFamily {
    const ModelFamily* family;
    const char* no_ids;        // the error line of --ids when the family takes no token-id prompts (%s: -e), else NULL
    int echo_prompt_tokens;    // a prompt not given as -p text (--ids, a line of -i) is printed decoded (else not at all)
    // the model of -e, its tokenizer (the encoder only when text: a prompt comes as text), the cache; one error line each
    void (*open)(Generator* g, const GenerateArgs* args, int text);
    KVForwardFn forward_cached;    // the cached forward pass (llmc/cpu/kv_cache.h)
    // a text prompt's ids into seq (room for maxT + strlen(text) ids); may die when they leave no room in maxT
    int (*encode)(const void* tokenizer, const char* text, int* seq, int maxT);
    void (*write_token)(const void* tokenizer, int id);   // the token's bytes to stdout
    void (*close)(void* state);    // frees what open made (the model, the tokenizer, state itself)
};

static void generator_set(Generator* g, const void* model, int vocab_size, int start_token, int end_token,
                          const void* tokenizer, void* state) {
    Generator set = {g->family, model, g->kv, vocab_size, start_token, end_token, tokenizer, state};
    *g = set;
}

// a tokenizer file that decodes (tok.init_ok = 0: none was read) and the BPE ranks that encode text prompts
typedef struct {
    Tokenizer tok;
    BPE bpe;        // for text prompts only
    int has_bpe;
} GenerateTokenizer;

// the token's bytes to stdout; " <id>" without a tokenizer file, or for a padding id past its vocabulary
static void generate_tokenizer_write_token(const void* tokenizer, int id) {
    const Tokenizer* t = &((const GenerateTokenizer*)tokenizer)->tok;
    if (!t->init_ok || id >= (int)t->vocab_size) {
        printf(" <%d>", id);
        return;
    }
    fwriteCheck(tokenizer_decode(t, (uint32_t)id), 1, tokenizer_decode_length(t, (uint32_t)id), stdout, "stdout");
}

static void generate_tokenizer_free(GenerateTokenizer* t) {
    if (t->has_bpe) { bpe_free(&t->bpe); }
    tokenizer_free(&t->tok);
}

#endif // LLMC_CPU_GENERATOR_H
