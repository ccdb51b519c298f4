/*
generate: text generation from an llmc model file of any family in llmc/families.h on the CPU, with a KV cache.

    ./generate -e gpt2_124M.bin -p "The meaning of life is" -n 200 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1337
    ./generate -e gpt2_124M.bin -i          interactive: one prompt per stdin line
    ./generate -e llama3_d2.bin -t llama3_tokenizer.bin -p "ROMEO:"          a Llama 3 model
    ./generate -e llama3_d2.bin -t llama3_tokenizer.bin --ids "128000 791"   its prompt as token ids

The family comes from the model file's magic (llmc/model_family.h's model_family_by_magic over the families of
llmc/families.h; no model file, e.g. -e dN, is the first family's, GPT-2's). Each family brings only hooks and data
(llmc/cpu/generator.h's GenerateFamily, <name>_generate: the pre-norm decoders' are one set,
llmc/cpu/decoder_inference.h's, read from their descriptions; GPT-2's are at the end of llmc/cpu/gpt2_inference.h):
its model and tokenizer, its cached forward pass (over llmc/cpu/kv_cache.h), its prompt encoder, its token writer,
its start and end tokens; one generation loop runs every family. The prompt goes through the model once, then each new token costs
the forward pass of ONE position, not a recompute of the whole sequence. Tokens are drawn with llmc/sampler.h and
printed as they come (flushed per token). A fixed --seed gives the same text every run.

GPT-2 prompts are encoded with llmc/bpe.h (the same ids as tiktoken's gpt2; the text "<|endoftext|>" in a prompt
is the special token); no prompt is <|endoftext|> alone. The decoder families (Llama 3, nanochat, Qwen3) use their
tokenizer file (-t; llmc/tokenizer.h): it decodes, and its token bytes are the BPE ranks that encode a text prompt
(llmc/bpe.h with the family's pre-tokenizer pattern: the same ids as the `tokenizers` library on the tokenizer.json;
in Llama 3's and Qwen3's files, text that looks like a special token stays text). A Llama 3 text prompt starts
with BOS; --ids gives the ids as they are (default: the start token alone: BOS, else <|endoftext|>), and a prompt
not given as -p text (--ids, a line of -i) is printed decoded. Without the tokenizer file a decoder family takes
--ids prompts only, and prints the tokens as ids. --print-ids prints the prompt's ids to stderr.

--check-kv recomputes the whole sequence at every step in a second, fresh cache fed all of it in one pass (the
prompt path: GEMMs over every position) and compares its last-position logits with the incremental cache's (one
position at a time: matrix-vector products); it fails above 1e-4 (llmc/cpu/kv_cache.h's kv_check_step).

--chat talks to a model fine-tuned on chat shards (doc/chat.md) in its family's chat format (ModelFamily.chat_format,
rendered by llmc/chat.h with the same ids as pyllmc/chat.py), with the chat tokens of the tokenizer file -t (default:
the family's chat tokenizer file, gpt2_chat_tokenizer.bin for GPT-2's vocabulary, else its tokenizer file):

    ./generate -e model.bin --chat [--system "Be brief."]          typed turns after "you> "; /reset, /quit, ^D
    ./generate -e model.bin --chat -p "What is 2+2?"               one turn: the answer, then exit
    ./generate -e model.bin --chat --jsonl --temperature 0 < conversations.jsonl   an answer per JSON line (chat_eval.py)

The conversation stays in the KV cache: each turn appends the previous answer's end (its end token, as sampled or,
when -n cut the answer, appended; ChatML's "\n" after it), the user's turn and the generation prompt, and only those
go through the model. An answer ends at the format's end token (not printed), -n tokens or the model's context; a turn
that does not fit after the conversation starts it over (a line says so). --print-ids prints each turn's ids
("prompt ids:") and each answer's ("answer ids:") on stderr; --check-kv checks the whole conversation at every step.
A model whose V has no rows for the chat tokens (GPT-2 before fine-tuning, V = 50257) or a tokenizer file without
them is one error line.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmc/utils.h"
#include "llmc/model_family.h"
#include "llmc/sampler.h"
#include "llmc/cpu/generator.h"   // GenerateArgs, Generator, GenerateFamily
#define LLMC_WITH_FAMILY_INFERENCE // every family's description, inference and generate hooks
#include "llmc/families.h"

// ----------------------------------------------------------------------------
// the families (llmc/families.h), found by their model files' magic; the registry names each one's hooks

#define GENERATE_FAMILY_ROW_(name, description, gpu, refs, refs_dir) &name##_generate,
static const GenerateFamily* const GENERATE_FAMILIES[] = {LLMC_FAMILIES(GENERATE_FAMILY_ROW_)};
enum { NUM_GENERATE_FAMILIES = sizeof(GENERATE_FAMILIES) / sizeof(GENERATE_FAMILIES[0]) };

// the family of the model file at path; the registry's first family (the default model's) when it is none (a
// descriptor, a missing file, an unknown magic: that family's loader says which)
static const GenerateFamily* generate_family_of(const char* path) {
    const ModelFamily* families[NUM_GENERATE_FAMILIES];
    for (int i = 0; i < NUM_GENERATE_FAMILIES; i++) { families[i] = GENERATE_FAMILIES[i]->family; }
    const ModelFamily* f = model_family_by_magic(families, NUM_GENERATE_FAMILIES, llmc_model_file_magic(path));
    for (int i = 0; i < NUM_GENERATE_FAMILIES; i++) {
        if (GENERATE_FAMILIES[i]->family == f) { return GENERATE_FAMILIES[i]; }
    }
    return GENERATE_FAMILIES[0];
}

// ----------------------------------------------------------------------------
// the generation loop, one for every family

// "prompt ids: 1 2 3" on stderr (--print-ids)
static void print_prompt_ids(const int* ids, int n) {
    fprintf(stderr, "prompt ids:");
    for (int k = 0; k < n; k++) { fprintf(stderr, " %d", ids[k]); }
    fputc('\n', stderr);
}

// parses --ids ("id id ..." separated by spaces or commas) into ids; returns how many
static int parse_ids(const char* s, int* ids, int max, int V) {
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
// ids. With --check-kv (full: a second cache) each step's logits are checked. Returns the tokens generated.
static int generate_tokens(Generator* g, Sampler* sampler, const GenerateArgs* args, int* seq, int n_prompt,
                           int budget, KVCache* full, KVCheck* chk) {
    KVCache* kv = &g->kv;
    KVForwardFn forward = g->family->forward_cached;
    kv->pos = 0;
    forward(g->model, kv, seq, n_prompt);
    if (args->check_kv) { kv_check_step(chk, full, forward, g->model, kv, seq, n_prompt); }
    int T = n_prompt, made = 0;
    while (made < budget) {
        int next = sampler_sample(sampler, kv->logits);
        made++;
        if (next == g->end_token && args->stop_at_eot) { break; }
        g->family->write_token(g->tokenizer, next);
        fflush(stdout);
        seq[T++] = next;
        if (made == budget) { break; }
        forward(g->model, kv, &next, 1);
        if (args->check_kv) { kv_check_step(chk, full, forward, g->model, kv, seq, T); }
    }
    fputc('\n', stdout);
    fflush(stdout);
    return made;
}

// One prompt, continued on stdout: text (-p, a line of -i) encoded by the family, or ids (--ids); the start token
// alone when it is empty. echo_text: -p's text is printed before the continuation; otherwise the prompt's tokens
// are, decoded, when the family says so. Returns the tokens generated.
static int generate_prompt(Generator* g, Sampler* sampler, const GenerateArgs* args, const char* text, const char* ids,
                           int echo_text, KVCache* full, KVCheck* chk) {
    int maxT = g->kv.maxT;
    size_t len = strlen(text);
    int* seq = (int*)mallocCheck(((size_t)maxT + len + 1) * sizeof(int));
    int n_prompt = 0;
    if (ids != NULL) { n_prompt = parse_ids(ids, seq, maxT - 1, g->vocab_size); }
    else if (len > 0) { n_prompt = g->family->encode(g->tokenizer, text, seq, maxT); }
    if (n_prompt == 0) { seq[n_prompt++] = g->start_token; }   // no prompt: start a new document
    if (args->print_ids) { print_prompt_ids(seq, n_prompt); }
    if (n_prompt >= maxT) {
        llmc_die("-p: the prompt is %d tokens, the model's context is %d (it must leave room to generate)", n_prompt, maxT);
    }
    int budget = generate_budget(args, n_prompt, maxT);
    if (echo_text) {
        fwriteCheck(text, 1, len, stdout, "stdout");
    } else if (g->family->echo_prompt_tokens) {
        for (int i = 0; i < n_prompt; i++) {
            if (seq[i] != g->start_token) { g->family->write_token(g->tokenizer, seq[i]); }
        }
    }
    fflush(stdout);
    int made = generate_tokens(g, sampler, args, seq, n_prompt, budget, full, chk);
    free(seq);
    return made;
}

// the prompts of -i (and --chat's turns, --jsonl's lines): one per stdin line, without its newline, the prompt
// ("> ", "you> ") before each on stderr when stdin is a terminal
typedef struct {
    char* line;
    size_t cap;
    int tty;
    const char* prompt;
} PromptReader;

static void prompt_reader_init(PromptReader* r, const char* prompt) {
    r->tty = isatty(fileno(stdin));
    r->cap = 256;
    r->line = (char*)mallocCheck(r->cap);
    r->prompt = prompt;
}

// the next prompt into r->line; returns 0 at end of input
static int prompt_reader_next(PromptReader* r) {
    if (r->tty && r->prompt != NULL) { fprintf(stderr, "%s", r->prompt); fflush(stderr); }
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


// ----------------------------------------------------------------------------
// --chat: a conversation in the family's chat format (llmc/chat.h), its ids kept in the KV cache across turns

// an answer's bytes (--jsonl), or NULL to stream them to stdout
typedef struct {
    char* bytes;
    size_t n, cap;
} ChatText;

static void chat_text_append(ChatText* t, const char* bytes, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap > 0 ? t->cap : 256;
        while (cap < t->n + n + 1) { cap *= 2; }
        char* bigger = (char*)realloc(t->bytes, cap);
        if (bigger == NULL) { llmc_die("--chat: out of memory for an answer of %zu bytes", cap); }
        t->bytes = bigger;
        t->cap = cap;
    }
    memcpy(t->bytes + t->n, bytes, n);
    t->n += n;
}

typedef struct {
    Generator* g;
    Sampler* sampler;
    const GenerateArgs* args;
    KVCache* full;      // --check-kv's cache
    KVCheck* chk;
    ChatIds seq;        // the conversation: seq.ids[0..kv.pos) are in the cache; the rest, the last answer's last
                        // token and its end (chat_render_answer_end), go in with the next turn
    int turn_start;     // where the ids of the next turn begin in seq: the last answer's end (--print-ids)
    int made;           // tokens sampled in every turn
    int interactive;    // turns typed in: notes say what the next turn does
    int notes;          // an answer cut short says so on stderr (not with --jsonl: its "ended" says it)
} ChatSession;

// a new conversation: an empty cache
static void chat_session_reset(ChatSession* s) {
    s->seq.n = 0;
    s->turn_start = 0;
    s->g->kv.pos = 0;
}

// "prompt ids: ..." or "answer ids: ..." on stderr (--print-ids)
static void chat_print_ids(const char* what, const int* ids, int n) {
    fprintf(stderr, "%s ids:", what);
    for (int k = 0; k < n; k++) { fprintf(stderr, " %d", ids[k]); }
    fputc('\n', stderr);
}

// token id's bytes: into answer, or to stdout (flushed) when answer is NULL
static void chat_write_token(const ChatSession* s, int id, ChatText* answer) {
    const Tokenizer* tok = &s->g->chat->tok;
    const char* bytes = tokenizer_decode(tok, (uint32_t)id);
    size_t n = tokenizer_decode_length(tok, (uint32_t)id);
    if (bytes == NULL) { return; }  // an id past the tokenizer's vocabulary (a padded V): no text
    if (answer != NULL) { chat_text_append(answer, bytes, n); return; }
    fwriteCheck(bytes, 1, n, stdout, "stdout");
    fflush(stdout);
}

// Feeds the cache the conversation's ids it lacks (the new turn, rendered into seq up to the generation prompt), then
// generates the answer: each token into answer or streamed, until the end token, -n tokens or the model's context;
// then appends the answer's end to seq (the sampled end token, or the one it did not reach: said on stderr). Sets
// *ended when the model ended the answer itself. Returns the answer's tokens.
static int chat_answer(ChatSession* s, ChatText* answer, int* ended) {
    Generator* g = s->g;
    const GenerateArgs* args = s->args;
    const ChatFormat* fmt = &g->chat->chat;
    KVCache* kv = &g->kv;
    KVForwardFn forward = g->family->forward_cached;
    if (args->print_ids) { chat_print_ids("prompt", s->seq.ids + s->turn_start, s->seq.n - s->turn_start); }
    forward(g->model, kv, s->seq.ids + kv->pos, s->seq.n - kv->pos);
    if (args->check_kv) { kv_check_step(s->chk, s->full, forward, g->model, kv, s->seq.ids, s->seq.n); }
    int room = kv->maxT - s->seq.n;  // every sampled token but the last is fed: the cache ends at maxT - 1 at most
    int budget = args->num_tokens < room ? args->num_tokens : room;
    int first = s->seq.n, made = 0;
    *ended = 0;
    while (made < budget) {
        int next = sampler_sample(s->sampler, kv->logits);
        made++;
        if (next == fmt->end) { *ended = 1; break; }
        chat_ids_push(&s->seq, next);
        chat_write_token(s, next, answer);
        if (made == budget) { break; }
        forward(g->model, kv, &next, 1);
        if (args->check_kv) { kv_check_step(s->chk, s->full, forward, g->model, kv, s->seq.ids, s->seq.n); }
    }
    s->made += made;
    if (answer == NULL) { fputc('\n', stdout); fflush(stdout); }
    int n_answer = s->seq.n - first;
    if (args->print_ids) { chat_print_ids("answer", s->seq.ids + first, n_answer); }
    if (!*ended && s->notes && budget == room) {
        fprintf(stderr, "note: the answer filled the model's context of %d tokens%s\n", kv->maxT,
                s->interactive ? ": the next turn starts a new chat" : "");
    } else if (!*ended && s->notes) {
        fprintf(stderr, "note: the answer reached -n %d tokens before its end token%s\n", args->num_tokens,
                s->interactive ? " (the end token is appended to the conversation)" : "");
    }
    s->turn_start = s->seq.n;
    chat_render_answer_end(fmt, &g->chat->bpe, &s->seq);
    return n_answer;
}

// the user turn (with the generation prompt) appended to the conversation, the first turn with the system message
static void chat_render_turn(ChatSession* s, const char* user, size_t len) {
    const GenerateTokenizer* t = s->g->chat;
    const char* system = s->args->system;
    chat_render_user_turn(&t->chat, &t->bpe, system, system != NULL ? strlen(system) : 0, user, len, s->seq.n == 0,
                          &s->seq);
    chat_render_generation_prompt(&t->chat, &t->bpe, &s->seq);
}

// One user turn of the conversation, answered into answer (NULL: streamed). When the conversation leaves no room in
// the context for the turn and one token of answer, a line says so and the chat starts over from this turn. Returns
// the answer's tokens, or -1 when the turn alone does not fit (why: the error line; the conversation is then empty).
static int chat_turn(ChatSession* s, const char* user, size_t len, ChatText* answer, int* ended, char* why, size_t size) {
    int maxT = s->g->kv.maxT;
    int had = s->seq.n;
    chat_render_turn(s, user, len);
    if (s->seq.n >= maxT && had > 0) {
        fprintf(stderr, "note: the context of %d tokens is full: the chat starts over from this turn\n", maxT);
        chat_session_reset(s);
        chat_render_turn(s, user, len);
    }
    if (s->seq.n >= maxT) {
        snprintf(why, size, "the turn is %d tokens, the model's context is %d (it must leave room to answer)", s->seq.n, maxT);
        chat_session_reset(s);
        *ended = 0;
        return -1;
    }
    return chat_answer(s, answer, ended);
}

// -p with --chat: one turn, its answer on stdout
static void chat_one_turn(ChatSession* s, const char* text) {
    char why[256];
    int ended;
    if (chat_turn(s, text, strlen(text), NULL, &ended, why, sizeof(why)) < 0) { llmc_die("-p: %s", why); }
}

// 1 when line is the command (blanks around it allowed)
static int chat_is_command(const char* line, const char* command) {
    line += strspn(line, " \t\r");
    size_t n = strlen(command);
    return strncmp(line, command, n) == 0 && line[n + strspn(line + n, " \t\r")] == '\0';
}

// --chat without -p: turns typed in ("you> " when stdin is a terminal); /reset, /quit, end of input
static void chat_interactive(ChatSession* s, const char* model_path) {
    PromptReader turns;
    prompt_reader_init(&turns, "you> ");
    if (turns.tty) {
        fprintf(stderr, "chat with %s (%s format): /reset starts a new conversation, /quit or end of input ends it\n",
                model_path, s->g->chat->chat.name);
    }
    while (prompt_reader_next(&turns)) {
        const char* line = turns.line;
        if (chat_is_command(line, "/quit")) { break; }
        if (chat_is_command(line, "/reset")) {
            chat_session_reset(s);
            fprintf(stderr, "(a new conversation)\n");
            continue;
        }
        if (line[0] == '\0') { continue; }
        char why[256];
        int ended;
        if (chat_turn(s, line, strlen(line), NULL, &ended, why, sizeof(why)) < 0) { fprintf(stderr, "error: %s\n", why); }
    }
    free(turns.line);
}

// --jsonl: a conversation per stdin line ({"messages": [...]}, ending with a user turn), each answered from a fresh
// cache, one JSON line each on stdout: {"answer": TEXT, "ended": true|false, "tokens": N} (ended: the model ended the
// answer with its end token), or with "error" when the conversation leaves no room to answer. A line that is not
// such a conversation is one error line naming it. Blank lines are skipped.
static void chat_jsonl(ChatSession* s) {
    PromptReader lines;
    prompt_reader_init(&lines, NULL);
    ChatText answer = {NULL, 0, 0};
    const GenerateTokenizer* t = s->g->chat;
    for (int line_no = 1; prompt_reader_next(&lines); line_no++) {
        const char* line = lines.line;
        if (line[strspn(line, " \t\r")] == '\0') { continue; }
        ChatConversation c = {NULL, 0};
        const char* why;
        if (!chat_conversation_read_json(&c, line, strlen(line), &why) || !chat_conversation_check(&c, &why)) {
            llmc_die("stdin:%d: %s", line_no, why);
        }
        chat_session_reset(s);
        chat_render_conversation(&t->chat, &t->bpe, &c, &s->seq);
        chat_conversation_free(&c);
        answer.n = 0;
        int ended = 0, tokens = 0, rendered = s->seq.n, fits = rendered < s->g->kv.maxT;
        if (fits) { tokens = chat_answer(s, &answer, &ended); }
        fputs("{\"answer\": ", stdout);
        json_write_string(stdout, answer.bytes != NULL ? answer.bytes : "", answer.n);
        fprintf(stdout, ", \"ended\": %s, \"tokens\": %d", ended ? "true" : "false", tokens);
        if (!fits) {
            char why_line[160];
            snprintf(why_line, sizeof(why_line), "the conversation is %d tokens, the model's context is %d (it must "
                     "leave room to answer)", rendered, s->g->kv.maxT);
            fputs(", \"error\": ", stdout);
            json_write_string(stdout, why_line, strlen(why_line));
        }
        fputs("}\n", stdout);
        fflush(stdout);
    }
    free(answer.bytes);
    free(lines.line);
}

// ----------------------------------------------------------------------------
// the command line

static void print_usage(FILE* out) {
    fprintf(out,
        "usage: ./generate [options]\n"
        "  -e <path|dN>        model file of any family (default gpt2_124M.bin; `make model` writes it), or dN (GPT-2) from scratch\n"
        "  -b <path>           BPE ranks file (default gpt2_bpe.bin; `python dev/write_bpe.py` writes it)\n"
        "  -t <path>           Llama 3, nanochat, Qwen3 models: tokenizer file that encodes and decodes (default\n"
        "                      llama3_tokenizer.bin, nanochat_tokenizer.bin, qwen3_tokenizer.bin); with --chat, every\n"
        "                      model: the one with the chat tokens (default GPT-2, nanochat: gpt2_chat_tokenizer.bin)\n"
        "  --ids \"<id> ...\"    Llama 3, nanochat, Qwen3 models: the prompt as token ids, instead of -p (default: BOS alone)\n"
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
        "  --chat              chat in the family's chat format (doc/chat.md), the KV cache kept across turns: typed\n"
        "                      in (\"you> \"; /reset starts over, /quit or end of input ends), or one turn with -p; each\n"
        "                      answer ends at the format's end token or -n tokens (greedy: --temperature 0)\n"
        "  --system <text>     with --chat: the system message of the conversation\n"
        "  --jsonl             with --chat: conversations on stdin, one JSON line each ({\"messages\": [{\"role\",\n"
        "                      \"content\"}, ...]} ending with a user turn), each answered from an empty cache as one\n"
        "                      JSON line on stdout: {\"answer\", \"ended\" (at the end token), \"tokens\"}\n"
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

// the flags --chat refuses and the ones only --chat takes: one error line each
static void check_chat_args(const GenerateArgs* a) {
    if (!a->chat) {
        if (a->system != NULL) { llmc_die("--system: a system message is for --chat"); }
        if (a->jsonl) { llmc_die("--jsonl: conversations as JSON lines are for --chat"); }
        return;
    }
    if (a->ids != NULL) { llmc_die("--ids: --chat renders its turns from text (-p, or typed in), not from token ids"); }
    if (a->interactive) { llmc_die("-i: --chat without -p is interactive already (one turn per line)"); }
    if (!a->stop_at_eot) { llmc_die("--no-stop: a chat's answers end at their end token"); }
    if (a->jsonl && a->prompt[0] != '\0') { llmc_die("--jsonl: the conversations come on stdin, not with -p"); }
    if (a->jsonl && a->system != NULL) { llmc_die("--jsonl: give each conversation's system message in its \"messages\""); }
}

static void parse_args(int argc, char** argv, GenerateArgs* a) {
    a->model_path = "gpt2_124M.bin";
    a->bpe_path = "gpt2_bpe.bin";
    a->tokenizer_path = NULL;  // the family's
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
    a->chat = 0;
    a->system = NULL;
    a->jsonl = 0;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) { print_usage(stdout); exit(0); }
        else if (strcmp(f, "-i") == 0) { a->interactive = 1; }
        else if (strcmp(f, "--check-kv") == 0) { a->check_kv = 1; }
        else if (strcmp(f, "--no-stop") == 0) { a->stop_at_eot = 0; }
        else if (strcmp(f, "--print-ids") == 0) { a->print_ids = 1; }
        else if (strcmp(f, "--chat") == 0) { a->chat = 1; }
        else if (strcmp(f, "--jsonl") == 0) { a->jsonl = 1; }
        else if (strcmp(f, "--system") == 0) { a->system = need_value(argc, argv, i); i++; }
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
    check_chat_args(a);
}


int main(int argc, char** argv) {
    GenerateArgs args;
    parse_args(argc, argv, &args);
    Generator g;
    g.family = generate_family_of(args.model_path);
    if (args.ids != NULL && g.family->no_ids != NULL) { llmc_die(g.family->no_ids, args.model_path); }
    int text = args.prompt[0] != '\0' || args.interactive || args.chat;
    if (text && args.ids != NULL) { llmc_die("--ids: give the prompt either as text (-p, -i) or as token ids (--ids), not both"); }
    g.family->open(&g, &args, text);
    KVCache full;   // --check-kv: the full recompute's cache
    if (args.check_kv) { kvcache_init_like(&full, &g.kv); }
    Sampler sampler;
    sampler_init(&sampler, g.vocab_size, args.temperature, args.top_k, args.top_p, (uint64_t)args.seed);
    KVCheck chk = {0.0, 0};

    double t0 = wall_seconds();
    int made = 0;
    if (args.chat) {
        ChatSession chat = {&g, &sampler, &args, &full, &chk, {NULL, 0, 0}, 0, 0, args.prompt[0] == '\0' && !args.jsonl,
                            !args.jsonl};
        if (args.jsonl) { chat_jsonl(&chat); }
        else if (args.prompt[0] != '\0') { chat_one_turn(&chat, args.prompt); }
        else { chat_interactive(&chat, args.model_path); }
        made = chat.made;
        chat_ids_free(&chat.seq);
    } else if (args.interactive) {
        PromptReader prompts;
        prompt_reader_init(&prompts, "> ");
        while (prompt_reader_next(&prompts)) { made += generate_prompt(&g, &sampler, &args, prompts.line, NULL, 0, &full, &chk); }
        free(prompts.line);
    } else {
        made = generate_prompt(&g, &sampler, &args, args.prompt, args.ids, args.ids == NULL, &full, &chk);
    }
    double dt = wall_seconds() - t0;
    fprintf(stderr, "generated %d tokens in %.2f s (%.1f tokens/s)\n", made, dt, dt > 0 ? made / dt : 0.0);
    if (args.check_kv) {
        fprintf(stderr, "check-kv: %d steps, max |cached - full| logit difference %.3g\n", chk.checks, chk.max_diff);
        kvcache_free(&full);
    }
    sampler_free(&sampler);
    kvcache_free(&g.kv);
    g.family->close(g.state);
    return 0;
}
