/* harbor-openenv-helper: the runtime's own program inside a task container.
 *
 * Built static (no dynamic loader, so /etc/ld.so.preload and a replaced libc never reach it) and
 * mounted read-only into every task container, so an agent with root can neither change it nor
 * hook it. It does the work whose honesty decides a reward:
 *
 *   helper keep [USER ENTRYPOINT...]
 *       PID 1 of every task container, as root: makes itself non-dumpable (no ptrace,
 *       /proc/1/mem or /proc/1/fd for any process of the container: that needs CAP_SYS_PTRACE),
 *       starts the image's ENTRYPOINT (with its arguments) as its child as USER, reaps every
 *       orphan, and answers the runtime's requests, one tab-separated line each on its standard
 *       input (which only the engine's attach can write), one line each on its standard output
 *       (children get /dev/null and its stderr instead):
 *         ID mark                      the processes running now are the baseline; answers
 *                                      "ID ok PID:START..." (fails, 96, if the ENTRYPOINT exited)
 *         ID stop USERS [VUSER VDIR TDIR stage|keep]
 *                                      ends every process USERS' code may have started (see
 *                                      stop()); then makes VDIR anew for VUSER alone (mode 0755)
 *                                      and empties TDIR for staging ("stage") or makes
 *                                      TDIR/test.sh executable ("keep"); answers "ID ok"
 *       and "ID err CODE PROBLEM" on failure: 96 the ENTRYPOINT exited, 97 processes still alive
 *       after STOP_SECONDS, 98 prepare failed, 2 a malformed request. Every signal is blocked and
 *       read from a signalfd: SIGTERM or SIGINT from outside the PID namespace (the engine's
 *       stop; the sender's pid reads 0 there) ends it, the same from inside is ignored.
 *   helper idle
 *       waits forever: the keepalive an ENTRYPOINT is given, where Harbor has sleep infinity.
 *   helper serve
 *       the exec channel (see the Python side, sandbox/channel.py): reads requests from standard
 *       input and answers each on standard output, one at a time, until end-of-file. It runs as
 *       the agent's user, so it holds no privilege the agent lacks. A request is a 4-byte
 *       big-endian length, then: a nonce (8 bytes, echoed in the answer), timeout in ms, output
 *       cap in bytes, argc, envc (4 bytes each),
 *       the working directory, argc arguments and envc NAME=VALUE strings (each a 4-byte length
 *       and its bytes, no NUL), and the rest is the command's standard input. The command runs
 *       in its own session (setsid) with stdout and stderr on one pipe; past the timeout its
 *       process group is killed. The answer: "HOE1", the nonce, a flags byte (1 timed out, 2 truncated,
 *       4 exit code known), the exit code (4 bytes, 128+N for signal N, as the engine counts
 *       it) and the output (a 4-byte length and at most the cap's bytes; the rest is read and
 *       dropped). A malformed request ends the helper (exit 2): the runtime then uses the engine.
 *   helper file read ROOT PATH LIMIT | file write ROOT PATH | file list ROOT PATH
 *       the agent's file action on PATH (absolute), as the user running it, confined to ROOT (the
 *       real working directory): see file_action below. read prints at most LIMIT bytes raw;
 *       write copies standard input in place and prints the real path written; list executes
 *       ls -la in the folder (ls -lad of an entry that is not one), or, in an image without ls,
 *       prints the same itself (list_self). Exit 3: outside ROOT (the
 *       real path it reached on stderr), 4: missing (for a write: a folder could not be made),
 *       5: a folder, 6: not a regular file, 1: another error (its message on stderr).
 *
 * Built static with Zig's C compiler (musl, -Os, stripped, -Wall -Wextra -Werror).
 * /proc/PID/stat is parsed from its last ')', since a command name may hold any byte but NUL.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STOP_SECONDS 20
#define ENTRYPOINT_WAIT_MS 5000 /* how long mark waits for an image ENTRYPOINT's start-up */

/* Why the last request failed, for its answer (errors of the keeper's work land here, not on a
 * stream some other process could share). */
static char problem[1024];

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(problem, sizeof problem, format, args);
    va_end(args);
}

struct proc {
    long pid;
    char state;
    unsigned long long start;
};

/* Reads /proc/PID/stat (below /proc/PID/task/TID/ when tid > 0) whole; fills state and start
 * time. 0 on success. The command name may hold any byte but NUL: parsed from the last ')'. */
static int read_stat(long pid, long tid, struct proc *out) {
    char path[96], buf[4096];
    if (tid > 0)
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/stat", pid, tid);
    else
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *close_paren = NULL;
    for (ssize_t i = n - 1; i >= 0; i--) {
        if (buf[i] == ')') { close_paren = buf + i; break; }
    }
    if (!close_paren || close_paren[1] != ' ') return -1;
    char *p = close_paren + 2; /* field 3: state */
    out->pid = pid;
    out->state = *p;
    /* field 22 (starttime) is 19 fields after the state */
    for (int field = 0; field < 19; field++) {
        p = strchr(p, ' ');
        if (!p) return -1;
        p++;
    }
    out->start = strtoull(p, NULL, 10);
    return 0;
}

