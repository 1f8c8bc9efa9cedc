// A run's recorded settings and --resume from them (trainer/settings.h).
#include "trainer/filekind.h"
#include "trainer/settings.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "util/common.h"

// Flags a resume takes as given without comparing: they cannot change the weights a step makes
// (how long to train, loader threads, logging, where files go, waiting and failure limits,
// graph replay, which is bit-identical, bucket sizes, which only group the same averages), or
// their changes are handled and said where they apply (--ema: trainer/state.c resume_ema).
// --epochs moves the end; a schedule that depends on it (cosine, linear, poly) then takes another
// course from here, which the resume says.
static const char *RESUME_NEUTRAL[] = {"epochs",      "workers", "print-freq",    "timeout", "out",
                                       "cuda-graphs", "bucket-mb", "max-nonfinite", "deterministic",
                                       "ema",         "ema-every", "max-bad-records"};
// Flags that belong to one command, never restored nor compared: what the command does (resume,
// evaluate, start from weights, read a recipe, the demo's shorthand), this node's place in a
// multi-node run, and test hooks. --gpus is restored as the --device and --ranks it set.
static const char *RESUME_OWN[] = {"resume",    "weights",   "reset-head", "evaluate", "config",
                                   "demo",      "gpus",      "overwrite",  "node-rank", "master",
                                   "dump-batches", "dry-run"};

// Flags a resume takes with a note: moving a run to another machine (a checkpoint is the same on
// either backend) is legitimate, but the steps from there round differently.
static const char *RESUME_NOTED[] = {"device", "precision", "comm"};
// --evaluate --resume: what decides the numbers; another value given is used, with a note.
static const char *EVAL_NOTED[] = {"arch", "crop-size", "val-crop-size", "val-resize", "mean", "std", "blurpool", "tta"};

static int listed(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, list[i])) return 1;
    return 0;
}
#define LISTED(name, list) listed(name, list, CT_ARRAY_LEN(list))

json_t *settings_json(const Config *c) {
    json_t *s = json_object();
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        const Flag *fl = &CONFIG_FLAGS[i];
        const void *p = (const char *)c + fl->offset;
        json_t *v = NULL;
        switch (fl->type) {
        case F_INT: v = json_integer(*(const int *)p); break;
        case F_LL: v = json_integer(*(const long long *)p); break;
        case F_DBL: v = json_real(*(const double *)p); break;
        case F_STR: v = json_string(*(const char *const *)p); break;
        case F_BOOL: v = json_boolean(*(const int *)p); break;
        }
        json_object_set_new(s, fl->name, v ? v : json_null());  // a string that is not UTF-8: null
    }
    json_object_set_new(s, "shards", json_string(c->shards));
    // The flags that were auto: a resume resolves them again from the flags they follow.
    json_t *autos = json_array();
    for (int i = 0; i < CONFIG_N_FLAGS; i++)
        if (c->was_auto[i]) json_array_append_new(autos, json_string(CONFIG_FLAGS[i].name));
    json_object_set_new(s, "auto", autos);
    return s;
}

void settings_flag_text(const Config *c, const Flag *fl, char *buf, size_t n) {
    const void *p = (const char *)c + fl->offset;
    switch (fl->type) {
    case F_INT:
        if (*(const int *)p == 0 && !strcmp(fl->def, "auto")) snprintf(buf, n, "auto");
        else snprintf(buf, n, "%d", *(const int *)p);
        break;
    case F_LL: snprintf(buf, n, "%lld", *(const long long *)p); break;
    case F_DBL: snprintf(buf, n, "%.17g", *(const double *)p);
        // The shortest text that reads back as the same double (0.1, not 0.10000000000000001;
        // 300, not 3e+02).
        if (*(const double *)p == (double)(long long)*(const double *)p && fabs(*(const double *)p) < 1e15) {
            snprintf(buf, n, "%lld", (long long)*(const double *)p);
            break;
        }
        for (int prec = 1; prec <= 17; prec++) {
            char t[64];
            snprintf(t, sizeof t, "%.*g", prec, *(const double *)p);
            if (strtod(t, NULL) == *(const double *)p) { snprintf(buf, n, "%s", t); break; }
        }
        break;
    case F_STR: snprintf(buf, n, "%s", *(const char *const *)p); break;
    case F_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "on" : "off"); break;
    }
}

