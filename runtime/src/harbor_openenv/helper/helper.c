/* harbor-openenv-helper: the runtime's own program inside a task container.
 *
 * Built static (no dynamic loader, so /etc/ld.so.preload and a replaced libc never reach it) and
 * mounted read-only into every task container, so an agent with root can neither change it nor
 * hook it. It does the work whose honesty decides a reward:
 *
 *   helper list
 *       prints "pid:starttime " for every process but itself (the baseline kept by stop).
 *   helper stop BASELINE [prepare USER VERIFIER_DIR TESTS_DIR stage|keep]
 *       kills every process that is not PID 1, not itself and not in BASELINE (a space-separated
 *       list of pid:starttime), whatever it is called, whoever runs it and whatever state it
 *       claims, re-listing /proc until a full pass finds none alive; then, with "prepare",
 *       empties VERIFIER_DIR and hands it to USER alone (mode 0755), and empties TESTS_DIR for
 *       staging ("stage") or makes TESTS_DIR/test.sh executable ("keep").
 *
 * Exit status: 0 done, 2 usage, 97 processes still alive after the time limit, 98 prepare failed.
 * /proc/PID/stat is parsed from its last ')', since a command name may hold any byte but NUL.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STOP_SECONDS 20

struct proc {
    long pid;
    char state;
    unsigned long long start;
};

/* Reads /proc/PID/stat whole; fills state and start time. 0 on success. */
static int read_stat(long pid, struct proc *out) {
    char path[64], buf[4096];
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

static int in_baseline(const char *baseline, const struct proc *proc) {
    char key[64];
    snprintf(key, sizeof key, "%ld:%llu", proc->pid, proc->start);
    size_t len = strlen(key);
    for (const char *p = baseline; (p = strstr(p, key)) != NULL; p += len) {
        int starts = p == baseline || p[-1] == ' ';
        int ends = p[len] == 0 || p[len] == ' ';
        if (starts && ends) return 1;
    }
    return 0;
}

/* Calls fn for every process in /proc but PID 1 and this one; returns how many fn counted. */
static int each_process(int (*fn)(const struct proc *, const char *), const char *arg) {
    DIR *dir = opendir("/proc");
    if (!dir) return -1;
    long self = getpid();
    int counted = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end || pid <= 1 || pid == self) continue;
        struct proc proc;
        if (read_stat(pid, &proc) == 0) counted += fn(&proc, arg);
    }
    closedir(dir);
    return counted;
}

static int print_one(const struct proc *proc, const char *unused) {
    (void)unused;
    printf("%ld:%llu ", proc->pid, proc->start);
    return 1;
}

static int kill_one(const struct proc *proc, const char *baseline) {
    if (in_baseline(baseline, proc)) return 0;
    if (proc->state == 'Z' || proc->state == 'X') return 0; /* dead: nothing left to run */
    kill((pid_t)proc->pid, SIGKILL); /* a re-list finds any child it made meanwhile */
    return 1;
}

static int stop_all(const char *baseline) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int alive = each_process(kill_one, baseline);
        if (alive < 0) {
            fprintf(stderr, "cannot list /proc: %s\n", strerror(errno));
            return 97;
        }
        if (alive == 0) return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > STOP_SECONDS) {
            fprintf(stderr, "%d processes still alive after %d s\n", alive, STOP_SECONDS);
            return 97;
        }
        struct timespec pause = {0, 1000000}; /* 1 ms: let the killed exit */
        nanosleep(&pause, NULL);
    }
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
            fprintf(stderr, "cannot remove %s: %s\n", path, strerror(errno));
            return -1;
        }
    }
    if (mkdir(path, mode) != 0 || chown(path, uid, gid) != 0 || chmod(path, mode) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", path, strerror(errno));
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

/* A colon-separated file's entry whose first field (or, numeric, third) matches name. */
static int lookup(const char *file, const char *name, long *id, long *group) {
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
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

/* Resolves "user", "uid", "user:group" or "uid:gid" as the container runtime does (an unknown
 * numeric id stands for itself); empty means root. */
static int resolve_user(const char *spec, uid_t *uid, gid_t *gid) {
    char user[256], *group = NULL;
    snprintf(user, sizeof user, "%s", spec);
    char *colon = strchr(user, ':');
    if (colon) {
        *colon = 0;
        group = colon + 1;
    }
    long id = 0, primary = 0;
    if (*user && lookup("/etc/passwd", user, &id, &primary) != 0) {
        char *end;
        id = strtol(user, &end, 10);
        if (*end) return -1;
        primary = id;
    }
    if (group && *group) {
        long gid_value;
        if (lookup("/etc/group", group, &gid_value, NULL) != 0) {
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

static int prepare(const char *user, const char *verifier_dir, const char *tests_dir,
                   const char *mode) {
    uid_t uid;
    gid_t gid;
    if (resolve_user(user, &uid, &gid) != 0) {
        fprintf(stderr, "unknown verifier user %s\n", user);
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

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        if (each_process(print_one, NULL) < 0) return 97;
        putchar('\n');
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "stop") == 0) {
        int with_prepare = argc == 8 && strcmp(argv[3], "prepare") == 0;
        if (argc != 3 && !with_prepare) goto usage;
        int status = stop_all(argv[2]);
        if (status || !with_prepare) return status;
        return prepare(argv[4], argv[5], argv[6], argv[7]);
    }
usage:
    fprintf(stderr, "usage: %s list | stop BASELINE [prepare USER VERIFIER_DIR TESTS_DIR stage|keep]\n",
            argv[0]);
    return 2;
}
