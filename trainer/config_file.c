// --config FILE: recipe files of flags, one a line (recipes/README.md has the format). Their values
// rank above the demo recipe and the environment, below the command line (trainer/config.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/config_file.h"
#include "util/common.h"

// --config FILE: where each value came from, so that a message printed by the flag parser or the
// validator names FILE:LINE (through ct_set_error_context; a message about --X names X's line).
static struct {
    const char *file;
    int line;                 // the line being parsed, 0 when none
    const ConfigGiven *given; // after parsing: per-flag lines
} g_src;

static const char *config_error_context(const char *msg) {
    static char where[1100];
    int line = g_src.line;
    if (!line && g_src.given && msg[0] == '-' && msg[1] == '-') {
        const Flag *fl = config_flag_named(msg + 2, strcspn(msg + 2, ": ="));
        if (fl) line = g_src.given->config_line[fl - CONFIG_FLAGS];
    }
    if (!line || !g_src.file) return NULL;
    snprintf(where, sizeof where, "%s:%d", g_src.file, line);
    return where;
}

// Config strings point into the files' text for the life of the process (as into argv); the list
// keeps every text reachable.
static char **g_texts;
static int g_n_texts;
static char *keep_text(char *t) {
    g_texts = ct_realloc(g_texts, sizeof *g_texts * (size_t)(g_n_texts + 1));
    return g_texts[g_n_texts++] = t;
}

static char *read_config_text(const char *path) {
    char *buf, err[256];
    size_t n;
    if (ct_read_file_err(path, &buf, &n, err, sizeof err) != 0) ct_die("--config %s: cannot read (%s)", path, err);
    if (n > (64u << 20)) ct_die("--config %s: larger than 64 MB; not a recipe file", path);
    if (strlen(buf) != n) ct_die("--config %s: contains a NUL byte; not a text file", path);
    return keep_text(buf);
}

void config_read_file(Config *c, ConfigGiven *given, const char *path) {
    Config user = *c;
    ConfigGiven file_given;
    memset(&file_given, 0, sizeof file_given);
    char *text = read_config_text(path);
    g_src.file = path;
    g_src.given = NULL;
    ct_set_error_context(config_error_context);
    int line = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        char *end = nl ? nl : p + strlen(p);
        char *next = nl ? nl + 1 : end;
        *end = 0;
        line++;
        g_src.line = line;
        // A comment starts at '#' at the start of the line or after a blank, so a value may
        // still hold one (a path such as runs/#3).
        for (char *h = p; (h = strchr(h, '#')); h++)
            if (h == p || h[-1] == ' ' || h[-1] == '\t') { *h = 0; break; }
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r')) p[--len] = 0;
        if (!len) { p = next; continue; }
        if (strncmp(p, "--", 2) || !p[2] || p[2] == '-' || p[2] == '=')
            ct_die("expected '--flag value', '--flag=value' or '--flag' (got '%s')", p);
        char *val = p + strcspn(p, " \t");
        if (*val) {
            *val++ = 0;
            while (*val == ' ' || *val == '\t') val++;
            if (strchr(p, '=')) ct_die("'%s %s': one flag a line, its value after ' ' or '='", p, val);
        }
        size_t nlen = strcspn(p + 2, "=");
        if ((nlen == 6 && !strncmp(p + 2, "config", 6)) || (nlen == 4 && !strncmp(p + 2, "help", 4)))
            ct_die("--%.*s cannot be used in a recipe file", (int)nlen, p + 2);
        // '--flag value' becomes '--flag=value', so a boolean may take a value here too.
        char *tok = p;
        if (*val) {
            tok = keep_text(ct_alloc(strlen(p) + strlen(val) + 2));
            sprintf(tok, "%s=%s", p, val);
        }
        char *args[2] = {"train", tok};
        ConfigGiven one;
        memset(&one, 0, sizeof one);
        config_parse_args(c, &one, 2, args);
        for (int i = 0; i < CONFIG_N_FLAGS; i++)
            if (one.flag[i]) { file_given.flag[i] = 1; file_given.config_line[i] = line; }
        p = next;
    }
    g_src.line = 0;
    ct_set_error_context(NULL);
    // The command line wins: its values go back over the file's.
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        if (given->flag[i]) {
            memcpy((char *)c + CONFIG_FLAGS[i].offset, (char *)&user + CONFIG_FLAGS[i].offset, config_flag_size(&CONFIG_FLAGS[i]));
        } else if (file_given.flag[i]) {
            given->flag[i] = 1;
            given->config_line[i] = file_given.config_line[i];
        }
    }
    given->config_file = path;
}

void config_file_blame(const ConfigGiven *given) {
    g_src.given = given;
    ct_set_error_context(config_error_context);
}