char *settings_node_text(const Config *c) {
    size_t cap = 4096, n = 0;
    char *t = ct_alloc(cap);
    t[0] = 0;
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        const Flag *fl = &CONFIG_FLAGS[i];
        if (config_flag_node_local(fl)) continue;
        char v[4200];  // a path's length at most
        settings_flag_text(c, fl, v, sizeof v);
        size_t need = n + strlen(fl->name) + 2 * strlen(v) + 8;
        if (need > cap) {
            while (need > cap) cap *= 2;
            t = ct_realloc(t, cap);
        }
        n += (size_t)sprintf(t + n, "--%s\t", fl->name);
        for (const char *q = v; *q; q++) {
            if (*q == '\n') t[n++] = '\\', t[n++] = 'n';
            else if (*q == '\t') t[n++] = '\\', t[n++] = 't';
            else t[n++] = *q;
        }
        t[n++] = '\n';
        t[n] = 0;
    }
    return t;
}

void settings_append_arg(char *buf, size_t n, const char *s) {
    size_t k = strlen(buf);
    if (k >= n) return;
    int plain = *s != 0;
    for (const char *q = s; *q; q++)
        plain &= (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || strchr("_./,:=+-@%", *q);
    if (k) buf[k++] = ' ';
    if (plain) {
        snprintf(buf + k, n - k, "%s", s);
        return;
    }
    // '...' with each ' written as '\''.
    if (k < n) buf[k++] = '\'';
    for (const char *q = s; *q && k + 5 < n; q++) {
        if (*q == '\'') { memcpy(buf + k, "'\\''", 4); k += 4; }
        else buf[k++] = *q;
    }
    if (k < n - 1) buf[k++] = '\'';
    buf[k < n ? k : n - 1] = 0;
}

static const char *argv0_of(const Config *c) { return c->argv0 && c->argv0[0] ? c->argv0 : "train"; }

void settings_resume_command(const Config *c, const char *out, char *buf, size_t n) {
    buf[0] = 0;
    settings_append_arg(buf, n, argv0_of(c));
    settings_append_arg(buf, n, "--resume");
    settings_append_arg(buf, n, out);
}

// A recorded value as the text the flag parser takes; 0 when the record has none usable.
static int recorded_text(const Flag *fl, json_t *v, char *buf, size_t n) {
    if (!v) return 0;
    switch (fl->type) {
    case F_INT:
    case F_LL:
        if (!json_is_integer(v)) return 0;
        if (fl->type == F_INT && json_integer_value(v) == 0 && !strcmp(fl->def, "auto")) snprintf(buf, n, "auto");
        else snprintf(buf, n, "%lld", (long long)json_integer_value(v));
        return 1;
    case F_DBL:
        if (!json_is_number(v)) return 0;
        snprintf(buf, n, "%.17g", json_number_value(v));
        return 1;
    case F_STR:
        if (!json_is_string(v)) return 0;
        snprintf(buf, n, "%s", json_string_value(v));
        return 1;
    case F_BOOL:
        if (!json_is_boolean(v)) return 0;
        snprintf(buf, n, "%s", json_is_true(v) ? "1" : "0");
        return 1;
    }
    return 0;
}

static int same_value(const Config *a, const Config *b, const Flag *fl) {
    const char *pa = (const char *)a + fl->offset, *pb = (const char *)b + fl->offset;
    if (fl->type == F_STR) return !strcmp(*(const char *const *)pa, *(const char *const *)pb);
    return !memcmp(pa, pb, config_flag_size(fl));
}

// PATH or PATH/last.ckpt (a run directory), into static storage.
static const char *resume_file(const char *path) {
    static char file[PATH_MAX + 16];
    struct stat st;
    if (stat(path, &st) != 0) ct_die("--resume: no such file or run directory '%s'", path);
    if (!S_ISDIR(st.st_mode)) return path;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    snprintf(file, sizeof file, "%.*s/last.ckpt", (int)n, path);
    if (!ct_file_exists(file))
        ct_die("--resume %s: the directory holds no last.ckpt (a run writes it at the end of each epoch and when "
               "stopped by SIGINT/SIGTERM; this one never got that far)", path);
    return file;
}

// The directory of a checkpoint path (kept for the process: Config strings point at it).
static const char *dir_of(const char *path) {
    char *copy = ct_strdup(path);
    char *dir = ct_strdup(dirname(copy));
    free(copy);
    return dir;
}

// The JSON record of a checkpoint's settings (NULL when it has none); dies naming flag and path.
static json_t *record_of(const char *path, const char *flag) {
    char *text = NULL;
    const char *err = checkpoint_read_settings(path, &text);
    if (err) ct_die("%s %s: %s", flag, path, err);
    if (!text) return NULL;  // a checkpoint of an older build
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    free(text);
    if (!json_is_object(doc)) ct_die("%s %s: its recorded settings are not a JSON object (%s)", flag, path, jerr.text);
    return doc;
}

// The record over c: flags not given take the recorded value; a given one that differs is taken
// when neutral (or noted, or, for an evaluation, used with a note) and otherwise listed in diff.
// rec receives the recorded values. Returns the number of refused differences.
static int apply_record(Config *c, ConfigGiven *given, json_t *doc, Config *rec, char *diff, size_t diff_cap,
                        const char *path) {
    json_t *autos = json_object_get(doc, "auto");
    *rec = *c;
    int ndiff = 0;
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        const Flag *fl = &CONFIG_FLAGS[i];
        if (LISTED(fl->name, RESUME_OWN)) continue;
        if (!strcmp(fl->name, "out") && (c->evaluate || !config_given(given, "out"))) continue;  // the checkpoint's directory
        // An evaluation at another crop given: the sizes that follow the crop follow it, as in a run.
        if (c->evaluate && !config_given(given, fl->name) &&
            ((!strcmp(fl->name, "val-crop-size") && config_given(given, "crop-size")) ||
             (!strcmp(fl->name, "val-resize") && (config_given(given, "crop-size") || config_given(given, "val-crop-size")))))
            continue;
        char v[4096];
        if (!recorded_text(fl, json_object_get(doc, fl->name), v, sizeof v)) continue;  // a flag newer than the run
        int was_auto = 0;
        for (size_t k = 0; json_is_array(autos) && k < json_array_size(autos); k++)
            was_auto |= json_is_string(json_array_get(autos, k)) && !strcmp(json_string_value(json_array_get(autos, k)), fl->name);
        if (was_auto) snprintf(v, sizeof v, "auto");
        config_set_flag(rec, fl, fl->type == F_STR ? ct_strdup(v) : v);
        // An automatic count given as auto is the same as not given.
        int given_auto = fl->type == F_INT && !strcmp(fl->def, "auto") && *(const int *)((const char *)c + fl->offset) == 0;
        if (config_given(given, fl->name) && !given_auto) {
            if (same_value(c, rec, fl)) continue;
            char old[256], now[256];
            settings_flag_text(rec, fl, old, sizeof old);
            settings_flag_text(c, fl, now, sizeof now);
            // A schedule that depends on the run's length follows the new one from here.
            const char *sched = json_string_value(json_object_get(doc, "lr-schedule"));
            if (!strcmp(fl->name, "epochs") && !c->evaluate && sched && strcmp(sched, "step"))
                fprintf(stderr, "train: note: --resume %s: --epochs %s (the run had %s): the %s schedule's rate from here "
                                "follows the new length\n", path, now, old, sched);
            if (LISTED(fl->name, RESUME_NEUTRAL)) continue;
            if (c->evaluate) {  // an evaluation changes no run: the flag given is used
                if (LISTED(fl->name, EVAL_NOTED))
                    fprintf(stderr, "train: note: --%s %s given; %s was trained with --%s %s\n", fl->name, now, path,
                            fl->name, old);
                continue;
            }
            if (LISTED(fl->name, RESUME_NOTED)) {
                fprintf(stderr, "train: note: --resume %s: --%s %s given (the run had %s): it continues so, but the steps "
                                "from here are not bit for bit those the run would have taken with %s\n", path,
                        fl->name, now, old, old);
                continue;
            }
            size_t k = strlen(diff);
            char from[96] = "";
            if (given->config_line[i]) snprintf(from, sizeof from, " (from --config)");
            else if (given->env[i]) snprintf(from, sizeof from, " (from the environment's %s)", given->env[i]);
            snprintf(diff + k, diff_cap - k, "\n  --%s: the run has %s, this command gives %s%s", fl->name, old, now, from);
            ndiff++;
            continue;
        }
        memcpy((char *)c + fl->offset, (char *)rec + fl->offset, config_flag_size(fl));
        given->resumed[i] = 1;
    }
    json_t *shards = json_object_get(doc, "shards");
    if (!c->shards[0] && json_is_string(shards)) c->shards = ct_strdup(json_string_value(shards));
    return ndiff;
}

