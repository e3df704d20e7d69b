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
 *   ID stop USERS [VUSER VDIR TDIR stage|keep]
 *                                ends every process USERS' code may have started (see stop.c);
 *                                then makes VDIR anew for VUSER alone (mode 0755) and empties
 *                                TDIR for staging ("stage") or makes TDIR/test.sh executable
 *                                ("keep"; see prepare.c); answers "ID ok"
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
#include <sys/prctl.h>
#include <sys/signalfd.h>
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

/* stop USERS [VERIFIER_USER VERIFIER_DIR TESTS_DIR stage|keep]: USERS (comma-separated) are
 * every user whose code ran since the baseline; a user that does not resolve counts as root. */
static int stop_request(char **f, int n) {
    if (n != 1 && n != 5)
        return say("usage: stop USERS [VUSER VDIR TDIR stage|keep]"), KEEP_BAD_REQUEST;
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
    int status = KEEP_BAD_REQUEST;
    int is_mark = n >= 2 && !strcmp(f[1], REQUEST_MARK);
    if (is_mark) status = n == 2 ? mark() : (say("usage: mark"), KEEP_BAD_REQUEST);
    else if (n >= 2 && !strcmp(f[1], REQUEST_STOP)) status = stop_request(f + 2, n - 2);
    else say("unknown request");
    for (char *p = problem; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    if (status) {
        printf("%s " ANSWER_ERR " %d %s\n", f[0], status, problem);
    } else {
        printf("%s " ANSWER_OK, f[0]);
        if (is_mark)
            for (size_t i = 0; i < baseline_count; i++)
                printf(" %ld:%llu", baseline[i].pid, baseline[i].start);
        printf("\n");
    }
    fflush(stdout);
}

int keep(int argc, char **argv) {
    prctl(PR_SET_DUMPABLE, 0); /* no ptrace, /proc/1/mem or /proc/1/fd for a process of the
                                  container: only CAP_SYS_PTRACE passes, which Docker never grants */
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
