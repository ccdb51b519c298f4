/*
llmc/chat.h: the chat formats in C, one per family (ModelFamily.chat_format; doc/chat.md): a conversation of
messages rendered to token ids exactly as pyllmc/chat.py renders it, so a model fine-tuned on chat shards
(dev/data/chat.py) is prompted in C with the ids it was trained on. generate --chat runs it.

    ChatFormat                       a format and its special tokens' ids in one tokenizer's vocabulary
    chat_format_find(f, name, tok, path)   the format name ("nanochat", "llama3", "chatml") with its special tokens
                                     found by their strings in the tokenizer file tok (read from path); one error line
                                     naming the file and the token it lacks
    chat_format_max_id(f)            the largest special id (the model's V must hold it)
    ChatIds                          a growable list of ids: chat_ids_push, chat_ids_encode (enc(text)), chat_ids_free
    chat_render_start(f, out)        the conversation's first tokens: [bos] (nanochat, llama3), none (chatml)
    chat_render_message(f, bpe, role, content, n, out)   one message
    chat_render_generation_prompt(f, bpe, out)           what opens the assistant's answer
    chat_render_answer_end(f, bpe, out)                  what closes it after its content (its end token, ...)
    chat_render_user_turn(f, bpe, system, user, first, out)   a user turn as generate's chat appends it
    ChatMessage, ChatConversation, chat_conversation_read_json(c, line, len, why), chat_conversation_free,
    chat_conversation_check(c, why)  a conversation given as JSON ({"messages": [{"role", "content"}, ...]}),
                                     checked for generation: it ends with a user turn
    chat_render_conversation(f, bpe, c, out)             a conversation and the generation prompt after it

The formats (chat_spec of issue 47; enc() is the family's encoder, llmc/bpe.h, on each piece separately, text that
looks like a special token staying text):
  nanochat (GPT-2, nanochat's GPT): [<|bos|>], then per message user: [<|user_start|>] enc(content) [<|user_end|>],
      assistant: [<|assistant_start|>] enc(content) [<|assistant_end|>]. A system message's content + "\n\n" is
      put before the first user message's content. <|bos|> is the vocabulary's "<|bos|>", else its "<|endoftext|>"
      (GPT-2's vocabulary: 50256; the chat tokens follow it at 50257..50260 in gpt2_chat_tokenizer.bin).
      Generation prompt: [<|assistant_start|>]; the answer ends at <|assistant_end|>.
  llama3: [<|begin_of_text|>], then per message [<|start_header_id|>] enc(role) [<|end_header_id|>] enc("\n\n")
      enc(content) [<|eot_id|>] (a system message too). Generation prompt: [<|start_header_id|>] enc("assistant")
      [<|end_header_id|>] enc("\n\n"); the answer ends at <|eot_id|>.
  chatml (Qwen3): no first token; per message [<|im_start|>] enc(role + "\n") enc(content) [<|im_end|>] enc("\n")
      (a system message too). Generation prompt: [<|im_start|>] enc("assistant\n"); the answer ends at <|im_end|>.
In every format an assistant message is the generation prompt, enc(content) and chat_render_answer_end: a chat that
appends its answers' ids as generated and then their end keeps the conversation's template.
*/
#ifndef LLMC_CHAT_H
#define LLMC_CHAT_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"
#include "tokenizer.h"
#include "bpe.h"
#include "json.h"

typedef enum { CHAT_FORMAT_NANOCHAT, CHAT_FORMAT_LLAMA3, CHAT_FORMAT_CHATML } ChatFormatKind;
typedef enum { CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT } ChatRole;
static const char* const CHAT_ROLE_NAMES[] = {"system", "user", "assistant"};