/* Whether a process still runs code: not dead, and, for a zombie leader, no thread of it alive
 * (a process whose main thread exited shows Z while its other threads run on). */
static int alive(const struct proc *proc) {
    if (proc->state == 'X') return 0;
    if (proc->state != 'Z') return 1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", proc->pid);
    DIR *dir = opendir(path);
    if (!dir) return 0;
    int live = 0;
    struct dirent *entry;
    while (!live && (entry = readdir(dir)) != NULL) {
        char *end;
        long tid = strtol(entry->d_name, &end, 10);
        struct proc thread;
        if (!*end && tid > 0 && read_stat(proc->pid, tid, &thread) == 0)
            live = thread.state != 'Z' && thread.state != 'X';
    }
    closedir(dir);
    return live;
}

/* The real, effective, saved and filesystem uids of a process (/proc/PID/status), 0 on success. */
static int read_uids(long pid, unsigned long uids[4]) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Uid:", 4) == 0) {
            found = sscanf(line + 4, "%lu %lu %lu %lu", &uids[0], &uids[1], &uids[2], &uids[3]) == 4
                        ? 0 : -1;
            break;
        }
    }
    fclose(f);
    return found;
}

/* The baseline: the processes of the image's own start-up that were running when the runtime
 * marked them (mark), by pid and start time (a pid reused later is another process). */
static struct proc *baseline;
static size_t baseline_count;

static int in_baseline(const struct proc *proc) {
    for (size_t i = 0; i < baseline_count; i++)
        if (baseline[i].pid == proc->pid && baseline[i].start == proc->start) return 1;
    return 0;
}

/* Calls fn for every process in /proc but PID 1 (this keeper); returns how many fn counted, -1
 * when /proc cannot be listed. */
static int each_process(int (*fn)(const struct proc *, void *), void *arg) {
    DIR *dir = opendir("/proc");
    if (!dir) return -1;
    int counted = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end || pid <= 1) continue;
        struct proc proc;
        if (read_stat(pid, 0, &proc) == 0) counted += fn(&proc, arg);
    }
    closedir(dir);
    return counted;
}

static int count_alive(const struct proc *proc, void *unused) {
    (void)unused;
    return alive(proc);
}

static int remember(const struct proc *proc, void *room) {
    if (!alive(proc) || baseline_count == *(size_t *)room) return 0;
    baseline[baseline_count++] = *proc;
    return 1;
}

static int kill_outside(const struct proc *proc, void *unused) {
    (void)unused;
    if (in_baseline(proc) || !alive(proc)) return 0;
    kill((pid_t)proc->pid, SIGKILL); /* a zombie leader's live threads die with it */
    return 1;
}

static int continue_baseline(const struct proc *proc, void *unused) {
    (void)unused;
    if (in_baseline(proc)) kill((pid_t)proc->pid, SIGCONT);
    return 0;
}

/* Whether a baseline process runs (really, effectively, saved or on the filesystem) as one of the
 * uids: a process the agent's uid may ptrace, signal or have replaced is not the image's any more. */
struct uid_set {
    const uid_t *uids;
    int count;
};

static int shares_a_uid(const struct proc *proc, void *arg) {
    const struct uid_set *set = arg;
    unsigned long ids[4];
    if (!in_baseline(proc) || !alive(proc)) return 0;
    if (read_uids(proc->pid, ids) != 0) return 1; /* unreadable: assume the worst */
    for (int i = 0; i < set->count; i++)
        for (int j = 0; j < 4; j++)
            if (ids[j] == (unsigned long)set->uids[i]) return 1;
    return 0;
}

/* Reaps whatever ended (PID 1 is every orphan's parent); notes the image entrypoint's end. */
static pid_t entrypoint_pid = -1;
static int entrypoint_status = -1; /* how it ended, until a stop ends it on purpose */

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        if (pid == entrypoint_pid) entrypoint_status = status, entrypoint_pid = -1;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms) {
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

/* Waits until count() of what is left is 0, reaping; 0 done, 97 past STOP_SECONDS. */
static int wait_gone(int (*fn)(const struct proc *, void *), long long since) {
    for (;;) {
        reap();
        int left = each_process(fn, NULL);
        if (left < 0) return say("cannot list /proc: %s", strerror(errno)), 97;
        if (left == 0) return 0;
        if (now_ms() - since > STOP_SECONDS * 1000LL)
            return say("%d processes still alive after %d s", left, STOP_SECONDS), 97;
        nap_ms(1);
    }
}

/* kill(-1, SIGKILL) as uid (a child of this keeper that drops to it): every process that uid may
 * signal, in one system call no fork races (a forking parent dies with the signal pending, its
 * child never runs). */
static int kill_as(uid_t uid, gid_t gid) {
    pid_t pid = fork();
    if (pid < 0) return say("fork: %s", strerror(errno)), 97;
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
            setresuid(uid, uid, uid) != 0)
            _exit(1);
        kill(-1, SIGKILL);
        _exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return say("cannot drop to uid %lu to stop its processes", (unsigned long)uid), 97;
    return 0;
}

