// Cross-cutting host helpers: errors, checked allocation, time, atomic file writes.
// Every program and library file of ctrain includes this first.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

// The program name that starts every error and warning line ("ctrain" until a program's main
// sets its own, e.g. "train", "packdata"), so a user sees which command complained. name is kept.
void ct_set_program(const char *name);
const char *ct_program(void);
// Print "PROGRAM: error: ..." to stderr and exit(1). Use for bad input and unrecoverable state;
// the message must name the file, record, tensor or flag at fault.
__attribute__((noreturn, format(printf, 1, 2))) void ct_die(const char *fmt, ...);
// Same as ct_die, with ": strerror(errno)" appended.
__attribute__((noreturn, format(printf, 1, 2))) void ct_die_errno(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void ct_warn(const char *fmt, ...);
// While set, every error and warning is prefixed with what fn returns for its message ("FILE:LINE"
// or NULL for none): lets a reader of settings files name the line at fault for messages that
// other code (a flag parser, a validator) prints. NULL clears it.
typedef const char *(*CtErrorContext)(const char *msg);
void ct_set_error_context(CtErrorContext fn);
// For code that reports errors to its caller instead of dying (parsers under fuzzing, network
// peers): formats the message into err[errlen] (nothing when err is NULL or errlen 0) and returns
// -1, so a failing path reads `return ct_fail(err, errlen, "...", ...);`.
__attribute__((format(printf, 3, 4))) int ct_fail(char *err, size_t errlen, const char *fmt, ...);

// Allocation that never returns NULL (dies naming the size). ct_alloc is 64-byte aligned and
// uninitialised; ct_zalloc zeroes. Both are released with free().
void *ct_alloc(size_t bytes);
void *ct_zalloc(size_t bytes);
void *ct_realloc(void *p, size_t bytes);
char *ct_strdup(const char *s);

double ct_now(void);  // monotonic seconds
// Sorts v[0, n) in place and returns its median (the upper one of an even count); n > 0.
double ct_median(double *v, size_t n);
// The integer in v, which must lie in lo..hi; dies naming `what` (a flag or argument) otherwise,
// also when v is NULL (a flag given without its value).
int ct_parse_int(const char *what, const char *v, int lo, int hi);

// Atomic file output: data goes to "<path>.tmp.<pid>", ct_atomic_commit fsyncs, closes and renames
// it over <path> (and fsyncs the directory), so a crash never leaves a file that looks complete.
// ct_atomic_abort removes the temporary.
typedef struct {
    FILE *f;
    char *path;
    char *tmp_path;
} AtomicFile;
AtomicFile ct_atomic_open(const char *path);  // dies with the path on failure
void ct_atomic_write(AtomicFile *af, const void *data, size_t bytes);  // dies on short write
void ct_atomic_commit(AtomicFile *af);
void ct_atomic_abort(AtomicFile *af);

// Whole-file read; dies naming the path. *bytes receives the size. Buffer is NUL-terminated.
char *ct_read_file(const char *path, size_t *bytes);
// The same for input that must not end the program (a file among many, a parser under test):
// 0, or -1 with "cannot open: reason" / "read error: reason" in err (the caller names the path).
// Reads to the end, so pipes work too. *data (NUL-terminated) is released with free().
int ct_read_file_err(const char *path, char **data, size_t *bytes, char *err, size_t errlen);
int ct_file_exists(const char *path);
void ct_mkdir_p(const char *dir);  // dies naming the directory

#define CT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif
