// `train predict` (trainer/predict.h): flags, the list of image files (folders walked in name
// order), then batch after batch: decode + eval preprocessing of the batch's files in parallel
// (a file per thread at a time), the eval forward of the batch on the backend (trainer/backend.h,
// through predict_forward), and the report in input order. An image's crop depends only on its
// file and a batch's logits only on its crops, so the output is the same for any thread count.
#include "trainer/filekind.h"
#include "trainer/predict.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "loader/augment.h"
#include "loader/image.h"
#include "trainer/backend.h"
#include "trainer/modelfile.h"
#include "util/common.h"
#include "util/json_write.h"

static void predict_usage(FILE *f) {
    fprintf(f,
            "usage: train predict --weights W.safetensors [flags] IMAGE|FOLDER...\n"
            "\n"
            "Classifies JPEG/PNG files (folders: their .jpg/.jpeg/.png files, recursively, in name order) with\n"
            "the evaluation's preprocessing: resize the short side to --resize, center-crop\n"
            "--crop-size, normalise with the model's mean/std. Prints the top-k classes per image.\n"
            "A file that cannot be read or decoded is reported by name and skipped; the exit status\n"
            "is then 1.\n"
            "\n"
            "  --weights W        model.safetensors from a run (architecture, preprocessing and class\n"
            "                     names in its metadata) or torchvision-named weights with -a\n"
            "  -a, --arch ARCH    architecture when W does not name one (%s)\n"
            "  -k, --top-k K      classes per image (default 5, at most the class count)\n"
            "  --format table|json  a table (default) or one JSON object per image and line:\n"
            "                     {\"file\", \"top\": [{\"index\", \"name\", \"prob\"}...]} or {\"file\", \"error\"}\n"
            "  --logits           json: add the raw logits of every class\n"
            "  --classes FILE     class names, one per line (default: the model's; else indices only)\n"
            "  --crop-size PX     default: the model's crop_size, else 224 (32 for resnet20..110)\n"
            "  --resize PX        short side before the crop (default: the model's, else PX/0.875)\n"
            "  --mean M,M,M, --std S,S,S  default: the model's, else ImageNet's (RGB) or 0.5/0.25 (gray)\n"
            "  --tta none|flip    flip: average the logits of the crop and its mirror image, as train's\n"
            "                     --tta flip evaluates (default none)\n"
            "  -b, --batch-size N images per forward (default 32)\n"
            "  -j, --workers N|auto  threads decoding and preprocessing a batch's files (default auto:\n"
            "                     the OpenMP thread count); the output does not depend on it\n"
            "  --device auto|cpu|cuda  where the forward runs, in fp32 (auto: cuda when a GPU is found)\n"
            "  -h, --help         this text\n",
            resnet_arch_list());
}

typedef struct {
    char **v;
    int n, cap;
} PathList;

static void push(PathList *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = ct_realloc(l->v, sizeof(char *) * (size_t)l->cap);
    }
    l->v[l->n++] = ct_strdup(s);
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

// Inside folders only files named as images are taken (as packdata does): notes, shards and
// other files beside the photos are skipped and counted; a file named on the command line is
// always taken, so one that is not an image is an error by name.
static int has_image_extension(const char *name) {
    static const char *exts[] = {".jpg", ".jpeg", ".png"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t e = strlen(exts[i]);
        if (n > e && !strcasecmp(name + n - e, exts[i])) return 1;
    }
    return 0;
}
static int g_skipped_files;

// A folder's image files, recursively, in byte order of their names (hidden entries skipped); a
// path that is not a folder is taken as it is (a missing file fails later, by name).
static void collect_in(PathList *l, const char *path, int in_folder) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (in_folder && !has_image_extension(path)) g_skipped_files++;
        else push(l, path);
        return;
    }
    struct dirent **ents;
    int n = scandir(path, &ents, NULL, by_name);
    if (n < 0) {
        push(l, path);  // reported as unreadable with the reason
        return;
    }
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.') {
            size_t len = strlen(path) + strlen(ents[i]->d_name) + 2;
            char *child = ct_alloc(len);
            snprintf(child, len, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", ents[i]->d_name);
            collect_in(l, child, 1);
            free(child);
        }
        free(ents[i]);
    }
    free(ents);
}

static void collect_arg(void *inputs, const char *arg) { collect_in(inputs, arg, 0); }