typedef struct {
    ChatFormatKind kind;
    const char* name;       // "nanochat", "llama3", "chatml" (ModelFamily.chat_format, pyllmc/chat.py's)
    int bos;                // the conversation's first token (<|bos|>, <|begin_of_text|>); -1: none (chatml)
    int user_start, user_end, assistant_start;  // nanochat's; -1 in the others
    int header_start, header_end;               // llama3's <|start_header_id|> and <|end_header_id|>; -1 in the others
    int message_start;                          // chatml's <|im_start|>; -1 in the others
    int end;                // the token that ends an answer: <|assistant_end|>, <|eot_id|>, <|im_end|>
} ChatFormat;

// a format's special tokens: the string each is found by and the field its id goes to
typedef struct {
    const char* text;
    size_t field;  // offsetof(ChatFormat, ...)
} ChatTokenName;

static const ChatTokenName CHAT_NANOCHAT_TOKENS[] = {
    {"<|user_start|>", offsetof(ChatFormat, user_start)}, {"<|user_end|>", offsetof(ChatFormat, user_end)},
    {"<|assistant_start|>", offsetof(ChatFormat, assistant_start)}, {"<|assistant_end|>", offsetof(ChatFormat, end)}};
static const ChatTokenName CHAT_LLAMA3_TOKENS[] = {
    {"<|begin_of_text|>", offsetof(ChatFormat, bos)}, {"<|start_header_id|>", offsetof(ChatFormat, header_start)},
    {"<|end_header_id|>", offsetof(ChatFormat, header_end)}, {"<|eot_id|>", offsetof(ChatFormat, end)}};
static const ChatTokenName CHAT_CHATML_TOKENS[] = {
    {"<|im_start|>", offsetof(ChatFormat, message_start)}, {"<|im_end|>", offsetof(ChatFormat, end)}};

// the id of the token whose bytes are text in tok (the last one: special tokens follow the ordinary ones), or -1
static inline int chat_token_id(const Tokenizer* tok, const char* text) {
    size_t n = strlen(text);
    for (int i = (int)tok->vocab_size - 1; i >= 0; i--) {
        if (tok->token_lengths[i] == n && memcmp(tok->token_table[i], text, n) == 0) { return i; }
    }
    return -1;
}

static inline void chat_find_tokens(ChatFormat* f, const ChatTokenName* names, int n, const Tokenizer* tok,
                                    const char* path) {
    for (int k = 0; k < n; k++) {
        int id = chat_token_id(tok, names[k].text);
        if (id < 0) {
            llmc_die("%s: the tokenizer has no %s token, which the %s chat format needs (a chat tokenizer file: "
                     "doc/chat.md)", path, names[k].text, f->name);
        }
        *(int*)((char*)f + names[k].field) = id;
    }
}

static inline void chat_format_find(ChatFormat* f, const char* name, const Tokenizer* tok, const char* path) {
    ChatFormat none = {CHAT_FORMAT_NANOCHAT, name, -1, -1, -1, -1, -1, -1, -1, -1};
    *f = none;
    if (name == NULL) { llmc_die("%s: this model family has no chat format", path); }
    if (strcmp(name, "nanochat") == 0) {
        f->kind = CHAT_FORMAT_NANOCHAT;
        chat_find_tokens(f, CHAT_NANOCHAT_TOKENS, 4, tok, path);
        f->bos = chat_token_id(tok, "<|bos|>");  // an imported NanoChat's own; GPT-2's vocabulary: <|endoftext|>
        if (f->bos < 0) { f->bos = chat_token_id(tok, "<|endoftext|>"); }
        if (f->bos < 0) {
            llmc_die("%s: the tokenizer has neither <|bos|> nor <|endoftext|>, one of which the nanochat chat format "
                     "needs", path);
        }
    } else if (strcmp(name, "llama3") == 0) {
        f->kind = CHAT_FORMAT_LLAMA3;
        chat_find_tokens(f, CHAT_LLAMA3_TOKENS, 4, tok, path);
    } else if (strcmp(name, "chatml") == 0) {
        f->kind = CHAT_FORMAT_CHATML;
        chat_find_tokens(f, CHAT_CHATML_TOKENS, 2, tok, path);
    } else {
        llmc_die("%s: unknown chat format \"%s\" (nanochat, llama3, chatml)", path, name);
    }
}

