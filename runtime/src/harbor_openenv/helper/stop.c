/* stop.c: the keeper's view of the container's processes (/proc), its baseline (mark) and the
 * stop before grading (stop), both on the keeper's requests (keep.c).
 *
 * /proc/PID/stat is parsed from its last ')', since a command name may hold any byte but NUL.
 */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
struct proc *baseline;
size_t baseline_count;

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
pid_t entrypoint_pid = -1;
static int entrypoint_status = -1; /* how it ended, until a stop ends it on purpose */

void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        if (pid == entrypoint_pid) entrypoint_status = status, entrypoint_pid = -1;
}

/* Waits until count() of what is left is 0, reaping; 0 done, KEEP_STOP_FAILED past STOP_SECONDS. */
static int wait_gone(int (*fn)(const struct proc *, void *), long long since) {
    for (;;) {
        reap();
        int left = each_process(fn, NULL);
        if (left < 0) return say("cannot list /proc: %s", strerror(errno)), KEEP_STOP_FAILED;
        if (left == 0) return 0;
        if (now_ms() - since > STOP_SECONDS * 1000LL)
            return say("%d processes still alive after %d s", left, STOP_SECONDS), KEEP_STOP_FAILED;
        nap_ms(1);
    }
}

/* The stop before grading. First every process but this keeper is stopped with one
 * kill(-1, SIGSTOP) as root: by the same rule as below no fork escapes it, and from then on
 * nothing of the agent's runs, forks, or takes a freed slot. With every process of the container
 * untrusted (a uid that ran the agent's code is root, or a baseline process shares a uid with one
 * that did), PID 1 kills every other process of its PID namespace with one kill(-1, SIGKILL): no
 * process, thread, group or fork survives it, by the kernel's rules. Else the baseline's processes
 * (all of other uids) are kept: each uid kills all of its own processes with one kill(-1)
 * (kill_as, kill.c: no new process, no memory), then what is left outside the baseline (a uid the
 * agent reached through a setuid program the task gave it) is stopped and killed one by one until
 * none is alive, and the baseline continued. Until the agent's processes are killed the stop
 * needs no free process slot, memory, file or descriptor. */
int stop(const uid_t *uids, int count, int all) {
    long long since = now_ms();
    entrypoint_status = -1;
    entrypoint_pid = -1; /* from now on its end is a stop's doing, or the agent's */
    kill(-1, SIGSTOP);
    for (int i = 0; i < count && !all; i++)
        if (kill_as(uids[i], since) != 0) all = 1; /* could not: end them all */
    struct uid_set set = {uids, count};
    if (!all && each_process(shares_a_uid, &set) != 0) all = 1;
    if (all) {
        kill(-1, SIGKILL);
        baseline_count = 0; /* nothing of the image's is left */
        return wait_gone(count_alive, since);
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
    if ((ssize_t)first + 1 < n && !strcmp(buf + first + 1, COMMAND_IDLE)) return 0;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)entrypoint_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n - (buf[n - 1] == '\n')] = 0;
    return is_shell(buf);
}

int mark(void) {
    long long since = now_ms();
    while (entrypoint_starting() && now_ms() - since < ENTRYPOINT_WAIT_MS) {
        reap();
        nap_ms(20);
    }
    reap();
    if (entrypoint_status >= 0) {
        int code = WIFSIGNALED(entrypoint_status) ? 128 + WTERMSIG(entrypoint_status)
                                                  : WEXITSTATUS(entrypoint_status);
        return say("the image's ENTRYPOINT exited (code %d)", code), KEEP_ENTRYPOINT_EXITED;
    }
    size_t room = 0;
    int counted = each_process(count_alive, NULL);
    if (counted < 0) return say("cannot list /proc: %s", strerror(errno)), KEEP_STOP_FAILED;
    room = (size_t)counted + 64;
    free(baseline);
    baseline = calloc(room, sizeof *baseline);
    baseline_count = 0;
    if (!baseline) return say("out of memory"), KEEP_STOP_FAILED;
    each_process(remember, &room);
    return 0;
}
