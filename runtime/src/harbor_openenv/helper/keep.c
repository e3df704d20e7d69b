/* keep.c: helper keep [USER ENTRYPOINT...], PID 1 of every task container, as root.
 *
 * Makes itself non-dumpable (no ptrace, /proc/1/mem or /proc/1/fd for any process of the
 * container: that needs CAP_SYS_PTRACE), starts the image's ENTRYPOINT (with its arguments) as
 * its child as USER, reaps every orphan, and answers the runtime's requests, one tab-separated
 * line each on its standard input (which only the engine's attach can write), one line each on
 * its standard output (children get /dev/null and its stderr instead):
 *   ID mark                      the processes running now are the baseline; answers
 *                                "ID ok PID:START..." (fails, KEEP_ENTRYPOINT_EXITED, if the
 *                                ENTRYPOINT exited; see stop.c)
 *   ID park USERS                resolves USERS now and parks a thread of each one's uid that
 *                                a stop wakes to kill its processes (kill.c); answers "ID ok"
 *   ID stop USERS [VUSER VDIR TDIR stage|keep]
 *                                ends every process USERS' code may have started (see stop.c);
 *                                then makes VDIR anew for VUSER alone (mode 0755) and empties
 *                                TDIR for staging ("stage") or makes TDIR/test.sh executable
 *                                ("keep"; see prepare.c); answers "ID ok"
 *   ID changes [SKIP...]         what changed since the last mark, outside the folders SKIP
 *                                (absolute paths): "ID ok KIND:PATH..." (see changes_request)
 * and "ID err CODE PROBLEM" on failure, CODE one of contract.h's KEEP_* codes: the ENTRYPOINT
 * exited, processes still alive after STOP_SECONDS, prepare failed, a malformed request. Every
 * signal is blocked and read from a signalfd: SIGTERM or SIGINT from outside the PID namespace
 * (the engine's stop; the sender's pid reads 0 there) ends it, the same from inside is ignored.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

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

/* -- changes: what changed since the mark, by inode change times ----------------------------
 * Every change to an inode (a write, chmod, chown, a link or a rename, and utimes itself) sets
 * its ctime to now, which no process can set back without CAP_SYS_TIME (never granted): an
 * entry whose ctime is at or after the mark's coarse clock (the clock file times come from)
 * changed since. On overlayfs (the engine's storage) a change below a folder first copies that
 * folder up, which sets its ctime too; folders first copied up before the keeper started cannot
 * exist (the upper layer starts empty), so a folder whose ctime is older than the keeper's start
 * (less a margin) holds nothing changed and is not entered: the walk visits only the folders the
 * container wrote. Elsewhere every folder is walked. Symlinks are never followed, other
 * filesystems (mounts) never entered. */

#define OVERLAY_MAGIC 0x794c7630
#define WALK_DEPTH 64     /* deeper folders are reported, not entered */
#define START_MARGIN_S 2  /* the keeper's start, less this, bounds a copied-up folder's ctime */

static struct timespec started, marked;
static int have_mark;
static char *added_names; /* CHANGES_ADDED_DIR's names at mark, each NUL-terminated */
static size_t added_size;

struct walk {
    char **skip;
    int skips;
    int prune; /* overlayfs: enter only folders copied up since the keeper started */
    dev_t dev;
    char *out;
    size_t used, room;
    int full;
};

static int at_or_after(const struct timespec *t, const struct timespec *since) {
    return t->tv_sec > since->tv_sec || (t->tv_sec == since->tv_sec && t->tv_nsec >= since->tv_nsec);
}

