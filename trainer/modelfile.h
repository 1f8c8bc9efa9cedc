// A model file for the subcommands that use a trained model (export, predict): a safetensors with
// torchvision names, its architecture and eval preprocessing from the `__metadata__` that
// state_save_model writes, or from flags and defaults for a file made elsewhere (torchvision).
#pragma once
#include "nn/resnet.h"

typedef struct {
    ResNet *net;          // weights loaded (strict), owned
    int crop, resize;     // eval: resize the short side to `resize`, center-crop crop x crop
    float *mean, *std;    // [net->in_channels]
    int n_classes_named;  // class names known (0, or net->num_classes)
    char **class_names;
} ModelFile;

// Flags that override or supply what the file's metadata says (NULL / 0: not given).
typedef struct {
    const char *arch;          // -a: needed when the file does not name its architecture
    const char *mean, *std;    // comma-separated
    int crop, resize;
    const char *classes_path;  // --classes FILE: one class name per line
} ModelFileFlags;

// A subcommand's own flag, spelled like train's: "--name V", "--name=V", or "-x V" for its alias.
typedef enum {
    SUB_STR,  // *(const char **)dst = V
    SUB_INT,  // *(int *)dst = V, an integer in [lo, hi]
    SUB_SET,  // *(int *)dst = 1; takes no value
} SubFlagKind;
typedef struct {
    const char *name, *alias;  // "--top-k", "-k" (alias NULL: none)
    SubFlagKind kind;
    void *dst;
    int lo, hi;                // SUB_INT's range
} SubFlag;

// The arguments argv[2..] of `train COMMAND`, in order: -h/--help; the model flags every such
// subcommand takes (-a/--arch, --resize, --mean, --std, --classes) into fl; the command's own
// `flags`; anything else not starting with '-' goes to positional (NULL: it is an error). Dies
// naming the argument at fault. Returns 1 at -h/--help (the caller prints its usage), else 0.
int subcommand_parse(const char *command, ModelFileFlags *fl, const SubFlag *flags, int n_flags, int argc,
                     char **argv, void (*positional)(void *ctx, const char *arg), void *ctx);

// Dies with a message naming the file or flag at fault (and what to give instead).
void modelfile_load(ModelFile *mf, const char *path, const ModelFileFlags *fl);
void modelfile_free(ModelFile *mf);
