/* serve.c: helper serve, the exec channel (see the Python side, sandbox/channel.py).
 *
 * Reads requests from standard input and answers each on standard output, one at a time, until
 * end-of-file. It runs as the agent's user, so it holds no privilege the agent lacks. The
 * framing of a request and of its answer is contract.h's (the exec channel's section). The
 * command runs in its own session (setsid) with stdout and stderr on one pipe; past the timeout
 * its process group is killed. The answer's flags: ANSWER_TIMED_OUT, ANSWER_TRUNCATED (the output
 * past the cap was read and dropped), ANSWER_EXITED (the exit code is known: 128+N for signal N,
 * as the engine counts it). A malformed request ends the helper (EXIT_USAGE): the runtime then
 * uses the engine.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture */
#endif

/* Reads exactly n bytes: 0 done, 1 end-of-file before the first byte, -1 otherwise. */
static int read_full(int fd, unsigned char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return got == 0 && r == 0 ? 1 : -1;
        got += (size_t)r;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

struct request {
    unsigned char nonce[8];
    uint32_t timeout_ms, max_output, argc, envc;
    char *workdir, **argv, **env; /* NUL-terminated copies */
    const unsigned char *input;
    size_t input_len;
};

/* Takes one length-prefixed string at *at (below end) as a new NUL-terminated copy. */
static char *take_string(const unsigned char **at, const unsigned char *end) {
    if (end - *at < 4) return NULL;
    uint32_t len = be32(*at);
    *at += 4;
    if ((size_t)(end - *at) < len || memchr(*at, 0, len)) return NULL;
    char *copy = malloc((size_t)len + 1);
    if (!copy) return NULL;
    memcpy(copy, *at, len);
    copy[len] = 0;
    *at += len;
    return copy;
}

static void free_strings(char **list, uint32_t count) {
    if (!list) return;
    for (uint32_t i = 0; i < count; i++) free(list[i]);
    free(list);
}

/* Parses a request body; 0 when it is well formed. */
static int parse_request(const unsigned char *body, size_t len, struct request *req) {
    const unsigned char *at = body + REQUEST_HEAD, *end = body + len;
    if (len < REQUEST_HEAD) return -1;
    memcpy(req->nonce, body, 8);
    req->timeout_ms = be32(body + 8);
    req->max_output = be32(body + 12);
    req->argc = be32(body + 16);
    req->envc = be32(body + 20);
    if (req->max_output > MAX_OUTPUT || req->argc == 0 || req->argc > MAX_STRINGS ||
        req->envc > MAX_STRINGS)
        return -1;
    req->argv = calloc((size_t)req->argc + 1, sizeof(char *));
    req->env = calloc((size_t)req->envc + 1, sizeof(char *));
    if (!req->argv || !req->env || !(req->workdir = take_string(&at, end))) return -1;
    for (uint32_t i = 0; i < req->argc; i++)
        if (!(req->argv[i] = take_string(&at, end))) return -1;
    for (uint32_t i = 0; i < req->envc; i++)
        if (!(req->env[i] = take_string(&at, end)) || !strchr(req->env[i], '=')) return -1;
    req->input = at;
    req->input_len = (size_t)(end - at);
    return 0;
}

static void free_request(struct request *req) {
    free(req->workdir);
    free_strings(req->argv, req->argc);
    free_strings(req->env, req->envc);
}

/* The forked child: its own session, the pipes as stdio, the request's env and folder. */
static void child(const struct request *req, int in_fd, int out_fd) {
    setsid();
    signal(SIGPIPE, SIG_DFL);
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0) _exit(126);
    for (uint32_t i = 0; i < req->envc; i++) putenv(req->env[i]);
    if (*req->workdir && chdir(req->workdir) != 0) {
        fprintf(stderr, "chdir to %s failed: %s\n", req->workdir, strerror(errno));
        _exit(126);
    }
    execvp(req->argv[0], req->argv);
    fprintf(stderr, "exec: \"%s\": %s\n", req->argv[0], strerror(errno));
    _exit(126);
}

