// Telling a file's kind by its first bytes (trainer/filekind.h).
#include "trainer/filekind.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const char *filekind(const char *path, char *buf, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    if (S_ISDIR(st.st_mode)) return snprintf(buf, n, "a directory"), buf;
    if (st.st_size == 0) return snprintf(buf, n, "empty (0 bytes)"), buf;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t h[16] = {0};
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    static const struct { const char *magic; size_t len; const char *kind; } kinds[] = {
        {"\x89PNG\r\n\x1a\n", 8, "a PNG image"},  {"\xff\xd8\xff", 3, "a JPEG image"},
        {"CTRNCKPT", 8, "a ctrain checkpoint"},   {"GIF8", 4, "a GIF image"},
        {"\x1f\x8b", 2, "a gzip file"},           {"PK\x03\x04", 4, "a zip archive (a PyTorch .pt/.pth file?)"},
        {"CTSHARD\x1a", 8, "a ctrain shard"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind && got >= kinds[i].len && !memcmp(h, kinds[i].magic, kinds[i].len))
            return snprintf(buf, n, "%s", kinds[i].kind), buf;
    // safetensors: u64 header length, then '{'.
    if (got >= 9 && h[8] == '{') return snprintf(buf, n, "a safetensors file"), buf;
    if (got >= 1 && (h[0] == '{' || h[0] == '[')) return snprintf(buf, n, "a JSON or text file"), buf;
    return NULL;
}

const char *filekind_note(const char *path, const char *want, char *buf, size_t n) {
    char kind[96];
    buf[0] = 0;
    if (filekind(path, kind, sizeof kind) && strcmp(kind, want)) snprintf(buf, n, " (%s is %s, not %s)", path, kind, want);
    return buf;
}
