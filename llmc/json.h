/*
llmc/json.h: just enough JSON for conversations given one per line (generate --chat --jsonl, llmc/chat.h): a reader
that walks one text with a cursor (objects, arrays, strings with every escape, numbers, true, false, null) and a
writer of strings.

    JsonReader r; json_reader_init(&r, text, len)
    json_peek(&r)                   the next significant character ('\0' at the end), whitespace skipped
    json_take(&r, c)                1 and moves past c when it is the next significant character, else 0
    json_string(&r, &len)           the next value as a string: its bytes (UTF-8, escapes decoded, NUL-terminated,
                                    malloc'd; len without the NUL), or NULL (r.error says why)
    json_skip(&r)                   moves past the next value of any kind; 0 on bad JSON
    json_end(&r)                    1 when nothing but whitespace is left
    json_write_string(out, s, n)    s[0..n) as a JSON string: quotes, the escapes JSON requires, and U+FFFD in place
                                    of each byte that does not start valid UTF-8 (so the line is valid JSON)

A reader function that fails sets r.error (a phrase, "expected ':'") once and returns 0 / NULL; the caller names
the input and the position (r.pos) in its one error line. Strings must be valid JSON: control characters escaped,
\u escapes of surrogates in pairs. Nesting is bounded (JSON_MAX_DEPTH) so a hostile line cannot exhaust the stack.
*/
#ifndef LLMC_JSON_H
#define LLMC_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"

#define JSON_MAX_DEPTH 64

typedef struct {
    const char* text;
    size_t len;
    size_t pos;          // the cursor: bytes of text consumed
    const char* error;   // NULL, or why the last read failed
} JsonReader;

static inline void json_reader_init(JsonReader* r, const char* text, size_t len) {
    r->text = text;
    r->len = len;
    r->pos = 0;
    r->error = NULL;
}

static inline int json_fail(JsonReader* r, const char* why) {
    if (r->error == NULL) { r->error = why; }
    return 0;
}

static inline char json_peek(JsonReader* r) {
    while (r->pos < r->len) {
        char c = r->text[r->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') { return c; }
        r->pos++;
    }
    return '\0';
}

static inline int json_take(JsonReader* r, char c) {
    if (json_peek(r) != c || r->pos >= r->len) { return 0; }
    r->pos++;
    return 1;
}

static inline int json_end(JsonReader* r) {
    json_peek(r);
    return r->pos >= r->len;
}

// the 4 hex digits at r->pos into *u; 0 when they are not hex
static inline int json_hex4(JsonReader* r, unsigned* u) {
    if (r->pos + 4 > r->len) { return json_fail(r, "a \\u escape needs 4 hex digits"); }
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = r->text[r->pos++];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) { return json_fail(r, "a \\u escape needs 4 hex digits"); }
        v = v * 16 + (unsigned)d;
    }
    *u = v;
    return 1;
}

