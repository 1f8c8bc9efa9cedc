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

// One argument of a subcommand, spelled like train's own flags: "--flag V" or "--flag=V".
typedef struct {
    char name[64];             // "--resize" of "--resize=3"; the whole argument otherwise
    const char *inline_value;  // "3" of "--resize=3", else NULL
    const char *command;       // "export", "predict": named in errors
} SubcommandArg;
void subcommand_arg(SubcommandArg *a, const char *command, const char *arg);
// The flag's value: inline, or the next argument (*i advances); dies naming the flag when missing.
const char *subcommand_value(const SubcommandArg *a, int argc, char **argv, int *i);
// The model flags every subcommand takes (-a/--arch, --resize, --mean, --std, --classes) into fl;
// 1 when a was one of them.
int modelfile_flag(ModelFileFlags *fl, const SubcommandArg *a, int argc, char **argv, int *i);

// Dies with a message naming the file or flag at fault (and what to give instead).
void modelfile_load(ModelFile *mf, const char *path, const ModelFileFlags *fl);
void modelfile_free(ModelFile *mf);