/* The stop before grading. With every process of the container untrusted (a uid that ran the
 * agent's code is root, or a baseline process shares a uid with one that did), PID 1 kills every
 * other process of its PID namespace with one kill(-1, SIGKILL): no process, thread, group or
 * fork survives it, by the kernel's rules. Else the baseline's processes (all of other uids) are
 * kept: each uid kills all of its own processes with one kill(-1) (kill_as), then what is left
 * outside the baseline (a uid the agent reached through a setuid program the task gave it) is
 * stopped and killed one by one until none is alive. */
static int stop(const uid_t *uids, const gid_t *gids, int count, int all) {
    long long since = now_ms();
    entrypoint_status = -1;
    entrypoint_pid = -1; /* from now on its end is a stop's doing, or the agent's */
    struct uid_set set = {uids, count};
    if (!all && each_process(shares_a_uid, &set) != 0) all = 1;
    if (all) {
        kill(-1, SIGKILL);
        baseline_count = 0; /* nothing of the image's is left */
        return wait_gone(count_alive, since);
    }
    for (int i = 0; i < count; i++) {
        int failed = kill_as(uids[i], gids[i]);
        if (failed) return failed;
    }
    for (int round = 0; round < 3; round++) { /* a fork bomb of another uid stops forking */
        kill(-1, SIGSTOP);
        nap_ms(1);
    }
    int status = wait_gone(kill_outside, since);
    each_process(continue_baseline, NULL);
    return status;
}

/* mark: the processes running now are the baseline. An image ENTRYPOINT (this keeper's child) is
 * given up to ENTRYPOINT_WAIT_MS to reach its keepalive (helper idle) while it is still a shell
 * script: what it starts before that is the environment's. Fails if the entrypoint has exited. */
static int is_shell(const char *comm) {
    return !strcmp(comm, "sh") || !strcmp(comm, "bash") || !strcmp(comm, "dash") ||
           !strcmp(comm, "ash");
}

static int entrypoint_starting(void) {
    if (entrypoint_pid < 0) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)entrypoint_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1; /* between fork and exec */
    buf[n] = 0;
    size_t first = strlen(buf);
    if ((ssize_t)first + 1 < n && !strcmp(buf + first + 1, "idle")) return 0;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)entrypoint_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n - (buf[n - 1] == '\n')] = 0;
    return is_shell(buf);
}

