// dev/test/test_chat.c: unit tests of llmc/chat.h (the chat formats' ids, written by hand, conversations read from
// JSON and checked) and llmc/json.h (escapes, the refusals, the string writer), on a toy vocabulary: the 256 bytes
// (no merges, so enc(text) is the text's bytes), then the special tokens of all three formats.
#include "llmc/chat.h"
#include "dev/test/test_common.h"

// the toy vocabulary's special tokens, in id order from 256
static const char* const SPECIALS[] = {"<|endoftext|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>",
                                       "<|assistant_end|>", "<|begin_of_text|>", "<|start_header_id|>",
                                       "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"};
enum { EOT = 256, USER_START, USER_END, ASSISTANT_START, ASSISTANT_END, BEGIN, HEADER_START, HEADER_END, EOT_ID,
       IM_START, IM_END, TOY_V };

static char toy_bytes[TOY_V * 24];
static char* toy_table[TOY_V];
static unsigned char toy_lengths[TOY_V];

// the toy vocabulary as a tokenizer file would give it, the first `n` tokens only
static Tokenizer toy_tokenizer(int n) {
    char* out = toy_bytes;
    for (int i = 0; i < TOY_V; i++) {
        size_t len = i < 256 ? 1 : strlen(SPECIALS[i - 256]);
        if (i < 256) { out[0] = (char)i; } else { memcpy(out, SPECIALS[i - 256], len); }
        out[len] = '\0';
        toy_table[i] = out;
        toy_lengths[i] = (unsigned char)len;
        out += len + 1;
    }
    Tokenizer t = {(uint32_t)n, toy_table, 1, EOT, -1, 2, toy_bytes, toy_lengths};
    return t;
}

// ids == want[0..n)
static int ids_are(const ChatIds* ids, const int* want, int n) {
    if (ids->n != n) { return 0; }
    for (int i = 0; i < n; i++) { if (ids->ids[i] != want[i]) { return 0; } }
    return 1;
}

// the conversation of a JSON line, checked, rendered in format `name`
static int render_json(const char* name, const char* line, ChatIds* out) {
    Tokenizer tok = toy_tokenizer(TOY_V);
    ChatFormat f;
    chat_format_find(&f, name, &tok, "toy.bin");
    BPE bpe;
    bpe_init_from_tokenizer(&bpe, &tok, "toy.bin", 256, BPE_PATTERN_GPT2);
    ChatConversation c = {NULL, 0};
    const char* why;
    int ok = chat_conversation_read_json(&c, line, strlen(line), &why) && chat_conversation_check(&c, &why);
    if (ok) { chat_render_conversation(&f, &bpe, &c, out); }
    chat_conversation_free(&c);
    bpe_free(&bpe);
    return ok;
}

static const char* const CONVERSATION =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"}, "
    "{\"role\": \"assistant\", \"content\": \"Yo\"}, {\"role\": \"user\", \"content\": \"?\"}]}";