// Preprocessed crop (uint8 HWC, crop x crop x C) of one file; 0, or -1 with the reason in err.
static int load_image(const char *path, const ModelFile *mf, uint8_t *crop, ResampleScratch *scratch, char *err,
                      size_t errlen) {
    uint8_t *data = NULL, *pix = NULL;
    size_t n = 0;
    if (ct_read_file_err(path, (char **)&data, &n, err, errlen) != 0) return -1;
    uint32_t h = 0, w = 0;
    int C = mf->net->in_channels;
    if (C != 1 && C != 3) {
        free(data);
        return ct_fail(err, errlen, "the model takes %d channels; images decode to 1 or 3", C);
    }
    int rc = image_decode(data, n, C, &pix, &h, &w, err, errlen);
    if (rc != 0) {  // say what the file is when it is something else (a checkpoint, a model file...)
        char kind[96], note[300];
        if (filekind(path, kind, sizeof kind) && strcmp(kind, "a PNG image") && strcmp(kind, "a JPEG image")) {
            snprintf(note, sizeof note, " (the file is %s)", kind);
            size_t k = strlen(err);
            snprintf(err + k, errlen > k ? errlen - k : 0, "%s", note);
        }
    }
    free(data);
    if (rc != 0) return -1;
    AugmentConfig a = {.crop = mf->crop, .train = 0, .resize = mf->resize};
    augment_config_defaults(&a);
    AugmentPlan p;
    augment_plan(&a, (int)h, (int)w, 0, 0, &p);
    augment_apply(&a, &p, pix, (int)w, C, crop, scratch);
    free(pix);
    return 0;
}

// The one place predict runs the network: the eval forward of N preprocessed crops on the
// backend (on the CPU that forward runs BN-folded: trainer/backend_cpu.c).
// --tta flip: the same averaging as train's evaluation (trainer/step.c): the logits of the crops
// and of their mirrors, (a + m) * 0.5 in float32; mirror and avg have room for N crops / rows.
static const float *predict_forward(Backend *b, const uint8_t *crops, int N, int S, const ModelFile *mf, int flip,
                                    uint8_t *mirror, float *avg) {
    const float *logits = backend_forward(b, crops, N, S, mf->mean, mf->std, 0);
    if (!flip) return logits;
    size_t n = (size_t)N * (size_t)mf->net->num_classes;
    memcpy(avg, logits, sizeof(float) * n);
    augment_flip_batch(mirror, crops, N, S, S, mf->net->in_channels);
    const float *lm = backend_forward(b, mirror, N, S, mf->mean, mf->std, 0);
    for (size_t i = 0; i < n; i++) avg[i] = (avg[i] + lm[i]) * 0.5f;
    return avg;
}

// One image's line(s): its top-k classes, or its error.
static void report(const char *path, const char *err, const float *logits, const ModelFile *mf, int topk, int json,
                   int with_logits, double *prob, int *order) {
    int K = mf->net->num_classes;
    if (err) {
        fprintf(stderr, "predict: %s: %s (skipped)\n", path, err);
        if (json) {
            json_t *o = json_pack("{s:s, s:s}", "file", path, "error", err);
            char *t = ct_json_dumps_flags(o, JSON_COMPACT);
            printf("%s\n", t);
            free(t);
            json_decref(o);
        }
        return;
    }
    // Softmax in double, shifted by the largest logit.
    double mx = logits[0], sum = 0;
    for (int k = 1; k < K; k++) mx = fmax(mx, logits[k]);
    for (int k = 0; k < K; k++) sum += (prob[k] = exp((double)logits[k] - mx));
    for (int k = 0; k < K; k++) prob[k] /= sum;
    // Partial selection of the top k; ties keep the lower index first.
    for (int k = 0; k < K; k++) order[k] = k;
    for (int r = 0; r < topk; r++) {
        int best = r;
        for (int k = r + 1; k < K; k++)
            if (prob[order[k]] > prob[order[best]] || (prob[order[k]] == prob[order[best]] && order[k] < order[best])) best = k;
        int t = order[r];
        order[r] = order[best];
        order[best] = t;
    }
    if (json) {
        json_t *top = json_array();
        for (int r = 0; r < topk; r++) {
            int k = order[r];
            json_t *o = json_pack("{s:i}", "index", k);
            if (mf->n_classes_named) json_object_set_new(o, "name", json_string(mf->class_names[k]));
            json_object_set_new(o, "prob", json_real(ct_json_float((float)prob[k])));
            json_array_append_new(top, o);
        }
        json_t *o = json_pack("{s:s, s:o}", "file", path, "top", top);
        if (with_logits) {
            json_t *l = json_array();
            for (int k = 0; k < K; k++) json_array_append_new(l, json_real(ct_json_float(logits[k])));
            json_object_set_new(o, "logits", l);
        }
        char *t = ct_json_dumps_flags(o, JSON_COMPACT);
        printf("%s\n", t);
        free(t);
        json_decref(o);
    } else {
        printf("%s\n", path);
        for (int r = 0; r < topk; r++) {
            int k = order[r];
            printf("  %2d. %7.3f%%  %5d  %s\n", r + 1, 100 * prob[k], k, mf->n_classes_named ? mf->class_names[k] : "");
        }
    }
}

