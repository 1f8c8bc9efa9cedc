// The resolved settings of a run as a record, and what a run does with it: config.json's
// "settings" and each checkpoint's settings section are the whole flag table, written generically
// (a flag added to the table is recorded, restored and compared without a line here), so
// `train --resume RUN_DIR` alone continues the run with the settings it had.
//
// On --resume every flag not given is taken from the record; a flag given with another value is
// taken when it cannot change the run's course (RESUME_NEUTRAL in settings.c: --epochs, -j, -p,
// --timeout, output and logging) and refused otherwise, naming each flag with both values and the
// command that starts a new run from the checkpoint's weights instead.
#pragma once
#include <jansson.h>
#include <stddef.h>

#include "trainer/config.h"

// Every flag's value by its long name, and "shards".
json_t *settings_json(const Config *c);
// The value of one flag as it would be typed ("auto" for an automatic count still unresolved).
void settings_flag_text(const Config *c, const Flag *fl, char *buf, size_t n);
// What the nodes of a run must agree on, as text for the rendezvous to compare and name: one line
// "--flag<TAB>value" for every flag but the node-local ones (config_flag_node_local), newlines and
// tabs in a value written as \n and \t. Allocated; the caller frees it.
char *settings_node_text(const Config *c);
// s quoted for a POSIX shell when it needs it, appended to buf (of capacity n).
void settings_append_arg(char *buf, size_t n, const char *s);

// --resume PATH: a run directory means PATH/last.ckpt; c->resume is set to the checkpoint. Its
// recorded settings fill every flag not given and are checked against those given (see above); an
// old checkpoint without a record leaves the flags as they are (they must be given, as before).
// --out defaults to the checkpoint's directory. Dies naming the flags at fault.
void settings_resume(Config *c, ConfigGiven *given);
// --evaluate: the model's own evaluation (arch, classes, crop, resize, mean, std, blurpool) from
// --weights' metadata or a checkpoint's record fills the flags not given; a flag given that
// contradicts it is used, with a note. `--evaluate RUN_DIR` evaluates the run's best model on the
// run's data; without SHARDS the data is the one the model's run directory records.
void settings_evaluate(Config *c, ConfigGiven *given);
// A run directory as a model file: DIR/best.safetensors, else model.safetensors, best.ckpt,
// last.ckpt (dies when it holds none); any other path as it is.
const char *settings_model_in(const char *path);
// The exact command that continues the run in out: "ARGV0 --resume OUT".
void settings_resume_command(const Config *c, const char *out, char *buf, size_t n);
