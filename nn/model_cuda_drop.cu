// GPU executor: stochastic depth's scales (nn/drop_path.h). They are drawn on the host by the same
// function the CPU executor calls, so the two executors drop the same rows bit for bit, and go to
// the device with the batch; the kernel (drop_path_gpu) applies them in the forward and backward.
#include "nn/drop_path.h"
#include "nn/model_cuda_impl.h"

void gpu_exec_set_drop_path_key(GpuExec *e, uint64_t key) { e->drop.key = key; }

void drop_path_upload(GpuExec *e, const ResNet *m, int N) {
    DropPath *d = &e->drop;
    if (!d->of) {
        d->of = (int *)ct_alloc((size_t)(m->n_ops > 0 ? m->n_ops : 1) * sizeof(int));
        for (int i = 0; i < m->n_ops; i++) d->of[i] = m->ops[i].kind == OP_DROP_PATH ? d->n++ : -1;
    }
    if (!d->n) return;
    if (N > d->cap) {  // a new buffer: the captured graphs hold the old one's address
        CK(cudaStreamSynchronize(e->st));
        dfree(d->d);
        free(d->h);
        d->d = (float *)dmalloc(e, (size_t)d->n * N * sizeof(float));
        d->h = (float *)ct_alloc((size_t)d->n * N * sizeof(float));
        d->cap = N;
        e->mem.gen++;  // the graphs are stale as after a new memory plan
    }
    for (int i = 0; i < m->n_ops; i++)
        if (d->of[i] >= 0)
            drop_path_scales(d->h + (size_t)d->of[i] * d->cap, N, m->ops[i].drop, d->key, m->ops[i].drop_block);
    // Pageable source: the call returns once the bytes are staged, so the next batch may rewrite h.
    CK(cudaMemcpyAsync(d->d, d->h, (size_t)d->n * d->cap * sizeof(float), cudaMemcpyHostToDevice, e->st));
}

const float *drop_path_dev(const GpuExec *e, int op) {
    return e->drop.d + (size_t)e->drop.of[op] * e->drop.cap;
}

void drop_path_free(GpuExec *e) {
    dfree(e->drop.d);
    free(e->drop.h);
    free(e->drop.of);
}