static int mark(void) {
    long long since = now_ms();
    while (entrypoint_starting() && now_ms() - since < ENTRYPOINT_WAIT_MS) {
        reap();
        nap_ms(20);
    }
    reap();
    if (entrypoint_status >= 0) {
        int code = WIFSIGNALED(entrypoint_status) ? 128 + WTERMSIG(entrypoint_status)
                                                  : WEXITSTATUS(entrypoint_status);
        return say("the image's ENTRYPOINT exited (code %d)", code), 96;
    }
    size_t room = 0;
    int counted = each_process(count_alive, NULL);
    if (counted < 0) return say("cannot list /proc: %s", strerror(errno)), 97;
    room = (size_t)counted + 64;
    free(baseline);
    baseline = calloc(room, sizeof *baseline);
    baseline_count = 0;
    if (!baseline) return say("out of memory"), 97;
    each_process(remember, &room);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

/* Removes path (never following links) and creates it again as an empty folder. */
static int fresh_dir(const char *path, mode_t mode, uid_t uid, gid_t gid) {
    struct stat st;
    if (lstat(path, &st) == 0) {
        int failed = S_ISDIR(st.st_mode)
                         ? nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT)
                         : unlink(path);
        if (failed) {
            say("cannot remove %s: %s", path, strerror(errno));
            return -1;
        }
    }
    if (mkdir(path, mode) != 0 || chown(path, uid, gid) != 0 || chmod(path, mode) != 0) {
        say("cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Makes sure the parent of path is a real folder (an agent may have left a link or a file). */
static int real_parent(const char *path) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash || slash == parent) return 0;
    *slash = 0;
    struct stat st;
    if (lstat(parent, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    if (lstat(parent, &st) == 0 && unlink(parent) != 0) return -1;
    return mkdir(parent, 0755);
}

/* A colon-separated file's entry whose first field (or, numeric, third) matches name; its id, its
 * fourth field (group, if not NULL) and its first (entry, if not NULL: ENTRY_MAX bytes). */
#define ENTRY_MAX 64
static int lookup(const char *file, const char *name, long *id, long *group, char *entry) {
    FILE *f = fopen(file, "re");
    if (!f) return -1;
    char line[1024];
    char *end;
    long numeric = strtol(name, &end, 10);
    int is_number = *name && !*end;
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        char *fields[4] = {0};
        char *p = line;
        for (int i = 0; i < 4 && p; i++) {
            fields[i] = p;
            p = strchr(p, ':');
            if (p) *p++ = 0;
        }
        if (!fields[2]) continue;
        long entry_id = strtol(fields[2], NULL, 10);
        if (is_number ? entry_id == numeric : strcmp(fields[0], name) == 0) {
            *id = entry_id;
            if (group && fields[3]) *group = strtol(fields[3], NULL, 10);
            if (entry) snprintf(entry, ENTRY_MAX, "%s", fields[0]);
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

/* Resolves "user", "uid", "user:group" or "uid:gid" as the container runtime does (an unknown
 * numeric id stands for itself); empty means root. */
static int resolve_user(const char *spec, uid_t *uid, gid_t *gid, char *name) {
    char user[256], *group = NULL;
    snprintf(user, sizeof user, "%s", spec);
    char *colon = strchr(user, ':');
    if (colon) {
        *colon = 0;
        group = colon + 1;
    }
    long id = 0, primary = 0;
    snprintf(name, ENTRY_MAX, "%s", *user ? "" : "root");
    if (*user && lookup("/etc/passwd", user, &id, &primary, name) != 0) {
        char *end;
        id = strtol(user, &end, 10);
        if (*end) return -1;
        primary = id;
    }
    if (group && *group) {
        long gid_value;
        if (lookup("/etc/group", group, &gid_value, NULL, NULL) != 0) {
            char *end;
            gid_value = strtol(group, &end, 10);
            if (*end) return -1;
        }
        primary = gid_value;
    }
    *uid = (uid_t)id;
    *gid = (gid_t)primary;
    return 0;
}

/* The home folder of uid in the image's /etc/passwd (its sixth field); 0 when found. */
static int home_of(uid_t uid, char *home, size_t size) {
    FILE *f = fopen("/etc/passwd", "re");
    if (!f) return -1;
    char line[4096];
    int found = -1;
    while (found && fgets(line, sizeof line, f)) {
        char *fields[7] = {0}, *p = line;
        for (int i = 0; i < 7 && p; i++) {
            fields[i] = p;
            p = strchr(p, ':');
            if (p) *p++ = 0;
        }
        if (fields[5] && strtol(fields[2], NULL, 10) == (long)uid && *fields[5])
            found = snprintf(home, size, "%s", fields[5]) < (int)size ? 0 : -1;
    }
    fclose(f);
    return found;
}

static int prepare(const char *user, const char *verifier_dir, const char *tests_dir,
                   const char *mode) {
    uid_t uid;
    gid_t gid;
    char name[ENTRY_MAX];
    if (resolve_user(user, &uid, &gid, name) != 0) {
        say("unknown verifier user %s", user);
        return 98;
    }
    if (real_parent(verifier_dir) != 0 || fresh_dir(verifier_dir, 0755, uid, gid) != 0) return 98;
    if (strcmp(mode, "stage") == 0) {
        if (real_parent(tests_dir) != 0 || fresh_dir(tests_dir, 0755, 0, 0) != 0) return 98;
    } else {
        char script[4096];
        struct stat st;
        snprintf(script, sizeof script, "%s/test.sh", tests_dir);
        if (lstat(script, &st) == 0 && S_ISREG(st.st_mode)) chmod(script, st.st_mode | 0111);
    }
    return 0;
}

#define MAX_REQUEST (80u << 20) /* a write's content (8 MiB by default) and its arguments */
#define MAX_OUTPUT (64u << 20)
#define MAX_STRINGS 65536
#define EXIT_GRACE_MS 2000 /* after the command exits, how long its output may stay open */
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

static int write_full(int fd, const unsigned char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
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
    const unsigned char *at = body + 24, *end = body + len;
    if (len < 24) return -1;
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
        flags = 4;
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
                flags |= 2;
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
        flags |= 1;
    } else {
        flags |= 4;
    }
answer:;
    unsigned char head[21] = {'H', 'O', 'E', '1'};
    memcpy(head + 4, req->nonce, 8);
    head[12] = (unsigned char)flags;
    put32(head + 13, (uint32_t)((flags & 4) ? exit_code(status) : 0));
    put32(head + 17, (uint32_t)size);
    int failed = write_full(1, head, sizeof head) || write_full(1, out, size);
    free(out);
    return failed ? -1 : 0;
}

static int serve(void) {
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        unsigned char head[4];
        int r = read_full(0, head, sizeof head);
        if (r == 1) return 0;
        uint32_t len = be32(head);
        if (r != 0 || len < 24 || len > MAX_REQUEST) return 2;
        unsigned char *body = malloc(len);
        struct request req;
        memset(&req, 0, sizeof req);
        int bad = !body || read_full(0, body, len) != 0 || parse_request(body, len, &req) != 0;
        int failed = bad || serve_one(&req) != 0;
        if (body) free_request(&req);
        free(body);
        if (failed) return 2;
    }
}

/* -- file: the agent's read, write and list, confined to the real working directory ---------- */

#define MAX_LINKS 40
#define PATH_ROOM 8192
enum { READ, WRITE, LIST };

/* The real path of an open fd (/proc/self/fd: the kernel's, whatever was renamed since). */
static int fd_path(int fd, char *out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, size - 1);
    if (n < 0 || (size_t)n >= size - 1) return -1;
    out[n] = 0;
    return 0;
}

/* Whether the real path of fd is root or below it; when not, prints that path and then below
 * (the part of the agent's path not yet there, "" for none) to stderr. */
static int fd_inside(int fd, const char *root, const char *below) {
    char path[4096];
    if (fd_path(fd, path, sizeof path) != 0) return 0;
    size_t len = strlen(root);
    while (len > 1 && root[len - 1] == '/') len--;
    int inside = strcmp(root, "/") == 0 ||
                 (strncmp(path, root, len) == 0 && (path[len] == 0 || path[len] == '/'));
    if (!inside) fprintf(stderr, "%s%s%s\n", path, *below && strcmp(path, "/") ? "/" : "", below);
    return inside;
}

/* Prints errno's message (after what, unless NULL) to stderr; returns code. */
static int fail(const char *what, int code) {
    fprintf(stderr, "%s%s%s\n", what ? what : "", what ? ": " : "", strerror(errno));
    return code;
}

/* Replaces *dir with fd (closing the old one). */
static void enter(int *dir, int fd) {
    close(*dir);
    *dir = fd;
}

/* Opens the inode an O_PATH fd holds, for reading or writing (its permissions checked as any
 * open's): the very inode whose type was checked, whatever was renamed since. */
static int reopen(int fd, int flags) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    return open(link, flags | O_CLOEXEC);
}

/* Copies standard input over the file from its start, then cuts the file where the copy ended:
 * the same inode, and no truncation to zero first (after which ext4 flushes the data at close). */
static int copy_stdin(int out) {
    char buf[65536];
    off_t size = 0;
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return ftruncate(out, size);
        if (write_full(out, (unsigned char *)buf, (size_t)r) != 0) return -1;
        size += r;
    }
}

