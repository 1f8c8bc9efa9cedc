// Recursive-descent JSON parser with explicit bounds checks on every read.
#include "nn/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t len, pos;
    char *err;
} Parser;

static int fail(Parser *p, size_t pos, const char *fmt, ...) {
    if (p->err) return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg) + 48;
    p->err = malloc(n);
    if (p->err) snprintf(p->err, n, "byte %zu: %s", pos, msg);
    return -1;
}

static void skip_ws(Parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++;
        else break;
    }
}

static int parse_value(Parser *p, JsonValue *v, int depth);

static int hex4(Parser *p, unsigned *out) {
    if (p->len - p->pos < 4) return fail(p, p->pos, "truncated \\u escape");
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + i];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= c - '0';
        else if (c >= 'a' && c <= 'f') x |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') x |= c - 'A' + 10;
        else return fail(p, p->pos + i, "bad hex digit in \\u escape");
    }
    p->pos += 4;
    *out = x;
    return 0;
}

// Parses a string starting at the opening quote; *out is malloc'd.
static int parse_string(Parser *p, char **out, size_t *out_len) {
    size_t start = p->pos;
    p->pos++;  // opening quote
    // The decoded string is never longer than the encoded one.
    size_t cap = 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return fail(p, start, "out of memory");
    for (;;) {
        if (p->pos >= p->len) {
            free(buf);
            return fail(p, start, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (n + 8 >= cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return fail(p, p->pos, "out of memory");
            }
            buf = nb;
        }
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            free(buf);
            return fail(p, p->pos, "control character in string");
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            p->pos++;
            continue;
        }
        if (p->pos + 1 >= p->len) {
            free(buf);
            return fail(p, p->pos, "truncated escape");
        }
        char esc = p->s[p->pos + 1];
        p->pos += 2;
        switch (esc) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) {
                free(buf);
                return -1;
            }
            if (cp >= 0xD800 && cp < 0xDC00) {  // high surrogate: a low one must follow
                unsigned lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(buf);
                    return fail(p, p->pos, "unpaired surrogate in \\u escape");
                }
                p->pos += 2;
                if (hex4(p, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    free(buf);
                    return fail(p, p->pos - 4, "bad low surrogate");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(buf);
                return fail(p, p->pos - 4, "unpaired low surrogate");
            }
            if (cp < 0x80) buf[n++] = (char)cp;
            else if (cp < 0x800) {
                buf[n++] = (char)(0xC0 | (cp >> 6));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                buf[n++] = (char)(0xE0 | (cp >> 12));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                buf[n++] = (char)(0xF0 | (cp >> 18));
                buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            free(buf);
            return fail(p, p->pos - 1, "bad escape '\\%c'", esc);
        }
    }
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(Parser *p, JsonValue *v) {
    size_t start = p->pos, i = p->pos;
    int is_int = 1;
    if (i < p->len && p->s[i] == '-') i++;
    if (i >= p->len || !is_digit(p->s[i])) return fail(p, start, "bad number");
    if (p->s[i] == '0') i++;
    else while (i < p->len && is_digit(p->s[i])) i++;
    if (i < p->len && p->s[i] == '.') {
        is_int = 0;
        i++;
        if (i >= p->len || !is_digit(p->s[i])) return fail(p, i, "bad number: digit expected after '.'");
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        is_int = 0;
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->len || !is_digit(p->s[i])) return fail(p, i, "bad number: digit expected in exponent");
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    size_t n = i - start;
    if (n > 400) return fail(p, start, "number too long");
    char tmp[401];
    memcpy(tmp, p->s + start, n);
    tmp[n] = 0;
    v->type = JSON_NUMBER;
    v->num = strtod(tmp, NULL);
    v->is_int = 0;
    if (is_int) {
        // Exact int64 accumulation with overflow detection.
        int neg = tmp[0] == '-';
        uint64_t acc = 0;
        int over = 0;
        for (const char *c = tmp + neg; *c; c++) {
            unsigned d = (unsigned)(*c - '0');
            if (acc > (UINT64_MAX - d) / 10) over = 1;
            acc = acc * 10 + d;
        }
        if (!over && (neg ? acc <= (uint64_t)INT64_MAX + 1 : acc <= (uint64_t)INT64_MAX)) {
            v->is_int = 1;
            v->inum = neg ? (int64_t)(0 - acc) : (int64_t)acc;
        }
    }
    p->pos = i;
    return 0;
}

static int literal(Parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return fail(p, p->pos, "unexpected token");
    p->pos += n;
    return 0;
}

static int push_item(Parser *p, JsonValue *v, int *cap, int with_key) {
    if (v->n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        JsonValue *ni = realloc(v->items, nc * sizeof(JsonValue));
        if (!ni) return fail(p, p->pos, "out of memory");
        v->items = ni;
        if (with_key) {
            char **nk = realloc(v->keys, nc * sizeof(char *));
            if (!nk) return fail(p, p->pos, "out of memory");
            v->keys = nk;
            size_t *nl = realloc(v->key_lens, nc * sizeof(size_t));
            if (!nl) return fail(p, p->pos, "out of memory");
            v->key_lens = nl;
        }
        *cap = nc;
    }
    memset(&v->items[v->n], 0, sizeof(JsonValue));
    return 0;
}

static int parse_value(Parser *p, JsonValue *v, int depth) {
    memset(v, 0, sizeof *v);
    skip_ws(p);
    v->pos = p->pos;
    if (p->pos >= p->len) return fail(p, p->pos, "unexpected end of input");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        if (depth >= JSON_MAX_DEPTH) return fail(p, p->pos, "nesting deeper than %d", JSON_MAX_DEPTH);
        int obj = c == '{';
        char close = obj ? '}' : ']';
        v->type = obj ? JSON_OBJECT : JSON_ARRAY;
        p->pos++;
        int cap = 0;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        for (;;) {
            skip_ws(p);
            if (push_item(p, v, &cap, obj)) return -1;
            if (obj) {
                if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, p->pos, "object key expected");
                char *key;
                size_t klen;
                if (parse_string(p, &key, &klen)) return -1;
                for (int i = 0; i < v->n; i++)
                    if (v->key_lens[i] == klen && memcmp(v->keys[i], key, klen) == 0) {
                        fail(p, v->items[v->n].pos ? v->items[v->n].pos : p->pos - klen - 2, "duplicate key \"%.80s\"", key);
                        free(key);
                        return -1;
                    }
                v->keys[v->n] = key;
                v->key_lens[v->n] = klen;
                skip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':') {
                    v->n++;  // so json_free releases the key
                    return fail(p, p->pos, "':' expected");
                }
                p->pos++;
            }
            v->n++;
            if (parse_value(p, &v->items[v->n - 1], depth + 1)) return -1;
            skip_ws(p);
            if (p->pos >= p->len) return fail(p, p->pos, "unexpected end of input in %s", obj ? "object" : "array");
            if (p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->s[p->pos] == close) {
                p->pos++;
                return 0;
            }
            return fail(p, p->pos, "',' or '%c' expected", close);
        }
    }
    if (c == '"') {
        v->type = JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    }
    if (c == 't') {
        v->type = JSON_BOOL;
        v->boolean = 1;
        return literal(p, "true");
    }
    if (c == 'f') {
        v->type = JSON_BOOL;
        return literal(p, "false");
    }
    if (c == 'n') {
        v->type = JSON_NULL;
        return literal(p, "null");
    }
    if (c == '-' || is_digit(c)) return parse_number(p, v);
    return fail(p, p->pos, "unexpected character 0x%02x", (unsigned char)c);
}

void json_free(JsonValue *v) {
    if (!v) return;
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        for (int i = 0; i < v->n; i++) {
            json_free(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
        free(v->key_lens);
    }
    if (v->type == JSON_STRING) free(v->str);
    memset(v, 0, sizeof *v);
}

char *json_parse(const char *text, size_t len, JsonValue *out) {
    Parser p = {text, len, 0, NULL};
    memset(out, 0, sizeof *out);
    if (parse_value(&p, out, 0) == 0) {
        skip_ws(&p);
        if (p.pos != p.len) fail(&p, p.pos, "trailing characters after the JSON value");
    }
    if (p.err) {
        json_free(out);
        return p.err;
    }
    return NULL;
}

const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (int i = 0; i < v->n; i++)
        if (v->key_lens[i] == kl && memcmp(v->keys[i], key, kl) == 0) return &v->items[i];
    return NULL;
}
