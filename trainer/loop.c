// The epoch loop and its stop signals (trainer/loop.h).
#include "trainer/loop.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "trainer/settings.h"
#include "util/common.h"
#include "util/crc32c.h"

static volatile sig_atomic_t g_stop_signal;

static volatile sig_atomic_t g_signals;

// Said at once (a step can take seconds): the first signal stops the run after the step in
// progress, with a checkpoint; a second only says that the checkpoint is still coming; a third
// exits at once without one.
static void on_signal(int sig) {
    static const char first[] = "\ntrain: stopping after this step; last.ckpt is written then (a third signal exits "
                                "without it)\n";
    static const char second[] = "\ntrain: still finishing the step, then writing last.ckpt (signal once more to exit "
                                 "without it)\n";
    static const char third[] = "\ntrain: third signal: exiting without a checkpoint\n";
    int n = ++g_signals;
    const char *msg = n == 1 ? first : n == 2 ? second : third;
    size_t len = n == 1 ? sizeof first - 1 : n == 2 ? sizeof second - 1 : sizeof third - 1;
    ssize_t r = write(2, msg, len);
    (void)r;
    if (n >= 3) _exit(128 + sig);
    if (!g_stop_signal) g_stop_signal = sig;
}

void loop_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int loop_stop_signal(void) { return g_stop_signal; }

