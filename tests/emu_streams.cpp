// The emulator's asynchronous streams (kernels/emu/runtime.cpp, CTRAIN_EMU_SCHEDULE in
// docs/EMULATION.md) catch what a GPU would get wrong, and the prefetch API waits where it must.
// Each case runs in a child process under a chosen schedule (the schedule is read once per
// process), so an abort is an answer, not the end of the test:
//   1. the host writes a pinned buffer after an asynchronous host->device copy from it was issued
//      and before it ran: the copy aborts naming both (its correct twin syncs first and passes);
//   2. a device->host copy's pinned destination read before the stream was synchronised holds the
//      poison pattern (NaN), after the synchronisation the data;
//   3. a kernel on one stream reading what a copy on another stream writes, without an event wait,
//      reads stale memory under the lazy schedule; with the wait, the data;
//   4. a capturing stream that waits on an event recorded outside the capture is refused;
//   4b. graphs are dependency graphs: a stream forked into a capture and not joined back makes the
//      capture fail (cudaErrorStreamCaptureUnjoined); two branches that both write one word, each
//      joined, replay in both orders over a few launches (the order of independent nodes is drawn),
//      while the node after the join always sees both branches;
//   5. the prefetch API's `consumed` wait (nn/model_cuda.cu): a batch staged into the slot whose
//      previous batch the compute stream has not normalised yet must not overwrite it: logits of
//      that previous batch are right under every schedule, and wrong under eager-copy with the wait
//      deleted (CTRAIN_EMU_MUTANT=consumed, kernels/mutable.h);
//   6. gpu_prefetch_cancel (issue 28, bug 5): a staged batch abandoned, its pinned buffer refilled
//      with other images: the next forward of that buffer sees the new images, and nothing reads
//      the buffer late; without the cancel (what trainer/loop.c did on SIGINT) the copy reads the
//      refilled buffer (abort under lazy) or the stale stage is used.
#include <math.h>
#include <string>
#include <vector>

#include "kernels/common.cuh"
#include "nn/model_cuda.h"
#include "nn/resnet.h"
#include "tests/emu_child.h"
#include "tests/test.h"

#define CKC(x) CT_CUDA_CHECK(x)