static int exit_code(int status) {
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* Runs one request and writes its answer; -1 when the answer cannot be written. */
static int serve_one(const struct request *req) {
    unsigned char *out = malloc(req->max_output ? req->max_output : 1), drop[65536];
    size_t size = 0, sent = 0;
    int flags = 0, status = 0, in[2], pipe_out[2];
    if (!out || pipe2(in, O_CLOEXEC) != 0) return -1;
    if (pipe2(pipe_out, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) child(req, in[0], pipe_out[1]);
    close(in[0]);
    close(pipe_out[1]);
    if (pid < 0) {
        size = (size_t)snprintf((char *)out, req->max_output, "fork: %s\n", strerror(errno));
        size = size < req->max_output ? size : req->max_output;
        close(in[1]);
        close(pipe_out[0]);
        status = 126 << 8;
        flags = ANSWER_EXITED;
        goto answer;
    }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* its exit as a poll event (Linux 5.3+) */
    long long deadline = now_ms() + req->timeout_ms, exited_at = -1;
    int in_fd = in[1], out_fd = pipe_out[0], done = 0, nap = 1;
    if (req->input_len == 0) close(in_fd), in_fd = -1;
    for (;;) {
        if (!done && waitpid(pid, &status, WNOHANG) == pid) done = 1, exited_at = now_ms();
        if (done && out_fd < 0) break;
        long long now = now_ms(), until = deadline;
        if (done && exited_at + EXIT_GRACE_MS < until) until = exited_at + EXIT_GRACE_MS;
        if (now >= until) break;
        struct pollfd fds[3] = {
            {out_fd, POLLIN, 0}, {in_fd, POLLOUT, 0}, {done ? -1 : pidfd, POLLIN, 0}};
        long long wait = until - now;
        if (wait > 60000) wait = 60000;
        if (!done && pidfd < 0 && out_fd >= 0 && wait > 50) wait = 50; /* waitpid's next look */
        if (!done && pidfd < 0 && out_fd < 0) { /* output closed: wait for the exit */
            wait = wait < nap ? wait : nap;
            nap = nap < 32 ? nap * 2 : 50;
        }
        if (poll(fds, 3, (int)wait) < 0 && errno != EINTR) break;
        if (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) {
            ssize_t w = write(in_fd, req->input + sent, req->input_len - sent);
            if (w > 0) sent += (size_t)w;
            if (w < 0 && errno != EAGAIN && errno != EINTR) sent = req->input_len;
            if (sent == req->input_len) close(in_fd), in_fd = -1;
        }
        if (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) {
            size_t room = req->max_output - size;
            ssize_t r = room ? read(out_fd, out + size, room) : read(out_fd, drop, sizeof drop);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                close(out_fd), out_fd = -1;
            } else if (r > 0 && room) {
                size += (size_t)r;
            } else if (r > 0) {
                flags |= ANSWER_TRUNCATED;
            }
        }
    }
    if (in_fd >= 0) close(in_fd);
    if (out_fd >= 0) close(out_fd);
    if (pidfd >= 0) close(pidfd);
    if (!done) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        flags |= ANSWER_TIMED_OUT;
    } else {
        flags |= ANSWER_EXITED;
    }
answer:;
    unsigned char head[ANSWER_HEAD] = {0};
    memcpy(head, ANSWER_MAGIC, 4);
    memcpy(head + 4, req->nonce, 8);
    head[12] = (unsigned char)flags;
    put32(head + 13, (uint32_t)((flags & ANSWER_EXITED) ? exit_code(status) : 0));
    put32(head + 17, (uint32_t)size);
    int failed = write_full(1, head, sizeof head) || write_full(1, out, size);
    free(out);
    return failed ? -1 : 0;
}

int serve(void) {
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        unsigned char head[4];
        int r = read_full(0, head, sizeof head);
        if (r == 1) return 0;
        uint32_t len = be32(head);
        if (r != 0 || len < REQUEST_HEAD || len > MAX_REQUEST) return EXIT_USAGE;
        unsigned char *body = malloc(len);
        struct request req;
        memset(&req, 0, sizeof req);
        int bad = !body || read_full(0, body, len) != 0 || parse_request(body, len, &req) != 0;
        int failed = bad || serve_one(&req) != 0;
        if (body) free_request(&req);
        free(body);
        if (failed) return EXIT_USAGE;
    }
}