static const char *signal_name(void) { return g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"; }

// --max-bad-records, auto: 0.1% of the train shard, at least 1.
static int64_t max_bad_records(const Run *r) {
    if (r->cfg->max_bad_records > 0) return r->cfg->max_bad_records;
    return CT_MAX(1, (int64_t)(r->data->train.n_records / 1000));
}

// Progressive resizing: the training resolution of epoch (from 0).
static int epoch_res(const Config *c, int epoch) {
    ResSchedule rs;
    config_res_schedule(c, &rs);
    return res_schedule_at(&rs, epoch);
}

// After each step: counts, skips, and the progress records. Returns the consecutive skips.
static int account_step(Run *r, const StepResult *sr, double lr, int64_t step, int consecutive_bad, int hw) {
    Position *p = &r->pos;
    RunLog *log = r->log;
    if (sr->skipped) {
        consecutive_bad++;
        p->nonfinite_total++;
        if (log) runlog_skip(log, p->epoch + 1, step, lr, sr->loss, consecutive_bad);
        // Every rank counts the same skips; rank 0 ends the process (the others are then waiting
        // in the next step's collective).
        if (log && consecutive_bad >= r->cfg->max_nonfinite) {
            char lp[1100];
            runlog_path(log, lp, sizeof lp, "last.ckpt");
            ct_die("%d consecutive steps with a non-finite loss or gradient (epoch %d, step %lld, lr %g): the run has "
                   "diverged; stopping. %s%s%s", consecutive_bad, p->epoch + 1, (long long)step, lr,
                   ct_file_exists(lp) ? "The last good checkpoint is kept: start a new run from its weights with a lower "
                                        "rate (--resume keeps the run's --lr): --weights "
                                      : "No checkpoint was written yet (diverged within the first epoch): lower --lr",
                   ct_file_exists(lp) ? lp : "", ct_file_exists(lp) ? " --lr LOWER and the run's other flags" : "");
        }
    } else {
        consecutive_bad = 0;
        p->epoch_loss_sum += sr->loss * (double)sr->n;
        p->epoch_correct += sr->correct;
        p->epoch_seen += sr->n;
    }
    if (log) {
        int last_of_epoch = p->step_in_epoch == r->loaders.steps_per_epoch;
        StepReport rep = {
            .epoch = p->epoch + 1, .epochs = r->cfg->epochs,
            .step_in_epoch = p->step_in_epoch, .steps_per_epoch = r->loaders.steps_per_epoch,
            .step = step, .loss = sr->loss, .lr = lr, .correct = sr->correct, .n = sr->n,
            .epoch_loss_sum = p->epoch_loss_sum, .epoch_seen = p->epoch_seen,
            .data_wait = loader_wait_seconds(r->loaders.train),
            .record = p->step_in_epoch % r->cfg->print_freq == 0 || last_of_epoch,
            .res = hw,  // what the batch was cropped at, not what the schedule says it should be
        };
        runlog_step(log, &rep);
    }
    return consecutive_bad;
}

// Every replica must hold exactly rank 0's weights and optimizer state (and average); dies naming
// the rank that differs. The same averaged gradients and the same update keep the replicas
// identical; a rank whose checksum differs has silently diverged (a misconfigured or
// non-deterministic replica). Kept here, not in trainer/ranks.c, which runs this loop.
static void check_replicas(Run *r, int epochs_done) {
    const ResNet *m = r->model.net;
    backend_download(r->model.backend, &r->model.opt);  // and the EMA's
    uint32_t crc = crc32c(0, m->params, m->n_params * sizeof(float));
    for (int i = 0; i < optim_saved_state(&r->model.optim); i++)
        crc = crc32c(crc, r->model.opt.state[i], m->n_params * sizeof(float));
    if (ema_on(r))  // the average of identical weights is identical too (its BN statistics are each rank's)
        crc = crc32c(crc, r->model.ema.state, m->n_params * sizeof(float));
    uint32_t crc0 = crc;
    comm_broadcast(r->rank.comm, &crc0, sizeof crc0, 0);
    if (crc != crc0)
        ct_die("rank %d's weights differ from rank 0's after epoch %d (checksum %08x vs %08x): the replicas have "
               "diverged, so their gradients were not the same average", r->rank.rank, epochs_done, crc, crc0);
}

// End of an epoch: evaluation, records, the replica check and checkpoints.
static EvalResult finish_epoch(Run *r, double train_time, double train_wait, int64_t seen_at_start) {
    const Config *c = r->cfg;
    Position *p = &r->pos;
    int64_t step = (int64_t)(p->epoch + 1) * r->loaders.steps_per_epoch;
    // Replicas are compared before anything is saved: a checkpoint never holds diverged ones.
    if (r->rank.world > 1) check_replicas(r, p->epoch + 1);
    // The epoch's training is saved before evaluating it: an evaluation that dies (a val record
    // that fails to decode) then costs the evaluation, not the epoch. The position says "all
    // batches done, evaluation pending"; --resume from it goes straight to the evaluation.
    if (r->log) state_save_checkpoint(r, "last.ckpt", step);
    double t_eval = ct_now();
    EvalResult e = step_evaluate(r, r->faults.dump_train && p->epoch + 1 == c->epochs);
    // --ema: the average too; the better of the two by top-1 is what best.ckpt counts.
    EvalResult ee = {NAN, NAN, NAN, 0};
    double score = e.top1;
    if (ema_on(r)) {
        ema_exchange(r);
        ee = step_evaluate(r, 0);
        ema_exchange(r);
        RunEma *em = &r->model.ema;
        em->evaluated = 1;
        em->last_top1 = ee.top1;
        em->last_top1_plain = e.top1;
        score = CT_MAX(e.top1, ee.top1);
    }
    double eval_time = ct_now() - t_eval;
    int best = score > p->best_top1;
    if (best) { p->best_top1 = score; p->best_epoch = p->epoch + 1; p->best_is_ema = ee.top1 > e.top1; }
    if (r->log) {
        EpochReport rep = {
            .epoch = p->epoch + 1, .epochs = c->epochs, .step = step,
            .train_loss = p->epoch_seen ? p->epoch_loss_sum / (double)p->epoch_seen : NAN,
            .train_top1 = p->epoch_seen ? 100.0 * (double)p->epoch_correct / (double)p->epoch_seen : NAN,
            .val_loss = e.loss, .val_top1 = e.top1, .val_top5 = e.top5, .best = best,
            .ema = ema_on(r), .ema_loss = ee.loss, .ema_top1 = ee.top1, .ema_top5 = ee.top5,
            .lr = lr_at(&r->model.schedule, step - 1), .skipped_steps = p->nonfinite_total,
            .train_time = train_time, .eval_time = eval_time,
            .img_s = train_time > 0 ? (double)(p->epoch_seen - seen_at_start) / train_time : 0,
            .data_wait = train_time > 0 ? train_wait / train_time : 0, .workers = c->workers,
            .res = epoch_res(c, p->epoch), .val_res = c->val_crop_size, .bad_records = p->epoch_bad,
        };
        runlog_epoch(r->log, &rep);
    }
    // The position after this epoch: the next one, from its start.
    p->epoch++;
    p->step_in_epoch = 0;
    p->epoch_loss_sum = 0;
    p->epoch_correct = p->epoch_seen = 0;
    p->epoch_bad = 0;
    if (r->log) {
        state_save_checkpoint(r, "last.ckpt", step);
        if (best) {
            state_save_checkpoint(r, "best.ckpt", step);
            state_save_best_model(r);
        }
    }
    p->epoch--;
    return e;
}

int loop_train(Run *r, EvalResult *final_eval) {
    const Config *c = r->cfg;
    Position *p = &r->pos;
    RunLog *log = r->log;
    Backend *be = r->model.backend;
    Loader *lt = r->loaders.train;
    const int64_t spe = r->loaders.steps_per_epoch;
    if (log) runlog_train_start(log, (int64_t)c->epochs * spe);
    int consecutive_bad = 0;
    EvalResult last_eval = {0, 0, 0, 0};
    int stopped = 0;
    for (; p->epoch < c->epochs; p->epoch++) {
        double t_epoch = ct_now(), wait_epoch = loader_wait_seconds(lt);
        int64_t seen_at_start = p->epoch_seen;
        // The GPU executor re-plans its memory and re-captures its graphs when the size changes.
        loader_set_crop(lt, epoch_res(c, p->epoch));
        // A resume mid-epoch starts at the first batch not done: the batches are a function of
        // (seed, epoch, index), so the rest of the epoch is the same without decoding the skipped
        // ones (a checkpoint taken before evaluation stands at the epoch's end: nothing to load).
        loader_start_epoch_at(lt, p->epoch, p->step_in_epoch);
        if (log) runlog_epoch_start(log, wait_epoch, p->epoch_seen);
        LoaderBatch b;
        // On the GPU the next batch is taken from the ring and its copy started on the copy stream
        // before this step runs, so the transfer overlaps the compute (two batches held at once).
        LoaderBatch next;
        int have_next = 0;
        while (p->step_in_epoch < spe) {
            int staged = have_next;  // b's copy was started during the previous step
            if (have_next) {
                b = next;
                have_next = 0;
            } else if (!loader_next(lt, &b))
                ct_die("internal: the loader ended epoch %d after %lld of %lld batches", p->epoch + 1,
                       (long long)p->step_in_epoch, (long long)spe);
            if (backend_stages_batches(be) && p->step_in_epoch + 1 < spe && !g_stop_signal) {
                if (!staged) backend_prefetch(be, b.images, b.count, b.hw);
                if (!loader_next(lt, &next)) ct_die("internal: the loader ended epoch %d early", p->epoch + 1);
                have_next = 1;
                backend_prefetch(be, next.images, next.count, next.hw);
            }
            int64_t gstep = (int64_t)p->epoch * spe + p->step_in_epoch;
            double lr = lr_at(&r->model.schedule, gstep);
            if (r->faults.dump_train)
                dump_batch(r->faults.dump_train, c->dump_batches, &b, b.hw, r->data->channels, p->epoch, gstep + 1, (float)lr);
            StepResult sr = step_train(r, &b, lr, gstep + 1, g_stop_signal != 0);
            p->epoch_bad += (uint32_t)b.bad;
            loader_release(lt, &b);
            p->step_in_epoch++;
            int64_t step = gstep + 1;  // steps done in the whole run
            consecutive_bad = account_step(r, &sr, lr, step, consecutive_bad, b.hw);
            if (log && (int64_t)p->epoch_bad > max_bad_records(r)) {  // rank 0 ends the process, as for non-finite steps
                runlog_clear_line(log);
                state_save_checkpoint(r, "last.ckpt", step);
                char cont[8192];
                settings_resume_command(c, log->out, cont, sizeof cont);
                ct_die("%u samples of epoch %d came from train records that fail their checksum or decoding, more than "
                       "--max-bad-records %lld: the shard is damaged (packdata --verify %s lists them). Checkpoint saved "
                       "to %s/last.ckpt at step %lld; repair or repack the shard and resume (%s), or allow more: %s "
                       "--max-bad-records N", p->epoch_bad, p->epoch + 1, (long long)max_bad_records(r),
                       r->data->train.path, log->out, (long long)step, cont, cont);
            }
            if (sr.stop && p->step_in_epoch != spe) {  // agreed by all ranks in the step's reduction
                stopped = 1;
                if (!log) break;
                runlog_clear_line(log);
                state_save_checkpoint(r, "last.ckpt", step);
                char cont[8192];
                settings_resume_command(c, log->out, cont, sizeof cont);
                fprintf(stderr, "train: %s: checkpoint saved to %s/last.ckpt at epoch %d step %lld/%lld; resume with: %s\n",
                        signal_name(), log->out, p->epoch + 1, (long long)p->step_in_epoch, (long long)spe, cont);
                break;
            }
        }
        if (have_next) {  // staged, never used (stopped): its copy may still read the slot
            backend_prefetch_cancel(be, next.images);
            loader_release(lt, &next);
        }
        if (stopped) break;
        runlog_clear_line(log);
        double train_time = ct_now() - t_epoch, train_wait = loader_wait_seconds(lt) - wait_epoch;
        last_eval = finish_epoch(r, train_time, train_wait, seen_at_start);
        int stop_now = g_stop_signal != 0;
        if (r->rank.world > 1) {  // the ranks must agree on stopping here too
            double v = stop_now;
            comm_allreduce_f64(r->rank.comm, &v, 1);
            stop_now = v > 0;
        }
        if (stop_now && p->epoch + 1 < c->epochs) {
            if (log) {
                char cont[8192];
                settings_resume_command(c, log->out, cont, sizeof cont);
                fprintf(stderr, "train: %s: checkpoint saved to %s/last.ckpt after epoch %d; resume with: %s\n",
                        signal_name(), log->out, p->epoch + 1, cont);
            }
            stopped = 1;
            p->epoch++;
            break;
        }
        p->step_in_epoch = 0;
    }
    *final_eval = last_eval;
    if (r->faults.dump_train) {
        dump_close(r->faults.dump_train, c->dump_batches);
        r->faults.dump_train = NULL;
    }
    return stopped ? 128 + (g_stop_signal ? g_stop_signal : SIGTERM) : 0;
}