/* Remembers the mark's time and CHANGES_ADDED_DIR's names; called on every mark. */
static void changes_mark(void) {
    clock_gettime(CLOCK_REALTIME_COARSE, &marked);
    have_mark = 1;
    free(added_names);
    added_names = NULL;
    added_size = 0;
    DIR *dir = opendir(CHANGES_ADDED_DIR);
    if (!dir) return;
    size_t room = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        size_t n = strlen(entry->d_name) + 1;
        if (added_size + n > room) {
            room = (added_size + n) * 2;
            char *grown = realloc(added_names, room);
            if (!grown) break;
            added_names = grown;
        }
        memcpy(added_names + added_size, entry->d_name, n);
        added_size += n;
    }
    closedir(dir);
}

static int was_there(const char *name) {
    for (size_t at = 0; at < added_size; at += strlen(added_names + at) + 1)
        if (!strcmp(added_names + at, name)) return 1;
    return 0;
}

/* Appends " KIND:PATH" to the answer, PATH's bytes below '!', above '~' and '\\' as \ooo. */
static void emit(struct walk *w, const char *kind, const char *path) {
    size_t need = strlen(path) * 4 + 4;
    if (w->full || w->used + need > CHANGES_MAX_BYTES) {
        w->full = 1;
        return;
    }
    if (w->used + need > w->room) {
        size_t room = (w->used + need) * 2;
        char *grown = realloc(w->out, room);
        if (!grown) {
            w->full = 1;
            return;
        }
        w->out = grown;
        w->room = room;
    }
    char *p = w->out + w->used;
    p += sprintf(p, " %s:", kind);
    for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
        if (*c <= ' ' || *c > '~' || *c == '\\')
            p += sprintf(p, "\\%03o", *c);
        else
            *p++ = (char)*c;
    }
    w->used = (size_t)(p - w->out);
}

static int skipped(const struct walk *w, const char *path) {
    for (int i = 0; i < w->skips; i++)
        if (!strcmp(w->skip[i], path)) return 1;
    return 0;
}

/* Reports what changed below the open folder dirfd (path, len bytes long; "" for /), then
 * closes dirfd. */
static void walk(struct walk *w, int dirfd, char *path, size_t len, int depth) {
    DIR *dir = fdopendir(dirfd);
    if (!dir) {
        close(dirfd);
        return;
    }
    struct dirent *entry;
    while (!w->full && (entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        size_t n = strlen(name);
        if (len + 1 + n >= 4096) { /* too long to name: its folder stands for it */
            emit(w, CHANGE_CHANGED, len ? path : "/");
            continue;
        }
        path[len] = '/';
        memcpy(path + len + 1, name, n + 1);
        struct stat st;
        if (skipped(w, path) || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        int folder = S_ISDIR(st.st_mode);
        if (at_or_after(&st.st_ctim, &marked)) {
            int added = len == strlen(CHANGES_ADDED_DIR) &&
                        !strncmp(path, CHANGES_ADDED_DIR, len) && !was_there(name);
            emit(w, added ? CHANGE_ADDED : CHANGE_CHANGED, path);
        }
        if (!folder || st.st_dev != w->dev) continue;
        struct timespec floor = started;
        floor.tv_sec -= START_MARGIN_S;
        if (w->prune && !at_or_after(&st.st_ctim, &floor)) continue;
        if (depth >= WALK_DEPTH) {
            emit(w, CHANGE_CHANGED, path);
            continue;
        }
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) walk(w, fd, path, len + 1 + n, depth + 1);
    }
    closedir(dir);
}

/* changes [SKIP...]: " KIND:PATH" for each entry changed since the mark, outside the SKIP
 * folders, printed after "ID ok" by handle(). */
static int changes_request(char **f, int n, struct walk *w) {
    if (!have_mark) return say("no mark yet"), KEEP_CHANGES_FAILED;
    struct stat root;
    struct statfs fs;
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &root) != 0 || fstatfs(fd, &fs) != 0) {
        if (fd >= 0) close(fd);
        return say("cannot open /: %s", strerror(errno)), KEEP_CHANGES_FAILED;
    }
    w->skip = f;
    w->skips = n;
    w->prune = fs.f_type == OVERLAY_MAGIC;
    w->dev = root.st_dev;
    static char path[4096];
    path[0] = 0;
    walk(w, fd, path, 0, 0);
    if (w->full) return say("more than %u bytes of changes", CHANGES_MAX_BYTES), KEEP_CHANGES_FAILED;
    return 0;
}

