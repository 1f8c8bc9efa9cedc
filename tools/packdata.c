// packdata: ImageFolder tree (or MNIST IDX files) -> shard files (docs/SHARD_FORMAT.md).
//
//   packdata [options] SRC/ DST/      SRC/train + SRC/val -> DST/train.shard + DST/val.shard,
//                                     otherwise SRC is one split -> DST/NAME.shard (--split NAME)
//   packdata --idx DIR DST/           MNIST-format IDX files -> DST/train.shard + DST/val.shard
//   packdata --info FILE | --verify FILE
//
// Work is done in chunks of consecutive records: each chunk is decoded, resized and compressed in
// parallel, then appended in record order by one thread. Every per-record result depends only on
// the input file, so the output is byte-identical whatever the thread count.
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/image.h"
#include "loader/resample.h"
#include "loader/shard.h"
#include "util/common.h"

typedef struct {
    int max_short;      // 0: keep sizes
    int channels;
    uint32_t codec;
    int lz4hc;
    int quality;
    int strict;
    const char *split;
} Options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: packdata [options] SRC/ DST/      pack an ImageFolder tree into shards\n"
            "       packdata --idx DIR DST/           pack MNIST-format IDX files (e.g. Fashion-MNIST)\n"
            "       packdata --info FILE              describe a shard\n"
            "       packdata --verify FILE            check every checksum and decode every record\n"
            "\n"
            "SRC layout: SRC/CLASS/.../IMAGE like torchvision's ImageFolder (class = folder name, classes\n"
            "in sorted order, hidden entries skipped). When SRC holds train/ (and optionally val/), both\n"
            "splits are packed to DST/train.shard and DST/val.shard with one class table taken from the\n"
            "train tree: a class missing or empty in val is fine, a val class absent from train is an\n"
            "error. Otherwise SRC is one split, written to DST/NAME.shard.\n"
            "Images: files named .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp (any case) are read;\n"
            "the content decides the format (JPEG or PNG; a PNG named .JPEG is fine). Other files are\n"
            "ignored. A file that cannot be decoded is reported and skipped (fatal with --strict).\n"
            "\n"
            "options:\n"
            "  --split NAME      name of a single-split output, DST/NAME.shard (default: train)\n"
            "  --max-short N     resize (antialiased bilinear) so the shorter side is at most N pixels;\n"
            "                    smaller images are kept as they are; 0 keeps every size (default: 256)\n"
            "  --channels 1|3    stored channels: 3 = RGB, 1 = gray (ITU-R 601 luma) (default: 3)\n"
            "  --codec C         payload codec: lz4 (raw HWC uint8 in an LZ4 block), jpeg, or raw\n"
            "                    (default: lz4)\n"
            "  --lz4hc           LZ4 high compression (level 9): slower packing, smaller file, same\n"
            "                    decode speed (default: off)\n"
            "  --quality Q       JPEG quality 1..100 for --codec jpeg (default: 90)\n"
            "  --strict          a file that cannot be decoded is fatal (default: skip and count)\n"
            "  --threads N       worker threads (default: OMP_NUM_THREADS, else every core); the output\n"
            "                    is byte-identical for any N\n"
            "  --idx DIR         import {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from DIR with the\n"
            "                    10 Fashion-MNIST class names (1 channel, lz4)\n"
            "  --info FILE       print records, classes, sizes, compression ratio and a size histogram\n"
            "  --verify FILE     check every checksum and decode every record; exit 1 on any error\n"
            "  -h, --help        this text\n");
}

// ---------------------------------------------------------------------------------------------
// Directory scanning

typedef struct {
    char **v;
    size_t n, cap;
} StrList;

