/* common.c: what more than one subcommand uses: the keeper's problem line (say), the image's
 * users and groups (lookup, resolve_user), the monotonic clock, whole writes and errno's
 * message. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Why the last request failed, for its answer (errors of the keeper's work land here, not on a
 * stream some other process could share). */
char problem[PROBLEM_ROOM];

void say(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(problem, sizeof problem, format, args);
    va_end(args);
}

/* A colon-separated file's entry whose first field (or, numeric, third) matches name; its id, its
 * fourth field (group, if not NULL) and its first (entry, if not NULL: ENTRY_MAX bytes). */
int lookup(const char *file, const char *name, long *id, long *group, char *entry) {
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
int resolve_user(const char *spec, uid_t *uid, gid_t *gid, char *name) {
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

long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nap_ms(long ms) {
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

int write_full(int fd, const unsigned char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Prints errno's message (after what, unless NULL) to stderr; returns code. */
int fail(const char *what, int code) {
    fprintf(stderr, "%s%s%s\n", what ? what : "", what ? ": " : "", strerror(errno));
    return code;
}