// code point cp as UTF-8 into out (room for 4); returns its length
static inline size_t json_utf8(unsigned cp, char* out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// the escape after a backslash (r->pos is past it) into out; returns its length, 0 on a bad escape
static inline size_t json_escape(JsonReader* r, char* out) {
    if (r->pos >= r->len) { json_fail(r, "unterminated string"); return 0; }
    char c = r->text[r->pos++];
    switch (c) {
        case '"': case '\\': case '/': out[0] = c; return 1;
        case 'b': out[0] = '\b'; return 1;
        case 'f': out[0] = '\f'; return 1;
        case 'n': out[0] = '\n'; return 1;
        case 'r': out[0] = '\r'; return 1;
        case 't': out[0] = '\t'; return 1;
        case 'u': break;
        default: json_fail(r, "unknown escape in a string"); return 0;
    }
    unsigned cp;
    if (!json_hex4(r, &cp)) { return 0; }
    if (cp >= 0xDC00 && cp <= 0xDFFF) { json_fail(r, "a lone low surrogate \\u escape"); return 0; }
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half must follow
        unsigned lo;
        if (r->pos + 2 > r->len || r->text[r->pos] != '\\' || r->text[r->pos + 1] != 'u') {
            json_fail(r, "a high surrogate \\u escape without its low half");
            return 0;
        }
        r->pos += 2;
        if (!json_hex4(r, &lo)) { return 0; }
        if (lo < 0xDC00 || lo > 0xDFFF) { json_fail(r, "a high surrogate \\u escape without its low half"); return 0; }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return json_utf8(cp, out);
}

// the string value at the cursor, decoded (see the top); NULL on error
static inline char* json_string(JsonReader* r, size_t* out_len) {
    if (!json_take(r, '"')) { json_fail(r, "expected a string"); return NULL; }
    // the decoded string is never longer than its JSON text: an escape of n bytes decodes to at most n bytes
    size_t start = r->pos, n = 0;
    char* s = (char*)mallocCheck(r->len - start + 1);
    for (;;) {
        if (r->pos >= r->len) { json_fail(r, "unterminated string"); break; }
        unsigned char c = (unsigned char)r->text[r->pos++];
        if (c == '"') {
            s[n] = '\0';
            if (out_len != NULL) { *out_len = n; }
            return s;
        }
        if (c < 0x20) { json_fail(r, "a control character not escaped in a string"); break; }
        if (c != '\\') { s[n++] = (char)c; continue; }
        size_t k = json_escape(r, s + n);
        if (k == 0) { break; }
        n += k;
    }
    free(s);
    return NULL;
}

// moves past a number, true, false or null at the cursor
static inline int json_skip_scalar(JsonReader* r) {
    static const char* const WORDS[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(WORDS[k]);
        if (r->pos + n <= r->len && memcmp(r->text + r->pos, WORDS[k], n) == 0) { r->pos += n; return 1; }
    }
    size_t start = r->pos;
    while (r->pos < r->len && strchr("+-0123456789.eE", r->text[r->pos]) != NULL) { r->pos++; }
    return r->pos > start ? 1 : json_fail(r, "expected a JSON value");
}

static inline int json_skip_depth(JsonReader* r, int depth) {
    if (depth > JSON_MAX_DEPTH) { return json_fail(r, "nested deeper than 64 levels"); }
    char c = json_peek(r);
    if (c == '"') {
        char* s = json_string(r, NULL);
        free(s);
        return s != NULL;
    }
    if (c != '{' && c != '[') { return json_skip_scalar(r); }
    char close = c == '{' ? '}' : ']';
    r->pos++;
    if (json_take(r, close)) { return 1; }
    do {
        if (c == '{') {
            char* key = json_string(r, NULL);
            if (key == NULL) { return 0; }
            free(key);
            if (!json_take(r, ':')) { return json_fail(r, "expected ':' after a key"); }
        }
        if (!json_skip_depth(r, depth + 1)) { return 0; }
    } while (json_take(r, ','));
    return json_take(r, close) ? 1 : json_fail(r, c == '{' ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
}

static inline int json_skip(JsonReader* r) { return json_skip_depth(r, 0); }

// the length of the valid UTF-8 sequence at s[i] (i < n), or 0 when the byte does not start one (overlong forms,
// surrogates and code points past U+10FFFF are not valid)
static inline size_t json_utf8_length(const unsigned char* s, size_t n, size_t i) {
    unsigned char c = s[i];
    if (c < 0x80) { return 1; }
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (len == 0 || c > 0xF4 || i + len > n) { return 0; }
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) { return 0; }
    }
    if (c == 0xE0 && s[i + 1] < 0xA0) { return 0; }   // overlong
    if (c == 0xED && s[i + 1] >= 0xA0) { return 0; }  // a surrogate
    if (c == 0xF0 && s[i + 1] < 0x90) { return 0; }   // overlong
    if (c == 0xF4 && s[i + 1] >= 0x90) { return 0; }  // past U+10FFFF
    return len;
}

static inline void json_write_string(FILE* out, const char* str, size_t n) {
    const unsigned char* s = (const unsigned char*)str;
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = json_utf8_length(s, n, i);
        if (len == 0) { fputs("\xef\xbf\xbd", out); i++; continue; }  // U+FFFD
        if (len > 1) { fwrite(s + i, 1, len, out); i += len; continue; }
        if (c == '"') { fputs("\\\"", out); }
        else if (c == '\\') { fputs("\\\\", out); }
        else if (c == '\n') { fputs("\\n", out); }
        else if (c == '\r') { fputs("\\r", out); }
        else if (c == '\t') { fputs("\\t", out); }
        else if (c < 0x20 || c == 0x7F) { fprintf(out, "\\u%04x", c); }
        else { fputc(c, out); }
        i++;
    }
    fputc('"', out);
}

#endif // LLMC_JSON_H
