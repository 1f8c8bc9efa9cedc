// What a file is, from its first bytes, for errors about a file of the wrong kind: "a PNG image",
// "a JPEG image", "a ctrain checkpoint", "a ctrain shard", "a safetensors file", "empty (0 bytes)",
// "a directory"... so a PNG renamed .safetensors is reported as a PNG, not as a truncated header.
#pragma once
#include <stddef.h>

// The kind of path into buf (NULL when it cannot be told or read).
const char *filekind(const char *path, char *buf, size_t n);
// " (PATH is KIND, not WANT)" when the kind is known and is not want's, else "".
const char *filekind_note(const char *path, const char *want, char *buf, size_t n);