static int copy_out(int in, unsigned long long limit) {
    char buf[65536];
    while (limit > 0) {
        ssize_t r = read(in, buf, limit < sizeof buf ? limit : sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 0;
        if (write_full(1, (unsigned char *)buf, (size_t)r) != 0) return -1;
        limit -= (unsigned long long)r;
    }
    return 0;
}

/* -- list without the image's ls ---------------------------------------------------------------
 * The format of GNU ls -la in the C locale (names in byte order, owners by name from the image's
 * /etc/passwd and /etc/group, else their ids), for images that have no ls. */

struct row {
    char *name, *link; /* link: a symbolic link's target, else NULL */
    struct stat st;
    char owner[ENTRY_MAX], group[ENTRY_MAX], size[48];
};

/* The name of id in file (/etc/passwd or /etc/group), else the id; the last answer is kept. */
static void id_name(const char *file, unsigned long id, char *out, unsigned long *last_id,
                    char *last) {
    if (*last && *last_id == id) {
        memcpy(out, last, ENTRY_MAX);
        return;
    }
    char number[24];
    long found;
    snprintf(number, sizeof number, "%lu", id);
    if (lookup(file, number, &found, NULL, out) != 0) snprintf(out, ENTRY_MAX, "%lu", id);
    *last_id = id;
    memcpy(last, out, ENTRY_MAX);
}

static void mode_string(mode_t mode, char *out) {
    const char *types = "?pc?d?b?-?l?s???";
    out[0] = S_ISREG(mode) ? '-' : types[(mode >> 12) & 15];
    const char *rwx = "rwxrwxrwx";
    for (int i = 0; i < 9; i++) out[1 + i] = (mode & (0400 >> i)) ? rwx[i] : '-';
    if (mode & S_ISUID) out[3] = (mode & S_IXUSR) ? 's' : 'S';
    if (mode & S_ISGID) out[6] = (mode & S_IXGRP) ? 's' : 'S';
    if (mode & S_ISVTX) out[9] = (mode & S_IXOTH) ? 't' : 'T';
    out[10] = 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const struct row *)a)->name, ((const struct row *)b)->name);
}

/* Prints rows as ls -l does: columns as wide as their widest cell, then the time and the name. */
static void print_rows(struct row *rows, size_t count) {
    int links = 0, owner = 0, group = 0, size = 0;
    unsigned long passwd_id = 0, group_id = 0;
    char passwd_last[ENTRY_MAX] = "", group_last[ENTRY_MAX] = "";
    for (size_t i = 0; i < count; i++) {
        struct row *r = &rows[i];
        id_name("/etc/passwd", r->st.st_uid, r->owner, &passwd_id, passwd_last);
        id_name("/etc/group", r->st.st_gid, r->group, &group_id, group_last);
        if (S_ISCHR(r->st.st_mode) || S_ISBLK(r->st.st_mode))
            snprintf(r->size, sizeof r->size, "%u, %u", major(r->st.st_rdev),
                     minor(r->st.st_rdev));
        else
            snprintf(r->size, sizeof r->size, "%lld", (long long)r->st.st_size);
        char number[24];
        int n = snprintf(number, sizeof number, "%lu", (unsigned long)r->st.st_nlink);
        links = n > links ? n : links;
        n = (int)strlen(r->owner), owner = n > owner ? n : owner;
        n = (int)strlen(r->group), group = n > group ? n : group;
        n = (int)strlen(r->size), size = n > size ? n : size;
    }
    time_t now = time(NULL), half_year = 31556952 / 2;
    for (size_t i = 0; i < count; i++) {
        struct row *r = &rows[i];
        char mode[11], when[32];
        mode_string(r->st.st_mode, mode);
        time_t t = r->st.st_mtime;
        struct tm tm;
        localtime_r(&t, &tm);
        int recent = t > now - half_year && t <= now;
        strftime(when, sizeof when, recent ? "%b %e %H:%M" : "%b %e  %Y", &tm);
        printf("%s %*lu %-*s %-*s %*s %s %s%s%s\n", mode, links, (unsigned long)r->st.st_nlink,
               owner, r->owner, group, r->group, size, r->size, when, r->name,
               r->link ? " -> " : "", r->link ? r->link : "");
    }
}