static inline int chat_format_max_id(const ChatFormat* f) {
    int ids[] = {f->bos, f->user_start, f->user_end, f->assistant_start, f->header_start, f->header_end,
                 f->message_start, f->end};
    int m = -1;
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
        if (ids[k] > m) { m = ids[k]; }
    }
    return m;
}

// ----------------------------------------------------------------------------
// rendering

typedef struct {
    int* ids;
    int n, cap;
} ChatIds;

static inline void chat_ids_reserve(ChatIds* v, size_t more) {
    if ((size_t)v->n + more > (size_t)0x7fffffff) { llmc_die("chat: more than 2^31 token ids"); }
    if (v->n + (int)more <= v->cap) { return; }
    int cap = v->cap > 0 ? v->cap : 64;
    while (cap < v->n + (int)more) { cap = cap > 0x3fffffff ? 0x7fffffff : cap * 2; }
    int* bigger = (int*)realloc(v->ids, (size_t)cap * sizeof(int));
    if (bigger == NULL) { llmc_die("chat: out of memory for %d token ids", cap); }
    v->ids = bigger;
    v->cap = cap;
}

static inline void chat_ids_push(ChatIds* v, int id) {
    chat_ids_reserve(v, 1);
    v->ids[v->n++] = id;
}

// enc(text[0..n)) appended: the family's BPE, text that looks like a special token stays text
static inline void chat_ids_encode(ChatIds* v, const BPE* bpe, const char* text, size_t n) {
    chat_ids_reserve(v, n);  // n bytes never need more than n ids
    v->n += (int)bpe_encode(bpe, (const unsigned char*)text, n, 0, v->ids + v->n);
}

