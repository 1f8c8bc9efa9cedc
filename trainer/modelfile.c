// Loading a model file with its preprocessing (trainer/modelfile.h).
#include "trainer/filekind.h"
#include "trainer/modelfile.h"

#include <jansson.h>
#include <string.h>

#include "loader/shard.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/settings.h"
#include "util/json_write.h"
#include "util/common.h"

// A positive integer from the metadata (v: its text, NULL when absent); dies naming the file.
static int meta_int(const char *v, const char *path, const char *key, int fallback) {
    if (!v) return fallback;
    char what[1200];
    snprintf(what, sizeof what, "%s: __metadata__ %s", path, key);
    return ct_parse_int(what, v, 1, 1 << 20);
}

// What a model file says about itself: a safetensors file's __metadata__, or the same keys made
// from a checkpoint's header and recorded settings. NULL: not said.
typedef struct {
    const char *arch, *num_classes, *in_channels, *crop_size, *val_resize, *mean, *std, *blurpool, *classes;
} ModelMeta;

// The class names of a checkpoint's run, from the val shard its settings name, when that is still
// there and has the checkpoint's class table (a checkpoint does not carry the names).
static char *checkpoint_class_names(const char *shards, uint64_t class_hash) {
    if (!shards) return NULL;
    char p[4200], err[SHARD_ERR_LEN];
    snprintf(p, sizeof p, "%s/val.shard", shards);
    Shard sh;
    if (!ct_file_exists(p) || shard_open_err(&sh, p, err, sizeof err) != 0) return NULL;
    char *text = NULL;
    if (sh.class_hash == class_hash) {
        json_t *names = json_array();
        for (uint32_t i = 0; i < sh.n_classes; i++) json_array_append_new(names, json_string(sh.class_names[i]));
        text = ct_json_dumps_flags(names, JSON_COMPACT);
        json_decref(names);
    }
    shard_close(&sh);
    return text;
}

// A checkpoint as a model: its plain weights (as --weights CKPT takes them), the network its header
// names, the evaluation its recorded settings describe.
static void load_checkpoint(ModelFile *mf, const char *path, const ModelFileFlags *fl, ModelMeta *mm, char **owned) {
    Checkpoint ck;
    const char *err = checkpoint_load(path, &ck);
    if (err) ct_die("%s: %s", path, err);
    const CheckpointMeta *m = &ck.meta;
    if (fl->arch && strcmp(fl->arch, m->arch))
        ct_die("-a %s: %s says it is a %s (leave -a out to take the checkpoint's)", fl->arch, path, m->arch);
    mf->net = resnet_create_ex(m->arch, (int)m->in_channels, (int)m->num_classes, (int)m->blurpool);
    if (!mf->net) ct_die("%s: unknown architecture '%s' in the checkpoint", path, m->arch);
    ResNet *net = mf->net;
    if (m->n_params == resnet_param_count(net) && m->n_params != net->n_params) {  // an older build's layout
        float *a = ct_alloc(net->n_params * sizeof(float));
        resnet_params_unpack(net, a, ck.params);
        free(ck.params);
        ck.params = a;
    } else if (m->n_params != net->n_params || m->n_buffers != net->n_bufs || m->n_counts != net->n_counts) {
        ct_die("%s: tensor sizes differ from a %s", path, m->arch);
    }
    memcpy(net->params, ck.params, net->n_params * sizeof(float));
    memcpy(net->bufs, ck.buffers, net->n_bufs * sizeof(float));
    memcpy(net->counts, ck.counts, net->n_counts * sizeof(int64_t));
    if (ck.ema_params)
        fprintf(stderr, "train: %s is a checkpoint with an EMA of the weights: this takes its plain weights (the run's "
                        "best.safetensors and model.safetensors hold the better of the two)\n", path);
    json_t *rec = ck.settings ? json_loads(ck.settings, 0, NULL) : NULL;
    static char crop[16], resize[16];
    json_t *v;
    // The recorded evaluation size (resolved, so never auto here).
    if ((v = json_object_get(rec, "val-crop-size")) && json_is_integer(v) && json_integer_value(v) > 0) {
        snprintf(crop, sizeof crop, "%lld", (long long)json_integer_value(v));
        mm->crop_size = crop;
    }
    if ((v = json_object_get(rec, "val-resize")) && json_is_integer(v) && json_integer_value(v) > 0) {
        snprintf(resize, sizeof resize, "%lld", (long long)json_integer_value(v));
        mm->val_resize = resize;
    }
    if ((v = json_object_get(rec, "mean")) && json_is_string(v) && strcmp(json_string_value(v), "auto"))
        mm->mean = owned[0] = ct_strdup(json_string_value(v));
    if ((v = json_object_get(rec, "std")) && json_is_string(v) && strcmp(json_string_value(v), "auto"))
        mm->std = owned[1] = ct_strdup(json_string_value(v));
    v = json_object_get(rec, "shards");
    mm->classes = owned[2] = checkpoint_class_names(json_is_string(v) ? json_string_value(v) : NULL, m->class_hash);
    json_decref(rec);
    checkpoint_free(&ck);
}

