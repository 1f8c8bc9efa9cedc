// train: the front door of ctrain. Reads the settings, builds this process's part of the run,
// runs it, and turns the outcome into the exit status. Everything else lives in trainer/, one
// concern per file (trainer/job.h is the map).
//
//   ./train [flags] SHARDS/        SHARDS/train.shard and SHARDS/val.shard (made by packdata)
//   ./train --demo                 Fashion-MNIST, packed on first use, CPU, minutes
//   ./train --evaluate --weights W.safetensors SHARDS/
//   ./train export --weights W.safetensors --onnx OUT.onnx     the eval graph as ONNX (trainer/export.h)
//   ./train predict --weights W.safetensors IMAGES...          top-k classes of images (trainer/predict.h)
//
// Determinism: every random choice is keyed on (seed, epoch, index) (util/rng.h) and every CPU
// reduction has a fixed order, so a run is a pure function of its flags and data, whatever the
// number of loader workers, and a resumed run continues bit for bit where it stopped.
//
// Exit status: 0 done; 1 an error (a message naming the flag, file or rank at fault); 128 + the
// signal when SIGINT/SIGTERM stopped the run after writing a checkpoint to resume from.
#include <string.h>

#include "trainer/args.h"
#include "trainer/config.h"
#include "trainer/dryrun.h"
#include "trainer/export.h"
#include "trainer/job.h"
#include "trainer/predict.h"
#include "util/common.h"

int main(int argc, char **argv) {
    ct_set_program("train");  // errors read "train: error: ...", whatever the binary is called
    // Subcommands that use a trained model: each owns its flags.
    if (argc > 1 && !strcmp(argv[1], "export")) return export_main(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "predict")) return predict_main(argc, argv);

    Config cfg;
    ConfigGiven given;
    config_from_args(&cfg, &given, argc, argv);
    if (cfg.dry_run) return dryrun_main(&cfg, &given);  // before any device or directory is touched

    static Job job;  // the runs keep pointers into it until exit
    job_create(&job, &cfg, &given);
    int status = cfg.evaluate ? job_evaluate(&job) : job_train(&job, argc, argv);
    job_destroy(&job);
    return status;
}
