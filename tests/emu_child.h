// Death tests for the emulator tests: run this same program again with one argument (the case
// its main runs when called so) in a child process, and report how it ended. The emulator answers
// misuse (a deadlock, a bad shuffle mask, an mbarrier count gone wrong...) with a message and
// abort(), which would end the test itself if the case ran in-process.
#pragma once
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "util/common.h"

typedef struct {
    std::string err;  // everything the child wrote to stderr
    bool aborted;     // it died of SIGABRT
    double seconds;   // from fork to its end
    int code;         // its exit status, -1 when a signal ended it
} ChildRun;

// Runs /proc/self/exe with `arg` (argv[0] may name no path: a program found on PATH). The child
// gets CTRAIN_EMU_DEADLOCK_S=2, so a deadlock case ends in seconds, and `env` ("NAME=VALUE",
// or NULL) besides.
static ChildRun run_child(const char *arg, const char *env) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) ct_die_errno("readlink /proc/self/exe");
    self[len] = 0;
    int fd[2];
    if (pipe(fd) != 0) ct_die_errno("pipe");
    ChildRun r = {std::string(), false, 0, -1};
    double t0 = ct_now();
    pid_t pid = fork();
    if (pid < 0) ct_die_errno("fork");
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        setenv("CTRAIN_EMU_DEADLOCK_S", "2", 1);
        if (env) putenv(strdup(env));
        execl(self, self, arg, (char *)nullptr);
        _exit(127);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) r.err.append(buf, (size_t)n);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    r.seconds = ct_now() - t0;
    r.aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}
