/* kill.c: the stop's per-uid kills, made with nothing the stop could be denied: no process, no
 * memory, no file.
 *
 * kill(-1, SIGKILL) from a thread whose real and effective uid are a user's ends every process
 * that uid may signal (those whose real or saved uid it is) in one system call no fork races: it
 * holds the task list while it signals, and a fork that would add a child meanwhile fails with the
 * signal pending. That thread is made on a park request, which the runtime sends before the first
 * command of each user after the mark, and parked on a futex: a stop wakes it, it makes the
 * call, it parks again. Its uids are set by the raw system call, so for it alone
 * (libc's setresuid would change every thread): real and effective the user's, saved root. So:
 * - the agent may signal it (its real uid is the agent's), which does nothing: it blocks every
 *   signal, and SIGKILL and SIGSTOP from inside the PID namespace never reach its init's threads;
 * - it cannot ptrace it, read or write its memory, or set its limits (prlimit): those need every
 *   uid of the target the caller's, and its saved uid is root's (and the keeper is not dumpable);
 * - it may lower its priority or pin it to one CPU (same effective uid), which only delays it:
 *   the stop first stops every process of the container (kill(-1, SIGSTOP) as root), so nothing
 *   of the agent's runs when it is woken.
 * A user not parked (its thread could not be made) is killed from the keeper's own thread, its uids set the same way
 * for the call and then set back to root's: no process either, but one credential is allocated
 * (kernel memory, charged to the container) each way.
 */
#include "common.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KILLERS_MAX 64
#define KILLER_STACK (64u << 10)

enum { STARTING, PARKED, ASKED, DONE, FAILED };

struct killer {
    char name[ENTRY_MAX + 1]; /* the user as the park request named it */
    uid_t uid;
    atomic_int state;
};

static struct killer killers[KILLERS_MAX];
static int killer_count;

static void futex_wait(atomic_int *word, int value, long long ms) {
    struct timespec timeout = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, ms >= 0 ? &timeout : NULL, NULL, 0);
}

static void futex_wake(atomic_int *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *killer_main(void *arg) {
    struct killer *k = arg;
    int ok = syscall(SYS_setresuid, k->uid, k->uid, 0) == 0; /* this thread alone */
    prctl(PR_SET_DUMPABLE, 0); /* a uid change resets it to the host's suid_dumpable */
    atomic_store(&k->state, ok ? PARKED : FAILED);
    futex_wake(&k->state);
    while (ok) {
        int state = atomic_load(&k->state);
        if (state != ASKED) {
            futex_wait(&k->state, state, -1);
            continue;
        }
        kill(-1, SIGKILL);
        atomic_store(&k->state, DONE);
        futex_wake(&k->state);
    }
    return NULL;
}

static struct killer *named(const char *name) {
    for (int i = 0; i < killer_count; i++)
        if (!strcmp(killers[i].name, name)) return &killers[i];
    return NULL;
}

/* Resolves name now (before any code of that user runs) and, for a user other than root, parks
 * its killer; a name resolved before is kept as it was. Fails only on a malformed request. */
int park_killer(const char *name) {
    if (named(name)) return 0;
    if (killer_count == KILLERS_MAX || strlen(name) > ENTRY_MAX)
        return say("more than %d users, or a name too long: %s", KILLERS_MAX, name), KEEP_BAD_REQUEST;
    struct killer *k = &killers[killer_count];
    gid_t gid;
    char entry[ENTRY_MAX];
    if (resolve_user(name, &k->uid, &gid, entry) != 0) return 0; /* a stop counts it as root */
    strcpy(k->name, name);
    atomic_store(&k->state, k->uid == 0 ? PARKED : STARTING);
    if (k->uid != 0) {
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, KILLER_STACK);
        int failed = pthread_create(&thread, &attr, killer_main, k);
        pthread_attr_destroy(&attr);
        if (failed) return 0; /* no slot: a stop kills from the keeper's own thread */
        pthread_detach(thread);
        int state;
        while ((state = atomic_load(&k->state)) == STARTING) futex_wait(&k->state, state, -1);
        if (state == FAILED) return 0;
    }
    killer_count++;
    return 0;
}

/* The uid of a user, as its park resolved it, else resolved now; 0 when it resolves. */
int user_uid(const char *name, uid_t *uid) {
    struct killer *k = named(name);
    if (k) return *uid = k->uid, 0;
    gid_t gid;
    char entry[ENTRY_MAX];
    return resolve_user(name, uid, &gid, entry);
}

/* kill(-1, SIGKILL) as uid (not root): its parked killer's, else this thread's for the call. 0 once
 * made, -1 when it could not be (the stop then ends every process). */
int kill_as(uid_t uid, long long since) {
    struct killer *k = NULL;
    for (int i = 0; i < killer_count && !k; i++)
        if (killers[i].uid == uid) k = &killers[i];
    if (k) {
        atomic_store(&k->state, ASKED);
        futex_wake(&k->state);
        int state;
        while ((state = atomic_load(&k->state)) == ASKED) {
            long long left = since + STOP_SECONDS * 1000LL - now_ms();
            if (left <= 0) return say("the stop's thread for uid %lu did not run", (unsigned long)uid), -1;
            futex_wait(&k->state, state, left);
        }
        atomic_store(&k->state, PARKED);
        return 0;
    }
    if (syscall(SYS_setresuid, uid, uid, 0) != 0) return -1;
    kill(-1, SIGKILL);
    if (syscall(SYS_setresuid, 0, 0, 0) != 0) { /* cannot happen: the saved uid is root's */
        fprintf(stderr, "helper keep: cannot become root again: %s\n", strerror(errno));
        _exit(EXIT_USAGE);
    }
    prctl(PR_SET_DUMPABLE, 0);
    return 0;
}
