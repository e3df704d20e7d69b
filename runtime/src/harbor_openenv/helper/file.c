/* file.c: helper file read ROOT PATH LIMIT | file write ROOT PATH | file list ROOT PATH
 *
 * The agent's file action on PATH (absolute), as the user running it, confined to ROOT (the
 * real working directory): see file_action below. read prints at most LIMIT bytes raw; write
 * copies standard input in place and prints the real path written; list executes ls -la in the
 * folder (ls -lad of an entry that is not one), or, in an image without ls, prints the same
 * itself (list_self, ls.c). Exit codes (contract.h): FILE_OUTSIDE outside ROOT (the real path it
 * reached on stderr), FILE_MISSING missing (for a write: a folder could not be made),
 * FILE_IS_FOLDER a folder, FILE_NOT_REGULAR not a regular file, FILE_FAILED another error (its
 * message on stderr).
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINKS 40
#define PATH_ROOM 8192

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

/* The action on the entry the walk ended on: target is an O_PATH fd of it, st its stat (target
 * -1: a write's missing file, created as name in dir), dir the folder holding it. */
static int act(int op, const char *root, int dir, const char *name, int target,
               const struct stat *st, const char *limit) {
    if (op == LIST) {
        int is_dir = S_ISDIR(st->st_mode);
        if (!fd_inside(target, root, "")) return FILE_OUTSIDE;
        if (fchdir(is_dir ? target : dir) != 0) return fail(NULL, FILE_MISSING);
        char *folder[] = {"ls", "-la", NULL}, *entry[] = {"ls", "-lad", "--", (char *)name, NULL};
        execvp("ls", is_dir ? folder : entry); /* the agent's own view: its image's ls */
        return list_self(is_dir ? target : dir, is_dir ? NULL : name); /* no ls: the same format */
    }
    if (target >= 0 ? !fd_inside(target, root, "") : !fd_inside(dir, root, name))
        return FILE_OUTSIDE;
    if (target >= 0 && !S_ISREG(st->st_mode))
        return S_ISDIR(st->st_mode) ? FILE_IS_FOLDER : FILE_NOT_REGULAR;
    int fd = target < 0 ? openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)
                        : reopen(target, op == READ ? O_RDONLY : O_WRONLY);
    struct stat opened;
    if (fd < 0 || fstat(fd, &opened) != 0) return fail(NULL, FILE_FAILED);
    if (!fd_inside(fd, root, "")) return FILE_OUTSIDE;
    if (!S_ISREG(opened.st_mode)) return FILE_NOT_REGULAR;
    if (op == READ) return copy_out(fd, strtoull(limit, NULL, 10)) ? fail(NULL, FILE_FAILED) : 0;
    /* written in place, once checked: an existing file keeps its mode, owner and group */
    if (copy_stdin(fd) != 0) return fail(NULL, FILE_FAILED);
    char real[4096];
    if (fd_path(fd, real, sizeof real) != 0 || close(fd) != 0) return fail(NULL, FILE_FAILED);
    printf("%s\n", real); /* where it was written */
    return 0;
}

/* helper file read|write|list ROOT PATH [LIMIT]: resolves PATH (absolute) as the running user,
 * one component at a time from fds (openat with O_NOFOLLOW; a symlink's target is spliced into
 * the rest of the path, at most MAX_LINKS of them), so a rename meanwhile can only redirect the
 * walk, never what it acts on: the entry it ends on is acted on through its own fd, once the
 * real path of that fd (/proc/self/fd) is ROOT or below. A write creates missing folders (and the
 * file, with the umask) only in a folder inside ROOT, and writes an existing file in place. */
int file_action(int op, const char *root, const char *path, const char *limit) {
    char rest[PATH_ROOM], spliced[PATH_ROOM], name[256], link[PATH_MAX];
    if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) return FILE_MISSING;
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), links = 0;
    if (dir < 0) return fail(NULL, FILE_FAILED);
    for (char *at = rest;;) {
        while (*at == '/') at++;
        size_t len = (size_t)(strchrnul(at, '/') - at);
        if (len == 0) { /* the path ends on a folder */
            struct stat st;
            if (fstat(dir, &st) != 0) return fail(NULL, FILE_FAILED);
            return act(op, root, dir, ".", dir, &st, limit);
        }
        if (len >= sizeof name) return errno = ENAMETOOLONG, fail(NULL, FILE_FAILED);
        memcpy(name, at, len);
        name[len] = 0;
        for (at += len; *at == '/'; at++) {
        }
        if (strcmp(name, ".") == 0) continue;
        int fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && op == WRITE) {
            snprintf(spliced, sizeof spliced, "%s%s%s", name, *at ? "/" : "", at);
            if (!fd_inside(dir, root, spliced)) return FILE_OUTSIDE;
            if (!*at) return act(op, root, dir, name, -1, NULL, limit);
            if (mkdirat(dir, name, 0777) != 0 && errno != EEXIST) return fail(NULL, FILE_MISSING);
            fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0 && errno == ENOENT) {
            snprintf(spliced, sizeof spliced, "%s%s%s", name, *at ? "/" : "", at);
            return fd_inside(dir, root, spliced) ? FILE_MISSING : FILE_OUTSIDE;
        }
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) return fail(NULL, FILE_FAILED);
        if (S_ISLNK(st.st_mode)) { /* go on from its target, then the rest */
            ssize_t n = readlinkat(fd, "", link, sizeof link - 1);
            close(fd);
            if (n < 0) return fail(NULL, FILE_FAILED);
            if (++links > MAX_LINKS) return errno = ELOOP, fail(NULL, FILE_FAILED);
            link[n] = 0;
            int room = snprintf(spliced, sizeof spliced, "%s%s%s", link, *at ? "/" : "", at);
            if (room < 0 || room >= (int)sizeof spliced)
                return errno = ENAMETOOLONG, fail(NULL, FILE_FAILED);
            memcpy(rest, spliced, (size_t)room + 1);
            at = rest;
            if (link[0] == '/' && (fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
                return fail(NULL, FILE_FAILED);
            if (link[0] == '/') enter(&dir, fd);
            continue;
        }
        if (!*at) return act(op, root, dir, name, fd, &st, limit);
        if (!S_ISDIR(st.st_mode)) return fd_inside(dir, root, name) ? FILE_MISSING : FILE_OUTSIDE;
        enter(&dir, fd);
    }
}
