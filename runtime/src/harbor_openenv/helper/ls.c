/* ls.c: list_self, the list action (file.c) in an image without ls. */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

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
int list_self(int dir, const char *name) {
    struct row one;
    if (name) {
        if (stat_row(dir, name, &one) != 0) return fail(name, FILE_FAILED);
        print_rows(&one, 1);
        return 0;
    }
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) return fail(NULL, FILE_FAILED);
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
    if (!rows) return errno = ENOMEM, fail(NULL, FILE_FAILED);
    qsort(rows, count, sizeof *rows, by_name);
    printf("total %llu\n", (blocks + 1) / 2); /* 512-byte blocks, shown in KiB rounded up */
    print_rows(rows, count);
    return 0;
}