void settings_resume(Config *c, ConfigGiven *given) {
    if (!c->resume[0]) return;
    c->resume = resume_file(c->resume);
    if (!config_given(given, "out")) {
        c->out = dir_of(c->resume);
        given->resumed[config_flag("out") - CONFIG_FLAGS] = 1;
    }
    json_t *doc = record_of(c->resume, "--resume");
    if (!doc) return;  // a checkpoint of an older build: the flags must be given again, as then
    given->resumed_from = c->resume;
    Config rec;
    char diff[8192] = "";
    int ndiff = apply_record(c, given, doc, &rec, diff, sizeof diff, c->resume);
    json_decref(doc);
    if (!ndiff) return;
    // The command that starts a new run from these weights with the new values: every setting the
    // merged configuration holds away from its default, so it works as printed.
    char cmd[8192] = "";
    settings_append_arg(cmd, sizeof cmd, argv0_of(c));
    settings_append_arg(cmd, sizeof cmd, "--weights");
    settings_append_arg(cmd, sizeof cmd, c->resume);
    Config def;
    config_defaults(&def);
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        const Flag *fl = &CONFIG_FLAGS[i];
        if (LISTED(fl->name, RESUME_OWN) || !strcmp(fl->name, "out") || fl->hidden) continue;
        Config *src = config_given(given, fl->name) ? c : &rec;
        if (same_value(src, &def, fl)) continue;
        char name[80], v[4096];
        if (fl->type == F_BOOL) {
            snprintf(name, sizeof name, "--%s%s", *(const int *)((const char *)src + fl->offset) ? "" : "no-", fl->name);
            settings_append_arg(cmd, sizeof cmd, name);
            continue;
        }
        snprintf(name, sizeof name, "--%s", fl->name);
        settings_flag_text(src, fl, v, sizeof v);
        settings_append_arg(cmd, sizeof cmd, name);
        settings_append_arg(cmd, sizeof cmd, v);
    }
    settings_append_arg(cmd, sizeof cmd, c->shards);
    char cont[PATH_MAX + 64];
    settings_resume_command(c, dir_of(c->resume), cont, sizeof cont);
    ct_die("--resume %s: %d flag%s differ%s from the run's recorded settings and would change its course:%s\n"
           "To continue the run as it was, leave %s out: %s\n"
           "To start a new run from these weights with the new values instead (a new directory, epoch 1):\n  %s",
           c->resume, ndiff, ndiff > 1 ? "s" : "", ndiff > 1 ? "" : "s", diff, ndiff > 1 ? "them" : "it", cont, cmd);
}

