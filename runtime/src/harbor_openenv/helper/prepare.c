/* prepare.c: the verifier's folders, made by the keeper after a stop (keep.c's stop request):
 * VDIR anew for the verifier's user alone (mode 0755), then TDIR emptied for the tests to be
 * staged (PREPARE_STAGE), or TDIR/test.sh made executable (PREPARE_KEEP, or any other word). */
#include "common.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int prepare(const char *user, const char *verifier_dir, const char *tests_dir,
                   const char *mode) {
    uid_t uid;
    gid_t gid;
    char name[ENTRY_MAX];
    if (resolve_user(user, &uid, &gid, name) != 0) {
        say("unknown verifier user %s", user);
        return KEEP_PREPARE_FAILED;
    }
    if (real_parent(verifier_dir) != 0 || fresh_dir(verifier_dir, 0755, uid, gid) != 0)
        return KEEP_PREPARE_FAILED;
    if (strcmp(mode, PREPARE_STAGE) == 0) {
        if (real_parent(tests_dir) != 0 || fresh_dir(tests_dir, 0755, 0, 0) != 0)
            return KEEP_PREPARE_FAILED;
    } else {
        char script[4096];
        struct stat st;
        snprintf(script, sizeof script, "%s/test.sh", tests_dir);
        if (lstat(script, &st) == 0 && S_ISREG(st.st_mode)) chmod(script, st.st_mode | 0111);
    }
    return 0;
}