static inline void chat_ids_free(ChatIds* v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

static inline void chat_render_start(const ChatFormat* f, ChatIds* out) {
    if (f->bos >= 0) { chat_ids_push(out, f->bos); }
}

// llama3's [<|start_header_id|>] enc(role) [<|end_header_id|>] enc("\n\n"), chatml's [<|im_start|>] enc(role + "\n")
static inline void chat_render_header(const ChatFormat* f, const BPE* bpe, ChatRole role, ChatIds* out) {
    const char* name = CHAT_ROLE_NAMES[role];
    if (f->kind == CHAT_FORMAT_LLAMA3) {
        chat_ids_push(out, f->header_start);
        chat_ids_encode(out, bpe, name, strlen(name));
        chat_ids_push(out, f->header_end);
        chat_ids_encode(out, bpe, "\n\n", 2);
    } else {
        char line[16];
        int n = snprintf(line, sizeof(line), "%s\n", name);
        chat_ids_push(out, f->message_start);
        chat_ids_encode(out, bpe, line, (size_t)n);
    }
}

static inline void chat_render_generation_prompt(const ChatFormat* f, const BPE* bpe, ChatIds* out) {
    if (f->kind == CHAT_FORMAT_NANOCHAT) { chat_ids_push(out, f->assistant_start); }
    else { chat_render_header(f, bpe, CHAT_ROLE_ASSISTANT, out); }
}

static inline void chat_render_answer_end(const ChatFormat* f, const BPE* bpe, ChatIds* out) {
    chat_ids_push(out, f->end);
    if (f->kind == CHAT_FORMAT_CHATML) { chat_ids_encode(out, bpe, "\n", 1); }
}

// one message, content[0..n); nanochat has no system message of its own (chat_render_user_turn joins it)
static inline void chat_render_message(const ChatFormat* f, const BPE* bpe, ChatRole role, const char* content,
                                       size_t n, ChatIds* out) {
    if (f->kind != CHAT_FORMAT_NANOCHAT) {
        chat_render_header(f, bpe, role, out);
        chat_ids_encode(out, bpe, content, n);
        chat_ids_push(out, f->end);
        if (f->kind == CHAT_FORMAT_CHATML) { chat_ids_encode(out, bpe, "\n", 1); }
        return;
    }
    if (role == CHAT_ROLE_SYSTEM) { llmc_die("internal: nanochat's system message is joined to the first user turn"); }
    int user = role == CHAT_ROLE_USER;
    chat_ids_push(out, user ? f->user_start : f->assistant_start);
    chat_ids_encode(out, bpe, content, n);
    chat_ids_push(out, user ? f->user_end : f->end);
}

// A user turn: when first, the conversation's start and the system message (system: NULL for none; nanochat puts
// system + "\n\n" before the user's text, the others give it its own message) before the user message
static inline void chat_render_user_turn(const ChatFormat* f, const BPE* bpe, const char* system, size_t system_len,
                                         const char* user, size_t user_len, int first, ChatIds* out) {
    int has_system = first && system != NULL;
    if (first) { chat_render_start(f, out); }
    if (has_system && f->kind == CHAT_FORMAT_NANOCHAT) {
        char* joined = (char*)mallocCheck(system_len + 2 + user_len + 1);
        memcpy(joined, system, system_len);
        memcpy(joined + system_len, "\n\n", 2);
        memcpy(joined + system_len + 2, user, user_len);
        chat_render_message(f, bpe, CHAT_ROLE_USER, joined, system_len + 2 + user_len, out);
        free(joined);
        return;
    }
    if (has_system) { chat_render_message(f, bpe, CHAT_ROLE_SYSTEM, system, system_len, out); }
    chat_render_message(f, bpe, CHAT_ROLE_USER, user, user_len, out);
}

// ----------------------------------------------------------------------------
// conversations given as JSON

typedef struct {
    ChatRole role;
    char* content;   // UTF-8 as given (NUL-terminated; may hold a NUL of its own: use len)
    size_t len;
} ChatMessage;

typedef struct {
    ChatMessage* messages;
    int n;
} ChatConversation;

static inline void chat_conversation_free(ChatConversation* c) {
    for (int i = 0; i < c->n; i++) { free(c->messages[i].content); }
    free(c->messages);
    c->messages = NULL;
    c->n = 0;
}

// one message object {"role": ..., "content": ...} (other keys ignored) appended to c; 0 with *why on error
static inline int chat_read_message(JsonReader* r, ChatConversation* c, const char** why) {
    if (!json_take(r, '{')) { *why = "a message is not a JSON object"; return 0; }
    ChatMessage m = {CHAT_ROLE_USER, NULL, 0};
    int has_role = 0;
    if (!json_take(r, '}')) {
        do {
            char* key = json_string(r, NULL);
            if (key == NULL || !json_take(r, ':')) {
                free(key);
                free(m.content);
                *why = r->error != NULL ? r->error : "expected ':' after a key";
                return 0;
            }
            int is_role = strcmp(key, "role") == 0, is_content = strcmp(key, "content") == 0;
            free(key);
            if (is_role || is_content) {
                size_t len;
                int quoted = json_peek(r) == '"';
                char* s = json_string(r, &len);
                if (s == NULL) {  // not a string, or a bad one (r->error says how)
                    free(m.content);
                    *why = quoted ? r->error : is_role ? "a message's role is not a string" : "a message's content is not a string";
                    return 0;
                }
                if (is_content) { free(m.content); m.content = s; m.len = len; continue; }
                int role = -1;
                for (int k = 0; k < 3; k++) { if (strcmp(s, CHAT_ROLE_NAMES[k]) == 0) { role = k; } }
                free(s);
                if (role < 0) { free(m.content); *why = "unknown role (system, user or assistant)"; return 0; }
                m.role = (ChatRole)role;
                has_role = 1;
            } else if (!json_skip(r)) {
                free(m.content);
                *why = r->error;
                return 0;
            }
        } while (json_take(r, ','));
        if (!json_take(r, '}')) { free(m.content); *why = "expected ',' or '}' in a message"; return 0; }
    }
    if (!has_role || m.content == NULL) {
        free(m.content);
        *why = "a message needs a \"role\" and a \"content\"";
        return 0;
    }
    c->messages = (ChatMessage*)realloc(c->messages, (size_t)(c->n + 1) * sizeof(ChatMessage));
    if (c->messages == NULL) { llmc_die("chat: out of memory for %d messages", c->n + 1); }
    c->messages[c->n++] = m;
    return 1;
}

// {"messages": [message, ...]} (other keys ignored) in line[0..len) into c (empty on entry); 0 with *why (a phrase)
// when it is not one, c then freed
static inline int chat_conversation_read_json(ChatConversation* c, const char* line, size_t len, const char** why) {
    JsonReader r;
    json_reader_init(&r, line, len);
    int found = 0, ok = json_take(&r, '{');
    *why = "not a JSON object {\"messages\": [...]}";
    if (ok && !json_take(&r, '}')) {
        do {
            char* key = json_string(&r, NULL);
            ok = key != NULL && json_take(&r, ':');
            int is_messages = ok && strcmp(key, "messages") == 0;
            free(key);
            if (!ok) { *why = "expected a key and ':' in the object"; break; }
            if (!is_messages) {
                ok = json_skip(&r);
                if (!ok) { *why = r.error; }
                continue;
            }
            found = 1;
            if (!json_take(&r, '[')) { *why = "\"messages\" is not an array"; ok = 0; break; }
            if (json_take(&r, ']')) { continue; }
            do { ok = chat_read_message(&r, c, why); } while (ok && json_take(&r, ','));
            if (ok && !json_take(&r, ']')) { *why = "expected ',' or ']' in \"messages\""; ok = 0; }
        } while (ok && json_take(&r, ','));
        if (ok && !json_take(&r, '}')) { *why = "expected ',' or '}' in the object"; ok = 0; }
    }
    if (ok && !json_end(&r)) { *why = "text after the JSON object"; ok = 0; }
    if (ok && !found) { *why = "no \"messages\" array"; ok = 0; }
    if (!ok) { chat_conversation_free(c); }
    return ok;
}

// A conversation to answer: an optional system message first, then user and assistant turns alternating from a
// user turn, the last one a user turn. 0 with *why (a phrase) when it is not one
static inline int chat_conversation_check(const ChatConversation* c, const char** why) {
    int first = c->n > 0 && c->messages[0].role == CHAT_ROLE_SYSTEM ? 1 : 0;
    if (c->n - first == 0) { *why = "no user message"; return 0; }
    for (int i = first; i < c->n; i++) {
        ChatRole expected = (i - first) % 2 == 0 ? CHAT_ROLE_USER : CHAT_ROLE_ASSISTANT;
        if (c->messages[i].role == CHAT_ROLE_SYSTEM) { *why = "a system message after the first message"; return 0; }
        if (c->messages[i].role != expected) {
            *why = expected == CHAT_ROLE_USER ? "two assistant messages in a row" : "two user messages in a row";
            return 0;
        }
    }
    if (c->messages[c->n - 1].role != CHAT_ROLE_USER) { *why = "the last message is not a user message (nothing to answer)"; return 0; }
    return 1;
}

// a checked conversation (chat_conversation_check) and the generation prompt after it
static inline void chat_render_conversation(const ChatFormat* f, const BPE* bpe, const ChatConversation* c, ChatIds* out) {
    int first = c->messages[0].role == CHAT_ROLE_SYSTEM ? 1 : 0;
    const ChatMessage* system = first ? &c->messages[0] : NULL;
    const ChatMessage* user = &c->messages[first];
    chat_render_user_turn(f, bpe, system != NULL ? system->content : NULL, system != NULL ? system->len : 0,
                          user->content, user->len, 1, out);
    for (int i = first + 1; i < c->n; i++) {
        chat_render_message(f, bpe, c->messages[i].role, c->messages[i].content, c->messages[i].len, out);
    }
    chat_render_generation_prompt(f, bpe, out);
}

#endif // LLMC_CHAT_H
