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
    generate_tokenizer_encoder(t, path, pattern, otherwise)   the BPE ranks of its vocabulary, split with pattern
    generate_chat_tokenizer_path(family, args), generate_tokenizer_open_chat(t, family, path, model_path, V)
                          --chat: the tokenizer file with the family's chat tokens (llmc/chat.h), found and checked
                          against the model's V (open hooks call it and set Generator.chat)
*/
#ifndef LLMC_CPU_GENERATOR_H
#define LLMC_CPU_GENERATOR_H

#include <stdio.h>
#include <stdlib.h>

#include "../utils.h"
#include "../model_family.h"
#include "../tokenizer.h"
#include "../bpe.h"
#include "../chat.h"
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
    int chat;                    // --chat: a conversation in the family's chat format (llmc/chat.h)
    const char* system;          // --system: the chat's system message (NULL: none)
    int jsonl;                   // --jsonl: conversations on stdin, one JSON line each, answers as JSON lines
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
    const struct GenerateTokenizer* chat;  // --chat: the tokenizer file, its encoder and chat format (else NULL)
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
    Generator set = {g->family, model, g->kv, vocab_size, start_token, end_token, tokenizer, state, NULL};
    *g = set;
}

// a tokenizer file that decodes (tok.init_ok = 0: none was read) and the BPE ranks that encode text prompts
typedef struct GenerateTokenizer {
    Tokenizer tok;
    BPE bpe;        // for text prompts only
    int has_bpe;
    ChatFormat chat;  // --chat: the family's chat format, its tokens' ids in tok
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

// The BPE ranks of t->tok's vocabulary (read from path) that encode text split with pattern, into t->bpe. GPT-2's
// pattern needs GPT-2's vocabulary (its ids below <|endoftext|> = 50256 are the ranks): otherwise one error line that
// ends with `otherwise`; the other patterns a tokenizer file in Llama 3's layout (version 3)
static void generate_tokenizer_encoder(GenerateTokenizer* t, const char* path, int pattern, const char* otherwise) {
    if (pattern == BPE_PATTERN_GPT2) {
        if (t->tok.eot_token != TOKENIZER_V1_EOT || t->tok.bos_token >= 0) {
            llmc_die("%s: text prompts need GPT-2's vocabulary (<|endoftext|> = 50256); %s", path, otherwise);
        }
        bpe_init_from_tokenizer(&t->bpe, &t->tok, path, t->tok.eot_token, pattern);
    } else {
        bpe_init_tokenizer_v3(&t->bpe, &t->tok, path, pattern);
    }
    t->has_bpe = 1;
}

// --chat's tokenizer file: -t, else the family's chat tokenizer file, else its tokenizer file
static const char* generate_chat_tokenizer_path(const ModelFamily* family, const GenerateArgs* args) {
    if (args->tokenizer_path != NULL) { return args->tokenizer_path; }
    return family->chat_tokenizer_path != NULL ? family->chat_tokenizer_path : family->tokenizer_path;
}

// --chat: the tokenizer file at path into t for a model (model_path) of V tokens: it decodes the answers, its BPE
// ranks encode the turns, and it holds the family's chat tokens (llmc/chat.h), which the model's V must hold too.
// One error line for each way it can fail: no file, not the family's kind of file, a chat token missing, chat tokens
// the model has no rows for (a base model, before fine-tuning on chat shards), more tokens than V
static void generate_tokenizer_open_chat(GenerateTokenizer* t, const ModelFamily* family, const char* path,
                                         const char* model_path, int V) {
    if (!file_exists(path) && family->chat_tokenizer_path != NULL) {  // GPT-2's vocabulary
        llmc_die("%s: no such tokenizer file (flag -t; python train_gpt2.py writes " GPT2_CHAT_TOKENIZER_PATH ", GPT-2's "
                 "with the chat tokens, beside gpt2_tokenizer.bin: doc/chat.md)", path);
    }
    if (!file_exists(path)) {
        llmc_die("%s: no such tokenizer file (flag -t; python %s writes it, with the %s chat tokens when its "
                 "tokenizer.json has them: doc/chat.md)", path, family->reference, family->chat_format);
    }
    tokenizer_init(&t->tok, path);
    if (family->tokenizer_pattern != BPE_PATTERN_GPT2 && t->tok.bos_token < 0) {
        llmc_die("%s: a GPT-2 tokenizer file, not a %s one (version 3)", path, family->name);
    }
    chat_format_find(&t->chat, family->chat_format, &t->tok, path);
    int top = chat_format_max_id(&t->chat);
    if (top >= V) {
        llmc_die("%s: the model's vocabulary has no chat tokens (V = %d; %s has them up to id %d): fine-tune it on chat "
                 "shards first (doc/chat.md)", model_path, V, path, top);
    }
    if ((int)t->tok.vocab_size > V) {
        llmc_die("%s: %u tokens, more than the model %s has (V = %d)", path, t->tok.vocab_size, model_path, V);
    }
    generate_tokenizer_encoder(t, path, family->tokenizer_pattern,
                               "--chat encodes text with GPT-2's vocabulary or a tokenizer file in Llama 3's layout");
}

#endif // LLMC_CPU_GENERATOR_H
