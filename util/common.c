#include "util/common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *g_program = "ctrain";
static CtErrorContext g_error_context;

void ct_set_program(const char *name) { g_program = name; }
const char *ct_program(void) { return g_program; }
void ct_set_error_context(CtErrorContext fn) { g_error_context = fn; }

static void vreport(const char *kind, const char *fmt, va_list ap, int with_errno, int err) {
    fflush(stdout);
    fprintf(stderr, "%s: %s: ", g_program, kind);
    if (g_error_context) {
        char msg[1024];
        va_list aq;
        va_copy(aq, ap);
        vsnprintf(msg, sizeof msg, fmt, aq);
        va_end(aq);
        const char *where = g_error_context(msg);
        if (where && *where) fprintf(stderr, "%s: ", where);
    }
    vfprintf(stderr, fmt, ap);
    if (with_errno) fprintf(stderr, ": %s", strerror(err));
    fputc('\n', stderr);
}

void ct_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("error", fmt, ap, 0, 0);
    va_end(ap);
    exit(1);
}

void ct_die_errno(const char *fmt, ...) {
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    vreport("error", fmt, ap, 1, err);
    va_end(ap);
    exit(1);
}

void ct_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("warning", fmt, ap, 0, 0);
    va_end(ap);
}

int ct_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *ct_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (posix_memalign(&p, 64, (bytes + 63) & ~(size_t)63) != 0 || !p)
        ct_die("out of memory allocating %zu bytes", bytes);
    return p;
}

void *ct_zalloc(size_t bytes) {
    void *p = ct_alloc(bytes);
    memset(p, 0, bytes);
    return p;
}

void *ct_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) ct_die("out of memory reallocating %zu bytes", bytes);
    return q;
}

char *ct_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d) ct_die("out of memory");
    memcpy(d, s, n);
    return d;
}

double ct_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double ct_median(double *v, size_t n) {
    qsort(v, n, sizeof(double), cmp_double);
    return v[n / 2];
}

int ct_parse_int(const char *what, const char *v, int lo, int hi) {
    if (!v) ct_die("%s needs a value (see --help)", what);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) ct_die("%s: '%s' is not an integer in %d..%d", what, v, lo, hi);
    return (int)x;
}

AtomicFile ct_atomic_open(const char *path) {
    AtomicFile af;
    af.path = ct_strdup(path);
    size_t n = strlen(path) + 32;
    af.tmp_path = malloc(n);
    if (!af.tmp_path) ct_die("out of memory");
    snprintf(af.tmp_path, n, "%s.tmp.%d", path, (int)getpid());
    af.f = fopen(af.tmp_path, "wb");
    if (!af.f) ct_die_errno("cannot create %s", af.tmp_path);
    return af;
}

void ct_atomic_write(AtomicFile *af, const void *data, size_t bytes) {
    if (bytes && fwrite(data, 1, bytes, af->f) != bytes) {
        int err = errno;
        fclose(af->f);
        unlink(af->tmp_path);
        errno = err;
        ct_die_errno("writing %s", af->path);
    }
}

static void fsync_parent_dir(const char *path) {
    char *copy = ct_strdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

void ct_atomic_commit(AtomicFile *af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        int err = errno;
        fclose(af->f);
        unlink(af->tmp_path);
        errno = err;
        ct_die_errno("writing %s", af->path);
    }
    if (fclose(af->f) != 0) {
        unlink(af->tmp_path);
        ct_die_errno("closing %s", af->path);
    }
    if (rename(af->tmp_path, af->path) != 0) {
        int err = errno;
        unlink(af->tmp_path);
        errno = err;
        ct_die_errno("renaming %s to %s", af->tmp_path, af->path);
    }
    fsync_parent_dir(af->path);
    free(af->path);
    free(af->tmp_path);
    af->f = NULL;
}

void ct_atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    af->f = NULL;
}

int ct_read_file_err(const char *path, char **data, size_t *bytes, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ct_fail(err, errlen, "cannot open: %s", strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = ct_alloc(cap);
    for (;;) {
        if (n + 1 == cap) buf = ct_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    if (bad) {
        free(buf);
        return ct_fail(err, errlen, "read error: %s", strerror(bad));
    }
    buf[n] = 0;
    *data = buf;
    if (bytes) *bytes = n;
    return 0;
}

char *ct_read_file(const char *path, size_t *bytes) {
    char *data, err[256];
    if (ct_read_file_err(path, &data, bytes, err, sizeof err) != 0) ct_die("%s: %s", path, err);
    return data;
}

int ct_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

void ct_mkdir_p(const char *dir) {
    char *p = ct_strdup(dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) ct_die_errno("cannot create directory %s", p);
        *s = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST) ct_die_errno("cannot create directory %s", p);
    free(p);
}