int predict_main(int argc, char **argv) {
    const char *weights = NULL, *format = "table", *device = "auto", *workers_flag = "auto", *tta = "none";
    int topk = 5, with_logits = 0, batch = 32;
    ModelFileFlags fl = {0};
    PathList inputs = {0};
    const SubFlag flags[] = {
        {"--weights", NULL, SUB_STR, &weights, 0, 0},
        {"--top-k", "-k", SUB_INT, &topk, 1, 1 << 20},
        {"--format", NULL, SUB_STR, &format, 0, 0},
        {"--logits", NULL, SUB_SET, &with_logits, 0, 0},
        {"--crop-size", NULL, SUB_INT, &fl.crop, 1, 4096},
        {"--batch-size", "-b", SUB_INT, &batch, 1, 1 << 16},
        {"--workers", "-j", SUB_STR, &workers_flag, 0, 0},
        {"--device", NULL, SUB_STR, &device, 0, 0},
        {"--tta", NULL, SUB_STR, &tta, 0, 0},
    };
    if (subcommand_parse("predict", &fl, flags, (int)(sizeof flags / sizeof flags[0]), argc, argv, collect_arg, &inputs)) {
        predict_usage(stdout);
        return 0;
    }
    if (!weights) ct_die("predict: --weights W.safetensors is required (see train predict --help)");
    int json = !strcmp(format, "json");
    if (!json && strcmp(format, "table")) ct_die("--format %s: must be table or json", format);
    if (strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda"))
        ct_die("--device %s: must be auto, cpu or cuda", device);
    if (strcmp(tta, "none") && strcmp(tta, "flip")) ct_die("--tta %s: must be none or flip", tta);
    int flip = !strcmp(tta, "flip");
    int workers = strcmp(workers_flag, "auto") ? ct_parse_int("--workers", workers_flag, 1, 1024) : omp_get_max_threads();
    if (g_skipped_files)
        fprintf(stderr, "predict: skipped %d file%s without an image extension (.jpg, .jpeg, .png) inside the folders given\n",
                g_skipped_files, g_skipped_files > 1 ? "s" : "");
    if (!inputs.n) ct_die("predict: no images given (files or folders after the flags; see train predict --help)");

    ModelFile mf;
    modelfile_load(&mf, weights, &fl);
    ResNet *m = mf.net;
    int K = m->num_classes, C = m->in_channels, S = mf.crop;
    if (topk > K) topk = K;
    TensorDim *dims = ct_alloc(sizeof(TensorDim) * (size_t)m->n_tensors);
    if (resnet_shapes(m, S, S, dims) != 0) ct_die("--crop-size %d: too small for %s", S, m->arch);
    free(dims);
    BackendKind kind = backend_resolve(device, 1);
    Backend *be = backend_create(kind, m, 0, 0, 0, NULL);  // fp32, the default routes
    backend_upload(be, NULL);
    if (batch > inputs.n) batch = inputs.n;
    size_t img = (size_t)S * S * C;
    uint8_t *crops = ct_alloc(img * (size_t)batch);       // the batch's good crops, packed
    uint8_t *slot = ct_alloc(img * (size_t)batch);        // crop of input j of the batch
    uint8_t *mirror = flip ? ct_alloc(img * (size_t)batch) : NULL;
    float *avg = flip ? ct_alloc(sizeof(float) * (size_t)K * (size_t)batch) : NULL;
    char (*errs)[512] = ct_alloc(sizeof *errs * (size_t)batch);
    ResampleScratch *scratch = ct_zalloc(sizeof *scratch * (size_t)workers);
    double *prob = ct_alloc(sizeof(double) * (size_t)K);
    int *order = ct_alloc(sizeof(int) * (size_t)K);
    int failed = 0;
    if (!json)
        printf("%s: %s, %d classes, %dx%d crop of a %d short side%s, on %s\n", weights, m->arch, K, S, S, mf.resize,
               flip ? ", logits averaged with the mirror image's" : "", backend_name(kind));
    for (int f0 = 0; f0 < inputs.n; f0 += batch) {
        int n = CT_MIN(batch, inputs.n - f0);
#pragma omp parallel for num_threads(workers) schedule(dynamic, 1)
        for (int j = 0; j < n; j++) {
            errs[j][0] = 0;
            if (load_image(inputs.v[f0 + j], &mf, slot + img * j, &scratch[omp_get_thread_num()], errs[j], sizeof errs[j]) != 0 &&
                !errs[j][0])
                snprintf(errs[j], sizeof errs[j], "could not be decoded");
        }
        int good = 0;
        for (int j = 0; j < n; j++)
            if (!errs[j][0]) memcpy(crops + img * good++, slot + img * j, img);
        const float *logits = good ? predict_forward(be, crops, good, S, &mf, flip, mirror, avg) : NULL;
        for (int j = 0, g = 0; j < n; j++) {
            const char *err = errs[j][0] ? errs[j] : NULL;
            report(inputs.v[f0 + j], err, err ? NULL : logits + (size_t)K * g, &mf, topk, json, with_logits, prob, order);
            if (err) failed++;
            else g++;
        }
        fflush(stdout);
    }
    if (failed) fprintf(stderr, "predict: %d of %d file(s) could not be classified\n", failed, inputs.n);
    free(prob);
    free(order);
    free(crops);
    free(slot);
    free(mirror);
    free(avg);
    free(errs);
    for (int t = 0; t < workers; t++) resample_scratch_free(&scratch[t]);
    free(scratch);
    backend_free(be);
    modelfile_free(&mf);
    for (int i = 0; i < inputs.n; i++) free(inputs.v[i]);
    free(inputs.v);
    return failed ? 1 : 0;
}