/* stop USERS [VERIFIER_USER VERIFIER_DIR TESTS_DIR stage|keep]: USERS (comma-separated) are
 * every user whose code ran since the baseline, as the mark resolved them (kill.c), else as they
 * resolve now; a user that does not resolve counts as root. */
static int stop_request(char **f, int n) {
    if (n != 1 && n != 5)
        return say("usage: stop USERS [VUSER VDIR TDIR stage|keep]"), KEEP_BAD_REQUEST;
    uid_t uids[64];
    int count = 0, all = 0;
    for (char *spec = strtok(f[0], ","); spec; spec = strtok(NULL, ",")) {
        if (count == 64 || user_uid(spec, &uids[count]) != 0 || uids[count] == 0)
            all = 1;
        else
            count++;
    }
    int status = stop(uids, count, all);
    if (status || n == 1) return status;
    return prepare(f[1], f[2], f[3], f[4]);
}

/* park USERS: resolves USERS (comma-separated) now, before any code of theirs runs, and parks
 * each one's killer for the stops to come (kill.c). */
static int park_request(char **f, int n) {
    if (n != 1) return say("usage: park USERS"), KEEP_BAD_REQUEST;
    int status = 0;
    for (char *spec = strtok(f[0], ","); spec && !status; spec = strtok(NULL, ","))
        status = park_killer(spec);
    return status;
}

/* One request line: "ID mark", "ID stop ..." or "ID changes ..." (tab-separated); answers
 * "ID ok[ BASELINE| CHANGES]" or "ID err CODE PROBLEM" on stdout, one line. */
static void handle(char *line) {
    char *f[64];
    int n = fields_of(line, f, 64);
    problem[0] = 0;
    int status = KEEP_BAD_REQUEST;
    struct walk changes = {0};
    int is_mark = n >= 2 && !strcmp(f[1], REQUEST_MARK);
    if (is_mark) {
        status = n == 2 ? mark() : (say("usage: mark"), KEEP_BAD_REQUEST);
        if (!status) changes_mark();
    } else if (n >= 2 && !strcmp(f[1], REQUEST_STOP))
        status = stop_request(f + 2, n - 2);
    else if (n >= 2 && !strcmp(f[1], REQUEST_PARK))
        status = park_request(f + 2, n - 2);
    else if (n >= 2 && !strcmp(f[1], REQUEST_CHANGES))
        status = changes_request(f + 2, n - 2, &changes);
    else
        say("unknown request");
    for (char *p = problem; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    if (status) {
        printf("%s " ANSWER_ERR " %d %s\n", f[0], status, problem);
    } else {
        printf("%s " ANSWER_OK, f[0]);
        if (is_mark)
            for (size_t i = 0; i < baseline_count; i++)
                printf(" %ld:%llu", baseline[i].pid, baseline[i].start);
        if (changes.used) fwrite(changes.out, 1, changes.used, stdout);
        printf("\n");
    }
    free(changes.out);
    fflush(stdout);
}

int keep(int argc, char **argv) {
    prctl(PR_SET_DUMPABLE, 0); /* no ptrace, /proc/1/mem or /proc/1/fd for a process of the
                                  container: only CAP_SYS_PTRACE passes, which Docker never grants */
    clock_gettime(CLOCK_REALTIME_COARSE, &started);
    if (getpid() != 1) {
        fprintf(stderr, "helper keep: must be PID 1 of the container (is an init of the engine's"
                        " own in front of it?)\n");
        return EXIT_USAGE;
    }
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    int signals = signalfd(-1, &all, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signals < 0)
        return fprintf(stderr, "helper keep: signalfd: %s\n", strerror(errno)), EXIT_USAGE;
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
