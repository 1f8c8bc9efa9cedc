// A small strict JSON parser (RFC 8259) into a tree, for file headers (safetensors) and configs.
// Never exits and never reads past the given length: every problem is an error string with the
// byte offset, so it can face untrusted input and fuzzing.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { JSON_NULL = 0, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    int type;              // JsonType
    size_t pos;            // byte offset of the value in the text (for error messages)
    int boolean;           // JSON_BOOL
    double num;            // JSON_NUMBER
    int is_int;            // JSON_NUMBER written as an integer that fits int64 (then inum is exact)
    int64_t inum;
    char *str;             // JSON_STRING: UTF-8, NUL-terminated (may contain NULs: see len)
    size_t len;
    int n;                 // JSON_ARRAY / JSON_OBJECT: number of items
    struct JsonValue *items;
    char **keys;           // JSON_OBJECT: keys[i] names items[i] (NUL-terminated)
    size_t *key_lens;
} JsonValue;

// Parse text[0, len) as exactly one JSON value (surrounding whitespace allowed). Returns NULL on
// success, else a malloc'd message "byte N: ..." and *out is left empty. Nesting depth is limited
// to 64. Duplicate object keys are an error.
char *json_parse(const char *text, size_t len, JsonValue *out);
void json_free(JsonValue *v);
// Object member by key (NULL if absent or v is not an object).
const JsonValue *json_get(const JsonValue *v, const char *key);

#ifdef __cplusplus
}
#endif
