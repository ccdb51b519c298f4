/*
dev/fuzz/fuzz_chat.c: libFuzzer harness for generate --jsonl's conversations: llmc/chat.h's reader of a conversation
given as a JSON line (over llmc/json.h) and its check, and llmc/json.h's string writer. The input is the line.
The reader either refuses the line (a reason, nothing left allocated) or gives messages whose roles are known and
whose contents end at their length; each content written as a JSON string by json_write_string reads back the same
bytes (every byte that is not valid UTF-8 as U+FFFD), and writing that again gives the same JSON.
*/
#include "harness.h"
#include "../../llmc/chat.h"

// content as json_write_string promises to keep it: the same bytes, each one that does not start valid UTF-8 as U+FFFD
static size_t expected_bytes(const char* s, size_t n, char* out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len = json_utf8_length((const unsigned char*)s, n, i);
        if (len == 0) { memcpy(out + k, "\xef\xbf\xbd", 3); k += 3; i++; continue; }
        memcpy(out + k, s + i, len);
        k += len;
        i += len;
    }
    return k;
}

// s[0..n) as JSON text into a buffer of libc's own (released with (free))
static char* written(const char* s, size_t n, size_t* len) {
    char* buf = NULL;
    FILE* f = open_memstream(&buf, len);
    if (f == NULL) { abort(); }
    json_write_string(f, s, n);
    (fclose)(f);
    return buf;
}

static void check_round_trip(const ChatMessage* m) {
    size_t text_len, back_len, again_len;
    char* text = written(m->content, m->len, &text_len);
    JsonReader r;
    json_reader_init(&r, text, text_len);
    char* back = json_string(&r, &back_len);
    if (back == NULL || !json_end(&r)) { abort(); }  // the writer wrote valid JSON: one string
    char* want = (char*)malloc(3 * m->len + 1);
    size_t want_len = expected_bytes(m->content, m->len, want);
    if (want_len != back_len || memcmp(want, back, back_len) != 0) { abort(); }
    char* again = written(back, back_len, &again_len);
    if (again_len != text_len || memcmp(again, text, text_len) != 0) { abort(); }
    free(want);
    free(back);
    (free)(text);
    (free)(again);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FUZZ_BEGIN
        ChatConversation c = {NULL, 0};
        const char* why = NULL;
        if (!chat_conversation_read_json(&c, (const char*)data, size, &why)) {
            if (why == NULL || c.messages != NULL || c.n != 0) { abort(); }  // refused: a reason, nothing kept
        } else {
            for (int i = 0; i < c.n; i++) {
                const ChatMessage* m = &c.messages[i];
                if ((int)m->role < 0 || (int)m->role > 2 || m->content == NULL || m->content[m->len] != '\0') { abort(); }
                check_round_trip(m);
            }
            if (chat_conversation_check(&c, &why)) {  // an optional system message, alternating turns, a user's last
                int first = c.messages[0].role == CHAT_ROLE_SYSTEM;
                if (c.n <= first || c.messages[c.n - 1].role != CHAT_ROLE_USER) { abort(); }
                for (int i = first; i < c.n; i++) {
                    if (c.messages[i].role != ((i - first) % 2 == 0 ? CHAT_ROLE_USER : CHAT_ROLE_ASSISTANT)) { abort(); }
                }
            }
            chat_conversation_free(&c);
        }
    FUZZ_END
    return 0;
}