/* Fills row from name in dir (not following a link); 0 on success. */
static int stat_row(int dir, const char *name, struct row *row) {
    memset(row, 0, sizeof *row);
    if (fstatat(dir, name, &row->st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    if (S_ISLNK(row->st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(dir, name, target, sizeof target - 1);
        target[n > 0 ? n : 0] = 0;
        if (!(row->link = strdup(target))) return -1;
    }
    row->name = strdup(name);
    return row->name ? 0 : -1;
}

/* ls -la of the folder open as dir, or ls -lad of name in it (name not NULL). */
static int list_self(int dir, const char *name) {
    struct row one;
    if (name) {
        if (stat_row(dir, name, &one) != 0) return fail(name, 1);
        print_rows(&one, 1);
        return 0;
    }
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) return fail(NULL, 1);
    size_t count = 0, room = 64;
    struct row *rows = malloc(room * sizeof *rows);
    struct dirent *entry;
    unsigned long long blocks = 0;
    while (rows && (entry = readdir(d)) != NULL) {
        if (count == room) rows = realloc(rows, (room *= 2) * sizeof *rows);
        if (rows && stat_row(dirfd(d), entry->d_name, &rows[count]) == 0)
            blocks += (unsigned long long)rows[count++].st.st_blocks;
    }
    closedir(d);
    if (!rows) return errno = ENOMEM, fail(NULL, 1);
    qsort(rows, count, sizeof *rows, by_name);
    printf("total %llu\n", (blocks + 1) / 2); /* 512-byte blocks, shown in KiB rounded up */
    print_rows(rows, count);
    return 0;
}

/* The action on the entry the walk ended on: target is an O_PATH fd of it, st its stat (target
 * -1: a write's missing file, created as name in dir), dir the folder holding it. */
static int act(int op, const char *root, int dir, const char *name, int target,
               const struct stat *st, const char *limit) {
    if (op == LIST) {
        int is_dir = S_ISDIR(st->st_mode);
        if (!fd_inside(target, root, "")) return 3;
        if (fchdir(is_dir ? target : dir) != 0) return fail(NULL, 4);
        char *folder[] = {"ls", "-la", NULL}, *entry[] = {"ls", "-lad", "--", (char *)name, NULL};
        execvp("ls", is_dir ? folder : entry); /* the agent's own view: its image's ls */
        return list_self(is_dir ? target : dir, is_dir ? NULL : name); /* no ls: the same format */
    }
    if (target >= 0 ? !fd_inside(target, root, "") : !fd_inside(dir, root, name)) return 3;
    if (target >= 0 && !S_ISREG(st->st_mode)) return S_ISDIR(st->st_mode) ? 5 : 6;
    int fd = target < 0 ? openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)
                        : reopen(target, op == READ ? O_RDONLY : O_WRONLY);
    struct stat opened;
    if (fd < 0 || fstat(fd, &opened) != 0) return fail(NULL, 1);
    if (!fd_inside(fd, root, "")) return 3;
    if (!S_ISREG(opened.st_mode)) return 6;
    if (op == READ) return copy_out(fd, strtoull(limit, NULL, 10)) ? fail(NULL, 1) : 0;
    /* written in place, once checked: an existing file keeps its mode, owner and group */
    if (copy_stdin(fd) != 0) return fail(NULL, 1);
    char real[4096];
    if (fd_path(fd, real, sizeof real) != 0 || close(fd) != 0) return fail(NULL, 1);
    printf("%s\n", real); /* where it was written */
    return 0;
}

/* helper file read|write|list ROOT PATH [LIMIT]: resolves PATH (absolute) as the running user,
 * one component at a time from fds (openat with O_NOFOLLOW; a symlink's target is spliced into
 * the rest of the path, at most MAX_LINKS of them), so a rename meanwhile can only redirect the
 * walk, never what it acts on: the entry it ends on is acted on through its own fd, once the
 * real path of that fd (/proc/self/fd) is ROOT or below. A write creates missing folders (and the
 * file, with the umask) only in a folder inside ROOT, and writes an existing file in place. */
static int file_action(int op, const char *root, const char *path, const char *limit) {
    char rest[PATH_ROOM], spliced[PATH_ROOM], name[256], link[PATH_MAX];
    if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) return 4;
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), links = 0;
    if (dir < 0) return fail(NULL, 1);
    for (char *at = rest;;) {
        while (*at == '/') at++;
        size_t len = (size_t)(strchrnul(at, '/') - at);
        if (len == 0) { /* the path ends on a folder */
            struct stat st;
            if (fstat(dir, &st) != 0) return fail(NULL, 1);
            return act(op, root, dir, ".", dir, &st, limit);
        }
        if (len >= sizeof name) return errno = ENAMETOOLONG, fail(NULL, 1);
        memcpy(name, at, len);
        name[len] = 0;
        for (at += len; *at == '/'; at++) {
        }
        if (strcmp(name, ".") == 0) continue;
        int fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && op == WRITE) {
            snprintf(spliced, sizeof spliced, "%s%s%s", name, *at ? "/" : "", at);
            if (!fd_inside(dir, root, spliced)) return 3;
            if (!*at) return act(op, root, dir, name, -1, NULL, limit);
            if (mkdirat(dir, name, 0777) != 0 && errno != EEXIST) return fail(NULL, 4);
            fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0 && errno == ENOENT) {
            snprintf(spliced, sizeof spliced, "%s%s%s", name, *at ? "/" : "", at);
            return fd_inside(dir, root, spliced) ? 4 : 3;
        }
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) return fail(NULL, 1);
        if (S_ISLNK(st.st_mode)) { /* go on from its target, then the rest */
            ssize_t n = readlinkat(fd, "", link, sizeof link - 1);
            close(fd);
            if (n < 0) return fail(NULL, 1);
            if (++links > MAX_LINKS) return errno = ELOOP, fail(NULL, 1);
            link[n] = 0;
            int room = snprintf(spliced, sizeof spliced, "%s%s%s", link, *at ? "/" : "", at);
            if (room < 0 || room >= (int)sizeof spliced) return errno = ENAMETOOLONG, fail(NULL, 1);
            memcpy(rest, spliced, (size_t)room + 1);
            at = rest;
            if (link[0] == '/' && (fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
                return fail(NULL, 1);
            if (link[0] == '/') enter(&dir, fd);
            continue;
        }
        if (!*at) return act(op, root, dir, name, fd, &st, limit);
        if (!S_ISDIR(st.st_mode)) return fd_inside(dir, root, name) ? 4 : 3;
        enter(&dir, fd);
    }
}