const char *settings_model_in(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return path;
    static const char *names[] = {"best.safetensors", "model.safetensors", "best.ckpt", "last.ckpt"};
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    for (size_t i = 0; i < CT_ARRAY_LEN(names); i++) {
        char *p = ct_alloc(n + strlen(names[i]) + 2);
        sprintf(p, "%.*s/%s", (int)n, path, names[i]);
        if (ct_file_exists(p)) return p;
        free(p);
    }
    ct_die("%s: a directory without a model (best.safetensors, model.safetensors, best.ckpt or last.ckpt): give a "
           "run directory or a model file", path);
}

// A run directory: it holds a file a run writes (and is not a shard directory).
static int is_run_dir(const char *dir) {
    static const char *names[] = {"config.json", "best.safetensors", "model.safetensors", "best.ckpt", "last.ckpt"};
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/val.shard", dir);
    if (ct_file_exists(p)) return 0;
    for (size_t i = 0; i < CT_ARRAY_LEN(names); i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (ct_file_exists(p)) return 1;
    }
    return 0;
}

// One value of a model file's metadata over flag `name` (when given and different: used, noted).
static void meta_over(Config *c, ConfigGiven *given, const char *path, const char *name, const char *v) {
    const Flag *fl = config_flag(name);
    int i = (int)(fl - CONFIG_FLAGS);
    Config rec = *c;
    config_set_flag(&rec, fl, fl->type == F_STR ? ct_strdup(v) : v);
    if (config_given(given, name)) {
        if (!same_value(c, &rec, fl)) {
            char old[256], now[256];
            settings_flag_text(&rec, fl, old, sizeof old);
            settings_flag_text(c, fl, now, sizeof now);
            fprintf(stderr, "train: note: --%s %s given; %s records %s\n", name, now, path, old);
        }
        return;
    }
    memcpy((char *)c + fl->offset, (char *)&rec + fl->offset, config_flag_size(fl));
    given->resumed[i] = 1;
}