__global__ void copy_k(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

static const char *kSchedules[] = {"sync", "lazy", "eager-copy", "eager-comm", "eager-compute"};

// ---- the child cases: exit 0 when the behaviour checked is right, 1 (or abort) otherwise.
static int case_early_write(bool sync_first) {
    const size_t n = 1024;
    float *h, *d;
    cudaStream_t s;
    CKC(cudaMallocHost((void **)&h, n * 4));
    CKC(cudaMalloc((void **)&d, n * 4));
    CKC(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t i = 0; i < n; i++) h[i] = (float)i;
    CKC(cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, s));
    if (sync_first) CKC(cudaStreamSynchronize(s));
    h[7] = -1;  // the host reuses the buffer
    CKC(cudaStreamSynchronize(s));
    std::vector<float> back(n);
    CKC(cudaMemcpy(back.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return back[7] == 7.0f ? 0 : 1;
}

static int case_poison() {
    const size_t n = 64;
    float *h, *d;
    cudaStream_t s;
    CKC(cudaMallocHost((void **)&h, n * 4));
    CKC(cudaMalloc((void **)&d, n * 4));
    CKC(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> x(n, 3.0f);
    CKC(cudaMemcpy(d, x.data(), n * 4, cudaMemcpyHostToDevice));
    CKC(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, s));
    bool early_poisoned = isnan(h[0]);
    CKC(cudaStreamSynchronize(s));
    printf("before the sync: %g, after: %g\n", early_poisoned ? NAN : h[0], h[0]);
    return early_poisoned && h[0] == 3.0f ? 0 : 1;
}

static int case_cross_stream(bool wait) {
    const int n = 256;
    float *a, *b, *h;
    cudaStream_t s1, s2;
    cudaEvent_t ev;
    CKC(cudaMalloc((void **)&a, n * 4));
    CKC(cudaMalloc((void **)&b, n * 4));
    CKC(cudaMallocHost((void **)&h, n * 4));
    CKC(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CKC(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CKC(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CKC(cudaMemset(a, 0, n * 4));
    CKC(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) h[i] = 5.0f;
    CKC(cudaMemcpyAsync(a, h, n * 4, cudaMemcpyHostToDevice, s1));
    CKC(cudaEventRecord(ev, s1));
    if (wait) CKC(cudaStreamWaitEvent(s2, ev, 0));
    CT_LAUNCH(copy_k, 1, n, 0, s2, a, b, n);
    CKC(cudaStreamSynchronize(s2));
    float got;
    CKC(cudaMemcpy(&got, b, 4, cudaMemcpyDeviceToHost));
    CKC(cudaDeviceSynchronize());
    printf("the kernel read %g (the copy wrote 5)\n", got);
    return got == 5.0f ? 0 : 1;
}

static int case_capture_outside_event() {
    cudaStream_t s1, s2;
    cudaEvent_t ev;
    CKC(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CKC(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CKC(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CKC(cudaEventRecord(ev, s2));
    CKC(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    cudaError_t w = cudaStreamWaitEvent(s1, ev, 0);
    cudaGraph_t g = nullptr;
    cudaError_t end = cudaStreamEndCapture(s1, &g);
    (void)cudaGetLastError();
    printf("wait: %s, end of capture: %s\n", cudaGetErrorName(w), cudaGetErrorName(end));
    return w == cudaErrorStreamCaptureIsolation && end == cudaErrorStreamCaptureInvalidated ? 0 : 1;
}

__global__ void set_k(float *x, int i, float v) { x[i] = v; }
__global__ void sum_k(float *x) { x[3] = x[0] + x[1] + x[2]; }

static int case_graph_unjoined() {
    cudaStream_t s1, s2;
    cudaEvent_t fork;
    float *x;
    CKC(cudaMalloc((void **)&x, 16));
    CKC(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CKC(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CKC(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CKC(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    CKC(cudaEventRecord(fork, s1));
    CKC(cudaStreamWaitEvent(s2, fork, 0));
    CT_LAUNCH(set_k, 1, 1, 0, s2, x, 0, 1.0f);  // never joined back into s1
    cudaGraph_t g = nullptr;
    cudaError_t end = cudaStreamEndCapture(s1, &g);
    (void)cudaGetLastError();
    printf("end of a capture with an unjoined fork: %s\n", cudaGetErrorName(end));
    return end == cudaErrorStreamCaptureUnjoined && !g ? 0 : 1;
}

static int case_graph_order() {
    cudaStream_t s1, s2;
    cudaEvent_t fork, join;
    float *x;
    CKC(cudaMalloc((void **)&x, 16));
    CKC(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CKC(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CKC(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CKC(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CKC(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    CKC(cudaEventRecord(fork, s1));
    CKC(cudaStreamWaitEvent(s2, fork, 0));
    CT_LAUNCH(set_k, 1, 1, 0, s1, x, 0, 1.0f);  // both branches write x[2]: a race in the graph
    CT_LAUNCH(set_k, 1, 1, 0, s1, x, 2, 10.0f);
    CT_LAUNCH(set_k, 1, 1, 0, s2, x, 1, 2.0f);
    CT_LAUNCH(set_k, 1, 1, 0, s2, x, 2, 20.0f);
    CKC(cudaEventRecord(join, s2));
    CKC(cudaStreamWaitEvent(s1, join, 0));
    CT_LAUNCH(sum_k, 1, 1, 0, s1, x);
    cudaGraph_t g = nullptr;
    CKC(cudaStreamEndCapture(s1, &g));
    cudaGraphExec_t ex;
    CKC(cudaGraphInstantiate(&ex, g, 0));
    bool saw10 = false, saw20 = false, sums_ok = true;
    for (int rep = 0; rep < 16; rep++) {
        CKC(cudaMemset(x, 0, 16));
        CKC(cudaDeviceSynchronize());
        CKC(cudaGraphLaunch(ex, s1));
        CKC(cudaStreamSynchronize(s1));
        float h[4];
        CKC(cudaMemcpy(h, x, 16, cudaMemcpyDeviceToHost));
        saw10 |= h[2] == 10.0f;
        saw20 |= h[2] == 20.0f;
        sums_ok &= h[3] == 3.0f + h[2];
    }
    printf("racing branches: last writer 10 %s, 20 %s; the joined node saw both branches: %s\n", saw10 ? "seen" : "never",
           saw20 ? "seen" : "never", sums_ok ? "always" : "NOT always");
    return saw10 && saw20 && sums_ok ? 0 : 1;
}

// A tiny network and three pinned batches of distinct images.
struct Net {
    ResNet *m;
    GpuExec *e;
    uint8_t *x[3];
    float mean[3] = {120, 110, 100}, std[3] = {60, 50, 40};
    int N = 2, H = 8, W = 8;
    size_t bytes() const { return (size_t)N * H * W * 3; }
    std::vector<float> logits(const uint8_t *x) {  // the synchronous path, into a fresh buffer
        uint8_t *y;
        CKC(cudaMallocHost((void **)&y, bytes()));
        memcpy(y, x, bytes());
        const float *l = gpu_forward_u8(e, m, y, N, H, W, mean, std, 0);
        std::vector<float> out(l, l + N * m->num_classes);
        CKC(cudaFreeHost(y));
        return out;
    }
    std::vector<float> device_logits() {
        gpu_exec_sync(e);
        std::vector<float> out(N * m->num_classes);
        CKC(cudaMemcpy(out.data(), gpu_exec_logits(e), out.size() * 4, cudaMemcpyDeviceToHost));
        return out;
    }
};
static Net make_net() {
    Net n;
    n.m = resnet_create("resnet20", 3, 10);
    resnet_init(n.m, 3, 0);
    n.e = gpu_exec_create(n.m, CT_F32);
    for (int k = 0; k < 3; k++) {
        CKC(cudaMallocHost((void **)&n.x[k], n.bytes()));
        for (size_t i = 0; i < n.bytes(); i++) n.x[k][i] = (uint8_t)((i * (7 + 13 * k) + 31 * k) & 255);
    }
    return n;
}

static int case_consumed() {
    Net n = make_net();
    std::vector<float> want = n.logits(n.x[0]);
    gpu_prefetch_u8(n.e, n.x[0], n.N, n.H, n.W);  // slot 0
    gpu_forward_u8_dev(n.e, n.m, n.x[0], n.N, n.H, n.W, n.mean, n.std, 0);  // normalises slot 0 (queued)
    gpu_prefetch_u8(n.e, n.x[1], n.N, n.H, n.W);  // slot 1
    gpu_prefetch_u8(n.e, n.x[2], n.N, n.H, n.W);  // slot 0 again: must wait for `consumed`
    std::vector<float> got = n.device_logits();
    gpu_prefetch_wait(n.e);
    double err = rel_err_norm(got.data(), want.data(), got.size());
    printf("logits of the first batch: rel err %.3g\n", err);
    return err == 0 ? 0 : 1;
}

static int case_cancel(bool cancel) {
    Net n = make_net();
    gpu_prefetch_u8(n.e, n.x[0], n.N, n.H, n.W);
    if (cancel) gpu_prefetch_cancel(n.e, n.x[0]);
    memcpy(n.x[0], n.x[1], n.bytes());  // the loader refills the slot with other images
    std::vector<float> want = n.logits(n.x[1]);
    gpu_forward_u8_dev(n.e, n.m, n.x[0], n.N, n.H, n.W, n.mean, n.std, 0);
    std::vector<float> got = n.device_logits();
    double err = rel_err_norm(got.data(), want.data(), got.size());
    printf("logits of the refilled buffer: rel err %.3g\n", err);
    return err == 0 ? 0 : 1;
}

static int run_case(const std::string &c) {
    if (c == "early-write") return case_early_write(false);
    if (c == "early-write-ok") return case_early_write(true);
    if (c == "poison") return case_poison();
    if (c == "no-wait") return case_cross_stream(false);
    if (c == "wait") return case_cross_stream(true);
    if (c == "capture") return case_capture_outside_event();
    if (c == "graph-unjoined") return case_graph_unjoined();
    if (c == "graph-order") return case_graph_order();
    if (c == "consumed") return case_consumed();
    if (c == "cancel") return case_cancel(true);
    if (c == "no-cancel") return case_cancel(false);
    fprintf(stderr, "emu_streams: unknown case %s\n", c.c_str());
    return 2;
}

// ---- the parent.
static bool passes(const char *c, const char *schedule, const char *mutant, std::string *err) {
    std::string sch = std::string("CTRAIN_EMU_SCHEDULE=") + schedule;
    if (mutant) setenv("CTRAIN_EMU_MUTANT", mutant, 1);
    ChildRun r = run_child(c, sch.c_str());
    unsetenv("CTRAIN_EMU_MUTANT");
    if (err) *err = r.err;
    return r.code == 0;
}

int main(int argc, char **argv) {
    if (argc == 2) return run_case(argv[1]);
    std::string err;
    // 1.
    CHECK(!passes("early-write", "lazy", nullptr, &err) && err.find("wrote the source") != std::string::npos,
          "a host write to a pinned source before its copy ran was not caught: %s", err.c_str());
    printf("early write of a pinned source: %s", err.substr(0, err.find('\n') + 1).c_str());
    for (const char *s : kSchedules) CHECK(passes("early-write-ok", s, nullptr, nullptr), "early-write-ok under %s", s);
    // 2.
    CHECK(passes("poison", "lazy", nullptr, &err), "the destination of a device->host copy was not poisoned: %s", err.c_str());
    // 3.
    CHECK(!passes("no-wait", "lazy", nullptr, nullptr), "a missing cross-stream wait was not caught under lazy");
    for (const char *s : kSchedules) CHECK(passes("wait", s, nullptr, nullptr), "a cross-stream wait failed under %s", s);
    // 4.
    CHECK(passes("capture", "lazy", nullptr, &err), "a capture waiting on an outside event was allowed: %s", err.c_str());
    // 4b.
    CHECK(passes("graph-unjoined", "lazy", nullptr, &err), "an unjoined fork was accepted: %s", err.c_str());
    CHECK(passes("graph-order", "lazy", nullptr, &err), "graph replay order: %s", err.c_str());
    printf("%s", err.c_str());
    // 5. and 6.
    for (const char *s : kSchedules) {
        bool ok = passes("consumed", s, nullptr, &err);
        if (!ok) printf("consumed under %s:\n%s\n", s, err.c_str());
        CHECK(ok, "the prefetch API's consumed wait under %s", s);
        ok = passes("cancel", s, nullptr, &err);
        if (!ok) printf("cancel under %s:\n%s\n", s, err.c_str());
        CHECK(ok, "gpu_prefetch_cancel under %s", s);
    }
    CHECK(!passes("consumed", "eager-copy", "consumed", nullptr), "deleting the consumed wait was not caught");
    printf("the consumed wait deleted: wrong logits under eager-copy (caught)\n");
    CHECK(!passes("no-cancel", "lazy", nullptr, &err), "a staged batch abandoned without a cancel was not caught");
    printf("no cancel: %s", err.substr(0, err.find('\n') + 1).c_str());
    CHECK(!passes("cancel", "lazy", "cancel", nullptr), "deleting the cancel's wait was not caught");
    printf("the cancel's wait deleted: caught under lazy\n");
    return test_summary("emu_streams");
}