/* -- keep: PID 1 ------------------------------------------------------------------------------ */

/* The supplementary groups of user name (primary gid first), from the image's /etc/group, as
 * the container runtime gives a container's user. */
static int user_groups(const char *name, gid_t primary, gid_t *groups, int room) {
    int count = 0;
    groups[count++] = primary;
    FILE *f = fopen("/etc/group", "re");
    if (!f || !*name) return f ? fclose(f), count : count;
    char line[4096];
    while (count < room && fgets(line, sizeof line, f)) {
        char *fields[4] = {0}, *p = line;
        for (int i = 0; i < 4 && p; i++) {
            fields[i] = p;
            p = strchr(p, ':');
            if (p) *p++ = 0;
        }
        if (!fields[3]) continue;
        fields[3][strcspn(fields[3], "\r\n")] = 0;
        for (char *member = strtok(fields[3], ","); member; member = strtok(NULL, ","))
            if (!strcmp(member, name)) {
                groups[count++] = (gid_t)strtol(fields[2], NULL, 10);
                break;
            }
    }
    fclose(f);
    return count;
}

/* Starts the image's ENTRYPOINT (argv[1...]) as the image's user (argv[0]), with /dev/null as
 * its input and this keeper's stderr as its output: never the keeper's stdout, which carries
 * the answers to the runtime. */
static void spawn(char **argv) {
    pid_t pid = fork();
    if (pid != 0) {
        entrypoint_pid = pid;
        if (pid < 0) fprintf(stderr, "helper keep: cannot start the ENTRYPOINT: %s\n", strerror(errno));
        return;
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(2, 1) < 0) _exit(126);
    close(null);
    uid_t uid;
    gid_t gid;
    char name[ENTRY_MAX];
    if (resolve_user(argv[0], &uid, &gid, name) != 0) {
        fprintf(stderr, "helper keep: unknown user %s\n", argv[0]);
        _exit(126);
    }
    gid_t groups[64];
    int count = user_groups(name, gid, groups, 64);
    if (setgroups((size_t)count, groups) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
        fprintf(stderr, "helper keep: cannot become %s: %s\n", argv[0], strerror(errno));
        _exit(126);
    }
    char home[4096];
    if (uid != 0 && home_of(uid, home, sizeof home) == 0) setenv("HOME", home, 1);
    execvp(argv[1], argv + 1);
    fprintf(stderr, "helper keep: exec %s: %s\n", argv[1], strerror(errno));
    _exit(127);
}