void settings_evaluate(Config *c, ConfigGiven *given) {
    if (!c->evaluate) return;
    // --evaluate RUN_DIR: the run's best model on the run's data.
    struct stat st;
    if (!c->weights[0] && !c->resume[0] && c->shards[0] && stat(c->shards, &st) == 0 && S_ISDIR(st.st_mode) &&
        is_run_dir(c->shards)) {
        c->weights = c->shards;
        c->shards = "";
    }
    if (!c->weights[0]) return;  // --resume: settings_resume took the record
    c->weights = settings_model_in(c->weights);
    if (checkpoint_is(c->weights)) {
        json_t *doc = record_of(c->weights, "--weights");
        if (doc) {
            Config rec;
            char diff[64];
            apply_record(c, given, doc, &rec, diff, sizeof diff, c->weights);
            json_decref(doc);
        }
    } else {
        StFile f;
        char *err = st_open(c->weights, &f);
        if (err) {
            char note[1300];
            ct_die("--weights %s%s", err, filekind_note(c->weights, "a safetensors file", note, sizeof note));
        }
        const char *v;
        if ((v = st_meta(&f, "arch"))) meta_over(c, given, c->weights, "arch", v);
        if ((v = st_meta(&f, "blurpool"))) meta_over(c, given, c->weights, "blurpool", v);
        if ((v = st_meta(&f, "mean"))) meta_over(c, given, c->weights, "mean", v);
        if ((v = st_meta(&f, "std"))) meta_over(c, given, c->weights, "std", v);
        // The evaluation's crop: --val-crop-size, or --crop-size when only that is given; the
        // resize follows a crop given, else the file's.
        int crop_given = config_given(given, "val-crop-size") || config_given(given, "crop-size");
        if ((v = st_meta(&f, "crop_size"))) {
            meta_over(c, given, c->weights, config_given(given, "val-crop-size") || !config_given(given, "crop-size")
                                                 ? "val-crop-size" : "crop-size", v);
            if (!crop_given) meta_over(c, given, c->weights, "crop-size", v);  // nothing then speaks of 224
        }
        if ((v = st_meta(&f, "val_resize")) && (!crop_given || config_given(given, "val-resize")))
            meta_over(c, given, c->weights, "val-resize", v);
        st_close(&f);
    }
    // No SHARDS: the data of the run the model came from, when its config.json says.
    if (!c->shards[0]) {
        char *copy = ct_strdup(c->weights), cj[PATH_MAX + 32];
        snprintf(cj, sizeof cj, "%s/config.json", dirname(copy));
        free(copy);
        json_t *doc = ct_file_exists(cj) ? json_load_file(cj, 0, NULL) : NULL;
        json_t *sh = doc ? json_object_get(json_object_get(doc, "settings"), "shards") : NULL;
        if (json_is_string(sh)) c->shards = ct_strdup(json_string_value(sh));
        json_decref(doc);
    }
}
