/* common.h: what the helper's files give each other (each .c file includes it first), by file.
 * The values shared with the runtime's Python side are contract.h's. */
#ifndef HARBOR_OPENENV_COMMON_H
#define HARBOR_OPENENV_COMMON_H

#define _GNU_SOURCE
#include <stddef.h>
#include <sys/types.h>

#include "contract.h"

/* -- common.c ---------------------------------------------------------------------------------- */

#define ENTRY_MAX 64      /* a user's or group's name, as lookup copies it */
#define PROBLEM_ROOM 1024 /* the keeper's problem line */

/* Why the last request failed, for the keeper's answer; say() writes it. */
extern char problem[PROBLEM_ROOM];
void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
int lookup(const char *file, const char *name, long *id, long *group, char *entry);
int resolve_user(const char *spec, uid_t *uid, gid_t *gid, char *name);
long long now_ms(void);
void nap_ms(long ms);
int write_full(int fd, const unsigned char *buf, size_t n);
int fail(const char *what, int code);

/* -- keep.c ------------------------------------------------------------------------------------ */

int keep(int argc, char **argv);

/* -- stop.c: the keeper's processes ------------------------------------------------------------ */

struct proc {
    long pid;
    char state;
    unsigned long long start;
};

extern struct proc *baseline; /* mark's, baseline_count of them */
extern size_t baseline_count;
extern pid_t entrypoint_pid; /* the image's ENTRYPOINT while it runs (keep.c starts it), else -1 */
void reap(void);
int mark(void);
int stop(const uid_t *uids, int count, int all);

/* -- kill.c: the stop's per-uid kills -------------------------------------------------------- */

int park_killer(const char *name);
int user_uid(const char *name, uid_t *uid);
int kill_as(uid_t uid, long long since);

/* -- prepare.c --------------------------------------------------------------------------------- */

int prepare(const char *user, const char *verifier_dir, const char *tests_dir, const char *mode);

/* -- serve.c ----------------------------------------------------------------------------------- */

int serve(void);

/* -- relay.c ----------------------------------------------------------------------------------- */

int relay(const char *port);

/* -- file.c ------------------------------------------------------------------------------------ */

enum { READ, WRITE, LIST };
int file_action(int op, const char *root, const char *path, const char *limit);

/* -- ls.c -------------------------------------------------------------------------------------- */

int list_self(int dir, const char *name);

#endif
