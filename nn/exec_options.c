// The execution options by name, and the old environment variables as aliases (nn/exec_options.h).
#include "nn/exec_options.h"

#include <stdio.h>
#include <string.h>

const char *const EXEC_OPTION_NAMES[EXEC_N_OPTIONS] = {
    "conv-engine", "maxpool-vector", "fuse-bn-add", "fuse-bn-stats", "fuse-bn-bwd",
    "fuse-bn-pool", "fuse-bn-res", "cpu-winograd", "cpu-small",
};

static const char *const ENGINE_NAMES[] = {"v2", "v1", "wgmma"};

// The on/off field of option i (i >= 1).
static int *flag_of(ExecOptions *o, int i) {
    int *f[EXEC_N_OPTIONS] = {NULL, &o->maxpool_vector, &o->fuse_bn_add, &o->fuse_bn_stats, &o->fuse_bn_bwd,
                              &o->fuse_bn_pool, &o->fuse_bn_res, &o->cpu_winograd, &o->cpu_small};
    return f[i];
}

const char *exec_option_text(const ExecOptions *o, int i) {
    if (i == 0) return (unsigned)o->conv_engine < 3 ? ENGINE_NAMES[o->conv_engine] : "?";
    return *flag_of((ExecOptions *)o, i) ? "on" : "off";
}

const char *exec_option_set(ExecOptions *o, const char *name, const char *text) {
    static char msg[160];
    for (int i = 0; i < EXEC_N_OPTIONS; i++) {
        if (strcmp(name, EXEC_OPTION_NAMES[i])) continue;
        if (i == 0) {
            for (int k = 0; k < 3; k++)
                if (!strcmp(text, ENGINE_NAMES[k])) {
                    o->conv_engine = (ExecConvEngine)k;
                    return NULL;
                }
            snprintf(msg, sizeof msg, "'%.40s' is not one of " EXEC_CONV_ENGINE_NAMES, text);
            return msg;
        }
        if (!strcmp(text, "on") || !strcmp(text, "1") || !strcmp(text, "true")) *flag_of(o, i) = 1;
        else if (!strcmp(text, "off") || !strcmp(text, "0") || !strcmp(text, "false")) *flag_of(o, i) = 0;
        else {
            snprintf(msg, sizeof msg, "'%.40s' is not on or off", text);
            return msg;
        }
        return NULL;
    }
    snprintf(msg, sizeof msg, "no execution option named '%.40s'", name);
    return msg;
}

const ExecAlias EXEC_ALIASES[EXEC_N_ALIASES] = {
    {"CTRAIN_CONV_ENGINE", "conv-engine"},     {"CTRAIN_MAXPOOL_SCALAR", "maxpool-vector"},
    {"CTRAIN_FUSE_BN_ADD", "fuse-bn-add"},     {"CTRAIN_FUSE_BN_STATS", "fuse-bn-stats"},
    {"CTRAIN_FUSE_BN_BWD", "fuse-bn-bwd"},     {"CTRAIN_FUSE_BN_POOL", "fuse-bn-pool"},
    {"CTRAIN_FUSE_BN_RES", "fuse-bn-res"},     {"CTRAIN_CPU_WINOGRAD", "cpu-winograd"},
    {"CTRAIN_CPU_SMALL", "cpu-small"},
};

const char *exec_alias_text(const ExecAlias *a, const char *value) {
    if (!strcmp(a->option, "conv-engine")) return *value ? value : "v2";
    if (!strcmp(a->option, "maxpool-vector")) return strcmp(value, "1") ? "on" : "off";  // the scalar switch
    return strcmp(value, "0") ? "on" : "off";
}

const char *exec_options_from_env(ExecOptions *o, char *(*get)(const char *)) {
    static char msg[200];
    for (int i = 0; i < EXEC_N_ALIASES; i++) {
        const char *v = get(EXEC_ALIASES[i].var);
        if (!v) continue;
        if (exec_option_set(o, EXEC_ALIASES[i].option, exec_alias_text(&EXEC_ALIASES[i], v))) {
            // Only the engine can be refused: the switches take any value.
            snprintf(msg, sizeof msg, "%s=%.40s: expected v1, v2 or wgmma", EXEC_ALIASES[i].var, v);
            return msg;
        }
    }
    return NULL;
}