static void test_formats(void) {
    ChatIds ids = {NULL, 0, 0};
    // nanochat: <|bos|> is <|endoftext|> here; the system message joins the first user message with "\n\n"
    int nanochat[] = {EOT, USER_START, 'S', '\n', '\n', 'H', 'i', USER_END, ASSISTANT_START, 'Y', 'o', ASSISTANT_END,
                      USER_START, '?', USER_END, ASSISTANT_START};
    CHECK(render_json("nanochat", CONVERSATION, &ids) && ids_are(&ids, nanochat, 16), "nanochat's ids (%d)", ids.n);
    ids.n = 0;
    int llama3[] = {BEGIN, HEADER_START, 's', 'y', 's', 't', 'e', 'm', HEADER_END, '\n', '\n', 'S', EOT_ID,
                    HEADER_START, 'u', 's', 'e', 'r', HEADER_END, '\n', '\n', 'H', 'i', EOT_ID,
                    HEADER_START, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', HEADER_END, '\n', '\n', 'Y', 'o', EOT_ID,
                    HEADER_START, 'u', 's', 'e', 'r', HEADER_END, '\n', '\n', '?', EOT_ID,
                    HEADER_START, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', HEADER_END, '\n', '\n'};
    CHECK(render_json("llama3", CONVERSATION, &ids) && ids_are(&ids, llama3, (int)(sizeof(llama3) / sizeof(int))),
          "llama3's ids (%d)", ids.n);
    ids.n = 0;
    int chatml[] = {IM_START, 's', 'y', 's', 't', 'e', 'm', '\n', 'S', IM_END, '\n',
                    IM_START, 'u', 's', 'e', 'r', '\n', 'H', 'i', IM_END, '\n',
                    IM_START, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n', 'Y', 'o', IM_END, '\n',
                    IM_START, 'u', 's', 'e', 'r', '\n', '?', IM_END, '\n',
                    IM_START, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'};
    CHECK(render_json("chatml", CONVERSATION, &ids) && ids_are(&ids, chatml, (int)(sizeof(chatml) / sizeof(int))),
          "chatml's ids (%d)", ids.n);
    // special-token text in a content is text: its bytes
    ids.n = 0;
    int text[] = {EOT, USER_START, '<', '|', 'x', USER_END, ASSISTANT_START};
    CHECK(render_json("nanochat", "{\"messages\": [{\"role\": \"user\", \"content\": \"<|x\"}]}", &ids) && ids_are(&ids, text, 7),
          "special-token text stays text");
    chat_ids_free(&ids);
    // an answer's end: the end token (ChatML: and "\n"), the same as an assistant message's last ids
    Tokenizer tok = toy_tokenizer(TOY_V);
    ChatFormat f;
    chat_format_find(&f, "chatml", &tok, "toy.bin");
    BPE bpe;
    bpe_init_from_tokenizer(&bpe, &tok, "toy.bin", 256, BPE_PATTERN_GPT2);
    chat_render_answer_end(&f, &bpe, &ids);
    int end[] = {IM_END, '\n'};
    CHECK(ids_are(&ids, end, 2) && f.end == IM_END && chat_format_max_id(&f) == IM_END, "chatml's answer end");
    chat_ids_free(&ids);
    bpe_free(&bpe);
}

static void find_in_short_vocabulary(void* arg) {
    Tokenizer tok = toy_tokenizer(*(int*)arg);
    ChatFormat f;
    chat_format_find(&f, "llama3", &tok, "short.bin");
}

static void find_unknown_format(void* arg) {
    Tokenizer tok = toy_tokenizer(TOY_V);
    ChatFormat f;
    chat_format_find(&f, (const char*)arg, &tok, "toy.bin");
}

static void test_special_tokens_by_their_strings(void) {
    int n = EOT_ID;  // the vocabulary stops before <|eot_id|>
    expect_die("a missing chat token", find_in_short_vocabulary, &n, "short.bin: the tokenizer has no <|eot_id|> token",
               "llama3 chat format");
    expect_die("an unknown format", find_unknown_format, "alpaca", "unknown chat format \"alpaca\"", NULL);
    Tokenizer tok = toy_tokenizer(TOY_V);
    ChatFormat f;
    chat_format_find(&f, "llama3", &tok, "toy.bin");
    CHECK(f.bos == BEGIN && f.header_start == HEADER_START && f.header_end == HEADER_END && f.end == EOT_ID,
          "llama3's ids by their strings");
    // a vocabulary with its own <|bos|> (an imported NanoChat's) starts with it, not <|endoftext|>
    toy_table[IM_END] = "<|bos|>";
    toy_lengths[IM_END] = 7;
    chat_format_find(&f, "nanochat", &tok, "toy.bin");
    CHECK(f.bos == IM_END && f.user_start == USER_START && f.end == ASSISTANT_END, "nanochat's <|bos|> (%d)", f.bos);
}

// the reason chat_conversation_read_json or chat_conversation_check gives for line ("" when it takes it)
static const char* refusal(const char* line) {
    ChatConversation c = {NULL, 0};
    const char* why = "";
    if (chat_conversation_read_json(&c, line, strlen(line), &why) && chat_conversation_check(&c, &why)) { why = ""; }
    chat_conversation_free(&c);
    return why;
}

static void test_conversations_from_json(void) {
    const char* line = "{\"id\": [1, {\"a\": null}], \"messages\": [{\"name\": true, \"content\": \"a\\u00e9\\ud83d\\ude00"
                       "\\n\\t\\\"\\\\\\/\", \"role\": \"user\"}], \"x\": -1.5e3}";
    ChatConversation c = {NULL, 0};
    const char* why = NULL;
    CHECK(chat_conversation_read_json(&c, line, strlen(line), &why) && c.n == 1, "a conversation with other keys");
    const char want[] = "a\xc3\xa9\xf0\x9f\x98\x80\n\t\"\\/";
    CHECK(c.n == 1 && c.messages[0].role == CHAT_ROLE_USER && c.messages[0].len == sizeof(want) - 1
          && memcmp(c.messages[0].content, want, sizeof(want)) == 0, "the escapes decoded to UTF-8");
    chat_conversation_free(&c);
    struct { const char* line; const char* why; } bad[] = {
        {"[]", "not a JSON object"},
        {"{\"messages\": {}}", "\"messages\" is not an array"},
        {"{\"other\": 1}", "no \"messages\" array"},
        {"{\"messages\": []}", "no user message"},
        {"{\"messages\": [{\"role\": \"user\"}]}", "needs a \"role\" and a \"content\""},
        {"{\"messages\": [{\"role\": \"robot\", \"content\": \"\"}]}", "unknown role"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "content is not a string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud83d\"}]}", "without its low half"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\\ude00\"}]}", "lone low surrogate"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\\q\"}]}", "unknown escape"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\nb\"}]}", "control character"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a", "unterminated string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]} x", "text after the JSON object"},
        {"{\"x\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
         "nested deeper than 64 levels"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}",
         "two user messages in a row"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", \"content\": \"b\"}]}",
         "a system message after the first"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}",
         "the last message is not a user message"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char* got = refusal(bad[i].line);
        CHECK(strstr(got, bad[i].why) != NULL, "refusal %zu: want [%s], got [%s]", i, bad[i].why, got);
    }
    CHECK(refusal(CONVERSATION)[0] == '\0', "a system message, user and assistant turns, a user's last");
}

static void test_json_string_writer(void) {
    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    const char s[] = "a\"b\\\n\t\x01\x7f\xc3\xa9\xff\xed\xa0\x80z";
    json_write_string(f, s, sizeof(s) - 1);
    fclose(f);
    // escapes for the quote, backslash and control characters; valid UTF-8 as it is; U+FFFD for each other byte
    const char want[] = "\"a\\\"b\\\\\\n\\t\\u0001\\u007f\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz\"";
    CHECK(len == sizeof(want) - 1 && memcmp(buf, want, len) == 0, "json_write_string: [%s]", buf);
    free(buf);
}

int main(void) {
    test_formats();
    test_special_tokens_by_their_strings();
    test_conversations_from_json();
    test_json_string_writer();
    return test_summary();
}