static void load_class_file(ModelFile *mf, const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) ct_die_errno("--classes %s: cannot open (give a text file with one class name per line)", path);
    int n = 0, K = mf->net->num_classes;
    char **names = ct_zalloc(sizeof(char *) * (size_t)K);
    char line[4096];
    while (fgets(line, sizeof line, fp)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        if (n == K) ct_die("--classes %s: more than the model's %d classes", path, K);
        names[n++] = ct_strdup(line);
    }
    fclose(fp);
    if (n != K) ct_die("--classes %s: %d names, but the model has %d classes", path, n, K);
    mf->class_names = names;
    mf->n_classes_named = n;
}

static void load_class_meta(ModelFile *mf, const char *path, const char *text) {
    json_error_t jerr;
    json_t *a = json_loads(text, 0, &jerr);
    int K = mf->net->num_classes;
    if (!a || !json_is_array(a) || (int)json_array_size(a) != K)
        ct_die("%s: __metadata__ classes is not a JSON array of %d names; give --classes FILE", path, K);
    mf->class_names = ct_zalloc(sizeof(char *) * (size_t)K);
    for (int i = 0; i < K; i++) {
        const char *s = json_string_value(json_array_get(a, (size_t)i));
        if (!s) ct_die("%s: __metadata__ classes[%d] is not a string; give --classes FILE", path, i);
        mf->class_names[i] = ct_strdup(s);
    }
    mf->n_classes_named = K;
    json_decref(a);
}

void modelfile_load(ModelFile *mf, const char *path, const ModelFileFlags *fl) {
    memset(mf, 0, sizeof *mf);
    path = settings_model_in(path);  // a run directory: its best model
    ModelMeta mm;
    memset(&mm, 0, sizeof mm);
    char *owned[3] = {NULL, NULL, NULL};
    StFile f;
    int st = !checkpoint_is(path);
    if (!st) {
        load_checkpoint(mf, path, fl, &mm, owned);
    } else {
        char *err = st_open(path, &f);
        if (err) {
            char note[1300];
            ct_die("--weights %s%s", err, filekind_note(path, "a safetensors file", note, sizeof note));
        }
        mm = (ModelMeta){st_meta(&f, "arch"), st_meta(&f, "num_classes"), st_meta(&f, "in_channels"),
                         st_meta(&f, "crop_size"), st_meta(&f, "val_resize"), st_meta(&f, "mean"),
                         st_meta(&f, "std"), st_meta(&f, "blurpool"), st_meta(&f, "classes")};
        const char *arch = mm.arch;
        if (fl->arch && arch && strcmp(fl->arch, arch))
            ct_die("-a %s: %s says it is a %s (leave -a out to take the file's)", fl->arch, path, arch);
        if (!arch) arch = fl->arch;
        if (!arch) ct_die("%s names no architecture in its metadata (not written by ctrain): give -a ARCH (%s)", path, resnet_arch_list());
        if (!resnet_arch_valid(arch)) ct_die("-a %s: unknown architecture; one of %s", arch, resnet_arch_list());
        // A torchvision file has no metadata: its shapes tell the class and channel counts.
        const StTensor *fc = st_find(&f, "fc.weight"), *stem = st_find(&f, "conv1.weight");
        int classes = fc && fc->ndim == 2 ? (int)fc->shape[0] : 0;
        int channels = stem && stem->ndim == 4 ? (int)stem->shape[1] : 0;
        classes = meta_int(mm.num_classes, path, "num_classes", classes);
        channels = meta_int(mm.in_channels, path, "in_channels", channels);
        if (classes < 1 || channels < 1) ct_die("%s: no fc.weight [classes, features] or conv1.weight [K, C, R, S]: not a ResNet state_dict", path);
        // BlurPool's blurs have no tensors: only the metadata can say the network has them.
        mf->net = resnet_create_ex(arch, channels, classes, mm.blurpool && !strcmp(mm.blurpool, "1"));
        err = st_load_resnet_from(&f, mf->net, NULL);
        if (err) ct_die("%s: does not load into %s with %d classes and %d channels: %s", path, arch, classes, channels, err);
    }

    int C = mf->net->in_channels;
    mf->mean = ct_alloc(sizeof(float) * (size_t)C);
    mf->std = ct_alloc(sizeof(float) * (size_t)C);
    dataset_auto_norm(C, mf->mean, mf->std);
    const char *mean = fl->mean ? fl->mean : mm.mean;
    const char *std = fl->std ? fl->std : mm.std;
    if (mean) config_parse_floats("mean", mean, mf->mean, C);
    if (std) config_parse_floats("std", std, mf->std, C);
    for (int i = 0; i < C; i++)
        if (!(mf->std[i] > 0)) ct_die("--std: channel %d is %g; must be > 0", i, mf->std[i]);
    // Without a record of the training size: torchvision's 224 (256 resize), 32 for CIFAR nets.
    int cifar = mf->net->cifar;
    mf->crop = fl->crop ? fl->crop : meta_int(mm.crop_size, path, "crop_size", cifar ? 32 : 224);
    // The short side before the crop: the recorded one, unless --crop-size changed the crop;
    // else torchvision's crop / 0.875 (CIFAR nets: their native 32, no resize).
    int resize_default = (int)(mf->crop / 0.875);
    if (cifar && !fl->crop && !mm.crop_size) resize_default = 32;
    mf->resize = fl->resize ? fl->resize : fl->crop ? resize_default : meta_int(mm.val_resize, path, "val_resize", resize_default);
    if (mf->resize < mf->crop) ct_die("--resize %d: smaller than the crop %d", mf->resize, mf->crop);

    if (fl->classes_path) load_class_file(mf, fl->classes_path);
    else if (mm.classes) load_class_meta(mf, path, mm.classes);
    if (st) st_close(&f);
    for (int i = 0; i < 3; i++) free(owned[i]);
}