/* Splits line at tabs into at most room fields; returns how many. */
static int fields_of(char *line, char **fields, int room) {
    int count = 0;
    for (char *p = line; p && count < room; count++) {
        fields[count] = p;
        p = strchr(p, '\t');
        if (p) *p++ = 0;
    }
    return count;
}

/* stop USERS [VERIFIER_USER VERIFIER_DIR TESTS_DIR stage|keep]: USERS (comma-separated) are
 * every user whose code ran since the baseline; a user that does not resolve counts as root. */
static int stop_request(char **f, int n) {
    if (n != 1 && n != 5) return say("usage: stop USERS [VUSER VDIR TDIR stage|keep]"), 2;
    uid_t uids[64];
    gid_t gids[64];
    int count = 0, all = 0;
    char name[ENTRY_MAX];
    for (char *spec = strtok(f[0], ","); spec; spec = strtok(NULL, ",")) {
        if (count == 64 || resolve_user(spec, &uids[count], &gids[count], name) != 0 ||
            uids[count] == 0)
            all = 1;
        else
            count++;
    }
    int status = stop(uids, gids, count, all);
    if (status || n == 1) return status;
    return prepare(f[1], f[2], f[3], f[4]);
}

/* One request line: "ID mark" or "ID stop ..." (tab-separated); answers "ID ok[ BASELINE]" or
 * "ID err CODE PROBLEM" on stdout, one line. */
static void handle(char *line) {
    char *f[8];
    int n = fields_of(line, f, 8);
    problem[0] = 0;
    int status = 2;
    int is_mark = n >= 2 && !strcmp(f[1], "mark");
    if (is_mark) status = n == 2 ? mark() : (say("usage: mark"), 2);
    else if (n >= 2 && !strcmp(f[1], "stop")) status = stop_request(f + 2, n - 2);
    else say("unknown request");
    for (char *p = problem; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    if (status) {
        printf("%s err %d %s\n", f[0], status, problem);
    } else {
        printf("%s ok", f[0]);
        if (is_mark)
            for (size_t i = 0; i < baseline_count; i++)
                printf(" %ld:%llu", baseline[i].pid, baseline[i].start);
        printf("\n");
    }
    fflush(stdout);
}

static int keep(int argc, char **argv) {
    prctl(PR_SET_DUMPABLE, 0); /* no ptrace, /proc/1/mem or /proc/1/fd for a process of the
                                  container: only CAP_SYS_PTRACE passes, which Docker never grants */
    if (getpid() != 1) {
        fprintf(stderr, "helper keep: must be PID 1 of the container (is an init of the engine's"
                        " own in front of it?)\n");
        return 2;
    }
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    int signals = signalfd(-1, &all, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signals < 0) return fprintf(stderr, "helper keep: signalfd: %s\n", strerror(errno)), 2;
    if (argc >= 2) spawn(argv);
    static char buf[1 << 16];
    size_t used = 0;
    int input = 0;
    for (;;) {
        struct pollfd fds[2] = {{signals, POLLIN, 0}, {input, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) nap_ms(10);
        struct signalfd_siginfo info;
        while (read(signals, &info, sizeof info) == (ssize_t)sizeof info) {
            /* SIGTERM or SIGINT from outside the namespace (the engine's stop: sender pid 0) ends
             * the container; the same from inside is ignored, as SIGKILL to an init is */
            if ((info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) && info.ssi_pid == 0)
                return 0;
        }
        reap();
        if (input < 0 || !(fds[1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = read(input, buf + used, sizeof buf - 1 - used);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
            input = -1; /* no runtime attached (stdin closed): keep reaping */
            continue;
        }
        if (got < 0) continue;
        used += (size_t)got;
        char *newline;
        while ((newline = memchr(buf, '\n', used)) != NULL) {
            *newline = 0;
            handle(buf);
            used -= (size_t)(newline + 1 - buf);
            memmove(buf, newline + 1, used);
        }
        if (used == sizeof buf - 1) used = 0; /* a line too long for any request */
    }
}

static int idle(void) {
    for (;;) pause();
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "keep") == 0) return keep(argc - 2, argv + 2);
    if (argc == 2 && strcmp(argv[1], "idle") == 0) return idle();
    if (argc == 2 && strcmp(argv[1], "serve") == 0) return serve();
    if (argc >= 5 && strcmp(argv[1], "file") == 0 && argv[3][0] == '/' && argv[4][0] == '/') {
        int op = strcmp(argv[2], "read") == 0 ? READ : strcmp(argv[2], "write") == 0 ? WRITE
               : strcmp(argv[2], "list") == 0 ? LIST : -1;
        if (op >= 0 && argc == (op == READ ? 6 : 5))
            return file_action(op, argv[3], argv[4], op == READ ? argv[5] : "0");
    }
    fprintf(stderr, "usage: %s keep [USER ENTRYPOINT...] | idle | serve | file read ROOT PATH LIMIT"
                    " | file write|list ROOT PATH\n",
            argv[0]);
    return 2;
}
