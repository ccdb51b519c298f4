// dev/cuda_cpu/tests/child_process.h: runs a piece of a test in a forked child, so a check that
// must end the process (a registry fault, a refused call) can be observed: the child's exit status
// and everything it wrote to stderr come back. An alarm ends a child that hangs.
#ifndef CUDA_CPU_TESTS_CHILD_PROCESS_H
#define CUDA_CPU_TESTS_CHILD_PROCESS_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

// runs f in a child (its return value is the exit status); returns that status, or -1 when the
// child was killed by a signal, and the child's stderr in *err
static int run_in_child(const std::function<int()>& f, std::string* err, unsigned alarm_seconds) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        alarm(alarm_seconds);  // never hang the test, whatever the child does
        _exit(f());
    }
    close(fds[1]);
    char buf[4096];
    ssize_t got;
    err->clear();
    while ((got = read(fds[0], buf, sizeof(buf))) > 0) { err->append(buf, (size_t)got); }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif  // CUDA_CPU_TESTS_CHILD_PROCESS_H