void modelfile_free(ModelFile *mf) {
    resnet_free(mf->net);
    free(mf->mean);
    free(mf->std);
    for (int i = 0; i < mf->n_classes_named; i++) free(mf->class_names[i]);
    free(mf->class_names);
    memset(mf, 0, sizeof *mf);
}

// One argument: "--resize" and "3" of "--resize=3" (a long flag's inline value), else the whole argument.
typedef struct {
    char name[64];
    const char *inline_value;  // NULL: none
} SubArg;

static void sub_arg(SubArg *a, const char *arg) {
    snprintf(a->name, sizeof a->name, "%s", arg);
    a->inline_value = NULL;
    char *cut = strncmp(a->name, "--", 2) ? NULL : strchr(a->name, '=');
    if (cut) {
        *cut = 0;
        a->inline_value = arg + (cut - a->name) + 1;
    }
}

// Applies flag f given as argv[*i] (its value inline, or the next argument: *i advances).
static void sub_set(const char *command, const SubFlag *f, const SubArg *a, int argc, char **argv, int *i) {
    if (f->kind == SUB_SET) {
        *(int *)f->dst = 1;
        return;
    }
    const char *v = a->inline_value;
    if (!v) {
        if (*i + 1 >= argc) ct_die("%s: needs a value (see train %s --help)", argv[*i], command);
        v = argv[++*i];
    }
    if (f->kind == SUB_INT) *(int *)f->dst = ct_parse_int(f->name, v, f->lo, f->hi);
    else *(const char **)f->dst = v;
}

static const SubFlag *sub_find(const SubFlag *flags, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(name, flags[k].name) || (flags[k].alias && !strcmp(name, flags[k].alias))) return &flags[k];
    return NULL;
}

int subcommand_parse(const char *command, ModelFileFlags *fl, const SubFlag *flags, int n_flags, int argc,
                     char **argv, void (*positional)(void *ctx, const char *arg), void *ctx) {
    const SubFlag model[] = {
        {"--arch", "-a", SUB_STR, &fl->arch, 0, 0},
        {"--resize", NULL, SUB_INT, &fl->resize, 1, 8192},
        {"--mean", NULL, SUB_STR, &fl->mean, 0, 0},
        {"--std", NULL, SUB_STR, &fl->std, 0, 0},
        {"--classes", NULL, SUB_STR, &fl->classes_path, 0, 0},
    };
    for (int i = 2; i < argc; i++) {
        SubArg a;
        sub_arg(&a, argv[i]);
        if (!strcmp(a.name, "-h") || !strcmp(a.name, "--help")) return 1;
        const SubFlag *f = sub_find(model, (int)(sizeof model / sizeof model[0]), a.name);
        if (!f) f = sub_find(flags, n_flags, a.name);
        if (f) sub_set(command, f, &a, argc, argv, &i);
        else if (a.name[0] == '-' && a.name[1]) ct_die("%s: unknown flag '%s' (see train %s --help)", command, argv[i], command);
        else if (positional) positional(ctx, argv[i]);
        else ct_die("%s: unknown argument '%s' (see train %s --help)", command, argv[i], command);
    }
    return 0;
}