static void sl_push(StrList *l, char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = ct_realloc(l->v, l->cap * sizeof(char *));
    }
    l->v[l->n++] = s;
}
static void sl_free(StrList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = ct_alloc(n);
    size_t la = strlen(a);
    snprintf(p, n, "%s%s%s", a, (la && a[la - 1] == '/') ? "" : "/", b);
    return p;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// The output folder, resolved, when it lies inside the source tree: never scanned as a class.
static char *dst_real;

// Sorted names of the entries of dir (hidden ones skipped); want_dirs selects directories or files.
static StrList list_dir(const char *dir, int want_dirs) {
    StrList out = {0};
    DIR *d = opendir(dir);
    if (!d) ct_die_errno("cannot read directory %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *full = join(dir, e->d_name);
        struct stat st;
        int ok = stat(full, &st) == 0;  // follows symlinks, like ImageFolder
        if (ok && want_dirs && dst_real) {
            char *real = realpath(full, NULL);
            if (real && strcmp(real, dst_real) == 0) ok = 0;
            free(real);
        }
        free(full);
        if (!ok) continue;
        if (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) sl_push(&out, ct_strdup(e->d_name));
    }
    closedir(d);
    qsort(out.v, out.n, sizeof(char *), cmp_str);
    return out;
}

static int has_image_extension(const char *name) {
    static const char *exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    const char *dot = strrchr(name, '.');
    if (!dot) return 0;
    for (size_t i = 0; i < CT_ARRAY_LEN(exts); i++)
        if (strcasecmp(dot, exts[i]) == 0) return 1;
    return 0;
}

// The files of a class folder: those of the folder itself in sorted order, then each subfolder's
// (recursively) in sorted order.
static void collect_images(const char *dir, StrList *out, int depth) {
    if (depth > 64) ct_die("%s: directories nested more than 64 deep (a symlink loop?)", dir);
    StrList files = list_dir(dir, 0);
    for (size_t i = 0; i < files.n; i++)
        if (has_image_extension(files.v[i])) sl_push(out, join(dir, files.v[i]));
    sl_free(&files);
    StrList dirs = list_dir(dir, 1);
    for (size_t i = 0; i < dirs.n; i++) {
        char *sub = join(dir, dirs.v[i]);
        collect_images(sub, out, depth + 1);
        free(sub);
    }
    sl_free(&dirs);
}

typedef struct {
    char **paths;
    uint32_t *labels;
    size_t n;
} ItemList;

// Items of one split. With table_given, *classes is the class table (train's) and a folder not in
// it is an error naming it; otherwise the table is made from this tree's folders into *classes.
static ItemList scan_split(const char *root, StrList *classes, int table_given) {
    StrList dirs = list_dir(root, 1);
    if (!table_given) {
        if (dirs.n == 0) ct_die("%s: no class folders (expected SRC/CLASS/IMAGE files)", root);
        *classes = list_dir(root, 1);
    }
    ItemList items = {0};
    StrList paths = {0};
    size_t cap = 0;
    for (size_t d = 0; d < dirs.n; d++) {
        char **hit = bsearch(&dirs.v[d], classes->v, classes->n, sizeof(char *), cmp_str);
        if (!hit) {
            char *full = join(root, dirs.v[d]);
            ct_die("class folder %s is not a class of the train split (train's classes come from its folders)",
                   full);
        }
        uint32_t label = (uint32_t)(hit - classes->v);
        char *cdir = join(root, dirs.v[d]);
        size_t before = paths.n;
        collect_images(cdir, &paths, 0);
        if (paths.n == before && !table_given)
            ct_warn("class folder %s holds no images: class %u stays in the table with no records", cdir, label);
        free(cdir);
        if (paths.n > cap) {
            cap = paths.cap;
            items.labels = ct_realloc(items.labels, cap * sizeof(uint32_t));
        }
        for (size_t i = before; i < paths.n; i++) items.labels[i] = label;
    }
    sl_free(&dirs);
    items.paths = paths.v;
    items.n = paths.n;
    return items;
}

// ---------------------------------------------------------------------------------------------
// Per-image work

typedef struct {
    uint8_t *payload;  // NULL: failed (err holds why)
    size_t size;
    uint32_t h, w;
    uint64_t raw;
    char err[256];
} Result;

static uint8_t *read_all(const char *path, size_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        cap *= 2;
        uint8_t *nb = realloc(buf, cap);
        if (!nb) free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        snprintf(err, errlen, "%s", bad ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    *n = len;
    return buf;
}

static void process_one(const char *path, const Options *o, ResampleScratch *scratch, Result *r) {
    memset(r, 0, sizeof *r);
    size_t n;
    uint8_t *file = read_all(path, &n, r->err, sizeof r->err);
    if (!file) return;
    uint8_t *px;
    uint32_t h, w;
    int rc = image_decode(file, n, o->channels, &px, &h, &w, r->err, sizeof r->err);
    free(file);
    if (rc != 0) return;
    uint32_t short_side = CT_MIN(h, w);
    if (o->max_short > 0 && short_side > (uint32_t)o->max_short) {
        // torchvision's Resize(int): the short side becomes N, the long side int(N * long / short).
        uint32_t nh, nw;
        if (w <= h) nw = o->max_short, nh = (uint32_t)((uint64_t)o->max_short * h / w);
        else nh = o->max_short, nw = (uint32_t)((uint64_t)o->max_short * w / h);
        uint8_t *small = ct_alloc((size_t)nh * nw * o->channels);
        resize_u8(small, (int)nw, (int)nh, px, (int)w, (int)h, o->channels, scratch);
        free(px);
        px = small;
        h = nh;
        w = nw;
    }
    if (h > SHARD_MAX_DIM || w > SHARD_MAX_DIM) {
        snprintf(r->err, sizeof r->err, "image of %ux%u is larger than a shard allows (%u per side)", w, h,
                 SHARD_MAX_DIM);
        free(px);
        return;
    }
    int level = o->codec == SHARD_CODEC_JPEG ? o->quality : (o->lz4hc ? 9 : 0);
    r->payload = shard_encode(o->codec, level, px, h, w, (uint32_t)o->channels, &r->size);
    r->h = h;
    r->w = w;
    r->raw = (uint64_t)h * w * o->channels;
    free(px);
}

// ---------------------------------------------------------------------------------------------
// Progress

typedef struct {
    const char *label;
    size_t total;
    double t0, last;
    int tty;
} Progress;

static void progress(Progress *p, size_t done, int final) {
    double now = ct_now();
    if (!final && now - p->last < (p->tty ? 0.25 : 10.0)) return;
    p->last = now;
    double el = now - p->t0, rate = el > 0 ? done / el : 0;
    double eta = rate > 0 ? (p->total - done) / rate : 0;
    fprintf(stderr, "%s[%s] %zu/%zu images  %.0f img/s  %s %.0fs%s", p->tty ? "\r" : "", p->label, done, p->total,
            rate, final ? "elapsed" : "ETA", final ? el : eta, p->tty && !final ? "   " : "\n");
    fflush(stderr);
}

// ---------------------------------------------------------------------------------------------
// One split

static void pack_split(const char *label, const ItemList *items, const StrList *classes, const char *out_path,
                       const Options *o) {
    if (items->n == 0) ct_die("%s split: no image files found", label);
    const char **names = (const char **)classes->v;
    ShardWriter *w = shard_writer_open(out_path, (uint32_t)o->channels, o->codec, (uint32_t)classes->n, names);
    int nt = omp_get_max_threads();
    size_t chunk = (size_t)nt * 16;
    Result *res = ct_zalloc(chunk * sizeof(Result));
    ResampleScratch *scratch = ct_zalloc((size_t)nt * sizeof(ResampleScratch));
    Progress pr = {label, items->n, ct_now(), ct_now(), isatty(2)};
    size_t skipped = 0;
    uint64_t raw_total = 0, stored_total = 0;
    for (size_t base = 0; base < items->n; base += chunk) {
        size_t m = CT_MIN(chunk, items->n - base);
#pragma omp parallel for schedule(dynamic, 1)
        for (size_t i = 0; i < m; i++)
            process_one(items->paths[base + i], o, &scratch[omp_get_thread_num()], &res[i]);
        for (size_t i = 0; i < m; i++) {
            Result *r = &res[i];
            if (!r->payload) {
                if (o->strict) {
                    shard_writer_abort(w);
                    ct_die("%s: %s (--strict)", items->paths[base + i], r->err);
                }
                if (pr.tty) fputc('\n', stderr);
                ct_warn("skipping %s: %s", items->paths[base + i], r->err);
                skipped++;
                continue;
            }
            shard_writer_add(w, r->payload, (uint32_t)r->size, r->h, r->w, items->labels[base + i]);
            raw_total += r->raw;
            stored_total += r->size;
            free(r->payload);
        }
        if (base + m < items->n) progress(&pr, base + m, 0);
    }
    progress(&pr, items->n, 1);
    uint64_t n = shard_writer_count(w);
    if (n == 0) {
        shard_writer_abort(w);
        ct_die("%s split: none of the %zu image files could be decoded", label, items->n);
    }
    shard_writer_finish(w);
    for (int t = 0; t < nt; t++) resample_scratch_free(&scratch[t]);
    free(scratch);
    free(res);
    fprintf(stderr, "[%s] wrote %s: %llu records, %zu classes, %.1f MB of pixels stored in %.1f MB (%.2fx)\n", label,
            out_path, (unsigned long long)n, classes->n, raw_total / 1e6, stored_total / 1e6,
            stored_total ? (double)raw_total / stored_total : 0.0);
    if (skipped) fprintf(stderr, "[%s] skipped %zu file%s that could not be decoded (listed above)\n", label, skipped,
                         skipped == 1 ? "" : "s");
}

static void free_items(ItemList *it) {
    for (size_t i = 0; i < it->n; i++) free(it->paths[i]);
    free(it->paths);
    free(it->labels);
}

// ---------------------------------------------------------------------------------------------
// --info and --verify

static int do_info(const char *path) {
    Shard s;
    shard_open(&s, path);
    printf("file        %s\n", path);
    printf("format      version %u, codec %s, %u channel%s\n", s.version, shard_codec_name(s.codec), s.channels,
           s.channels == 1 ? "" : "s");
    printf("records     %llu\n", (unsigned long long)s.n_records);
    printf("classes     %u (table hash %016llx):", s.n_classes, (unsigned long long)s.class_hash);
    for (uint32_t c = 0; c < s.n_classes && c < 8; c++) printf(" %s%s", s.class_names[c], c + 1 < s.n_classes ? "," : "");
    printf("%s\n", s.n_classes > 8 ? " ..." : "");
    printf("bytes       %zu in the file, %llu of payloads, %llu of pixels\n", s.size,
           (unsigned long long)s.total_stored, (unsigned long long)s.total_raw);
    printf("compression %.3fx (pixels / payload bytes)\n", s.total_stored ? (double)s.total_raw / s.total_stored : 0.0);
    if (s.n_records) {
        uint32_t min_h = UINT32_MAX, min_w = UINT32_MAX;
        double sum_h = 0, sum_w = 0;
        uint64_t *per_class = ct_zalloc(s.n_classes * sizeof(uint64_t));
        uint64_t hist[40] = {0};
        for (uint64_t i = 0; i < s.n_records; i++) {
            const ShardRecord *r = &s.records[i];
            min_h = CT_MIN(min_h, r->height);
            min_w = CT_MIN(min_w, r->width);
            sum_h += r->height;
            sum_w += r->width;
            per_class[r->label]++;
            int b = 0;
            while (b < 39 && (1ull << (b + 1)) <= r->stored_size) b++;
            hist[b]++;
        }
        uint64_t cmin = UINT64_MAX, cmax = 0;
        for (uint32_t c = 0; c < s.n_classes; c++) cmin = CT_MIN(cmin, per_class[c]), cmax = CT_MAX(cmax, per_class[c]);
        printf("image size  height %u..%u (mean %.1f), width %u..%u (mean %.1f)\n", min_h, s.max_height,
               sum_h / s.n_records, min_w, s.max_width, sum_w / s.n_records);
        printf("per class   %llu..%llu records\n", (unsigned long long)cmin, (unsigned long long)cmax);
        printf("payload size histogram:\n");
        uint64_t hmax = 0;
        for (int b = 0; b < 40; b++) hmax = CT_MAX(hmax, hist[b]);
        for (int b = 0; b < 40; b++) {
            if (!hist[b]) continue;
            int bar = (int)(50.0 * hist[b] / hmax + 0.5);
            printf("  [%9llu, %9llu) %10llu  ", 1ull << b, 1ull << (b + 1), (unsigned long long)hist[b]);
            for (int k = 0; k < bar; k++) putchar('#');
            putchar('\n');
        }
        free(per_class);
    }
    shard_close(&s);
    return 0;
}

static int do_verify(const char *path) {
    Shard s;
    shard_open(&s, path);  // header, tables and index already validated here
    double t0 = ct_now();
    uint64_t bad = 0, first_bad = UINT64_MAX;
    char first_err[SHARD_ERR_LEN] = "";
#pragma omp parallel
    {
        uint8_t *buf = ct_alloc(s.max_raw_size ? s.max_raw_size : 1);
        char err[SHARD_ERR_LEN];
#pragma omp for schedule(dynamic, 256) reduction(+ : bad)
        for (uint64_t i = 0; i < s.n_records; i++) {
            if (shard_decode_err(&s, i, buf, s.max_raw_size, 1, err, sizeof err) != 0) {
                bad++;
#pragma omp critical
                {
                    if (i < first_bad) {
                        first_bad = i;
                        snprintf(first_err, sizeof first_err, "%s", err);
                    }
                }
            }
        }
        free(buf);
    }
    if (bad) {
        fprintf(stderr, "%s: error: %s\n", ct_program(), first_err);
        fprintf(stderr, "%s: error: %s: %llu of %llu records failed verification (first: record %llu)\n", ct_program(), path,
                (unsigned long long)bad, (unsigned long long)s.n_records, (unsigned long long)first_bad);
        shard_close(&s);
        return 1;
    }
    printf("%s: OK, %llu records (%u classes) verified in %.2fs\n", path, (unsigned long long)s.n_records,
           s.n_classes, ct_now() - t0);
    shard_close(&s);
    return 0;
}

// ---------------------------------------------------------------------------------------------

static void on_signal(int sig) {
    shard_writer_cleanup_on_signal();
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    ct_set_program("packdata");
    Options o = {.max_short = 256, .channels = 3, .codec = SHARD_CODEC_LZ4, .quality = 90, .split = "train"};
    const char *idx_dir = NULL, *info = NULL, *verify = NULL;
    const char *pos[2];
    int npos = 0, pixel_flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--split")) {
            if (!v || !*v || strchr(v, '/')) ct_die("--split needs a name without '/'");
            o.split = v, i++;
        } else if (!strcmp(a, "--max-short")) {
            o.max_short = ct_parse_int(a, v, 0, SHARD_MAX_DIM), i++, pixel_flags++;
        } else if (!strcmp(a, "--channels")) {
            o.channels = ct_parse_int(a, v, 1, 3), i++, pixel_flags++;
            if (o.channels == 2) ct_die("--channels: 2 is not supported (1 = gray, 3 = RGB)");
        } else if (!strcmp(a, "--codec")) {
            if (!v) ct_die("--codec needs a value: lz4, jpeg or raw");
            if (!strcmp(v, "lz4")) o.codec = SHARD_CODEC_LZ4;
            else if (!strcmp(v, "jpeg")) o.codec = SHARD_CODEC_JPEG;
            else if (!strcmp(v, "raw")) o.codec = SHARD_CODEC_RAW;
            else ct_die("--codec: unknown codec '%s' (lz4, jpeg or raw)", v);
            i++, pixel_flags++;
        } else if (!strcmp(a, "--lz4hc")) {
            o.lz4hc = 1, pixel_flags++;
        } else if (!strcmp(a, "--quality")) {
            o.quality = ct_parse_int(a, v, 1, 100), i++, pixel_flags++;
        } else if (!strcmp(a, "--strict")) {
            o.strict = 1;
        } else if (!strcmp(a, "--threads")) {
            omp_set_num_threads(ct_parse_int(a, v, 1, 4096)), i++;
        } else if (!strcmp(a, "--idx")) {
            if (!v) ct_die("--idx needs a directory");
            idx_dir = v, i++;
        } else if (!strcmp(a, "--info")) {
            if (!v) ct_die("--info needs a shard file");
            info = v, i++;
        } else if (!strcmp(a, "--verify")) {
            if (!v) ct_die("--verify needs a shard file");
            verify = v, i++;
        } else if (a[0] == '-' && a[1]) {
            ct_die("unknown flag '%s' (see packdata --help)", a);
        } else {
            if (npos == 2) ct_die("unexpected argument '%s': packdata takes SRC/ and DST/ (see --help)", a);
            pos[npos++] = a;
        }
    }
    if (o.lz4hc && o.codec != SHARD_CODEC_LZ4) ct_die("--lz4hc applies only to --codec lz4");
    if (info || verify) {
        if (npos || idx_dir || (info && verify)) ct_die("--info and --verify take one shard file and nothing else");
        return info ? do_info(info) : do_verify(verify);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    atexit(shard_writer_cleanup_on_signal);  // ct_die on the way: never leave a temporary behind
    if (idx_dir) {
        if (npos != 1) ct_die("--idx DIR takes one more argument: the output folder DST/");
        if (pixel_flags) ct_die("--idx packs 28x28 gray images as they are (1 channel, lz4): pixel flags do not apply");
        double t0 = ct_now();
        idx_pack_dir(idx_dir, pos[0], NULL, 0);
        fprintf(stderr, "packed %s into %s/train.shard and %s/val.shard in %.2fs\n", idx_dir, pos[0], pos[0],
                ct_now() - t0);
        return 0;
    }
    if (npos != 2) ct_die("expected SRC/ and DST/ (got %d path%s); see packdata --help", npos, npos == 1 ? "" : "s");
    const char *src = pos[0], *dst = pos[1];
    if (!is_dir(src)) ct_die("%s: not a directory", src);
    ct_mkdir_p(dst);
    dst_real = realpath(dst, NULL);
    fprintf(stderr, "packdata: %d threads, max short side %d, %d channel%s, codec %s%s\n", omp_get_max_threads(),
            o.max_short, o.channels, o.channels == 1 ? "" : "s", shard_codec_name(o.codec),
            o.lz4hc ? " (HC)" : "");
    char *train_dir = join(src, "train"), *val_dir = join(src, "val");
    StrList classes = {0};
    if (is_dir(train_dir)) {
        ItemList train = scan_split(train_dir, &classes, 0);
        int have_val = is_dir(val_dir);
        ItemList val = {0};
        if (have_val) {
            val = scan_split(val_dir, &classes, 1);  // checks val's classes before any work
            if (val.n == 0) ct_die("val split: no image files found under %s", val_dir);
        }
        char *out = join(dst, "train.shard");
        pack_split("train", &train, &classes, out, &o);
        free(out);
        if (have_val) {
            out = join(dst, "val.shard");
            pack_split("val", &val, &classes, out, &o);
            free(out);
        } else {
            ct_warn("%s has no val/ folder: packed only the train split", src);
        }
        free_items(&train);
        free_items(&val);
    } else {
        ItemList items = scan_split(src, &classes, 0);
        size_t n = strlen(o.split) + 8;
        char *name = ct_alloc(n);
        snprintf(name, n, "%s.shard", o.split);
        char *out = join(dst, name);
        pack_split(o.split, &items, &classes, out, &o);
        free(out);
        free(name);
        free_items(&items);
    }
    sl_free(&classes);
    free(train_dir);
    free(val_dir);
    return 0;
}
