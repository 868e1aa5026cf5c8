/* Bounded reads and read-only mappings of regular files, and atomic writes (see file.h for the
 * contract). */
#define _XOPEN_SOURCE 700
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(_POSIX_MAPPED_FILES) && _POSIX_MAPPED_FILES > 0 && !defined(ATTN_NO_MMAP)
#include <sys/mman.h>
#define ATTN__HAVE_MMAP 1
#else
#define ATTN__HAVE_MMAP 0
#endif

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef O_NOCTTY
#define O_NOCTTY 0
#endif

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO or pipe";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
#ifdef S_ISSOCK
    if (S_ISSOCK(m)) return "a socket";
#endif
    return "not a regular file";
}

/* Opens path for reading without blocking (O_NONBLOCK: a FIFO with no writer would block the
 * open forever), then refuses anything that is not a regular file.  *size from fstat. */
static attn_status open_regular(attn_ctx *ctx, const char *path, const char *what, int *out_fd,
                                uint64_t *size) {
    int fd;
    do fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        return attn__fail(ctx, e == ENOENT ? ATTN_E_NOT_FOUND : ATTN_E_IO,
                          "cannot open %s '%.300s': %s", what, path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return attn__fail(ctx, ATTN_E_IO, "cannot stat %s '%.300s': %s", what, path,
                          strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return attn__fail(ctx, ATTN_E_IO, "%s '%.300s' is not a regular file (%s)", what, path,
                          kind_of(sb.st_mode));
    }
    /* reads of a regular file never block; clear the flag anyway so they are plain reads */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *out_fd = fd;
    *size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
    return ATTN_OK;
}

/* Opens path as open_regular does and refuses a size over max or the context's
 * ATTN_LIMIT_FILE_BYTES, or one that cannot be addressed.  On success *out_fd is open. */
static attn_status open_bounded(attn_ctx *ctx, const char *path, const char *what, uint64_t max,
                                int *out_fd, size_t *len) {
    int fd = -1;
    uint64_t size = 0;
    ATTN_TRY(open_regular(ctx, path, what, &fd, &size));
    uint64_t lim = (uint64_t)attn_ctx_limit(ctx, ATTN_LIMIT_FILE_BYTES);
    attn_status st = ATTN_OK;
    if (size > lim)
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                        "%s '%.300s' has %llu bytes, over ATTN_LIMIT_FILE_BYTES (%llu)", what,
                        path, (unsigned long long)size, (unsigned long long)lim);
    else if (max && size > max)
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s '%.300s' has %llu bytes, over %llu", what,
                        path, (unsigned long long)size, (unsigned long long)max);
    else if (size >= SIZE_MAX)
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s '%.300s' is too large to address", what,
                        path);
    if (st) {
        close(fd);
        return st;
    }
    *out_fd = fd;
    *len = (size_t)size;
    return ATTN_OK;
}

/* Reads n bytes of fd into p (its size was taken with fstat: fewer bytes means the file
 * shrank meanwhile). */
static attn_status read_exact(attn_ctx *ctx, int fd, const char *path, const char *what,
                              unsigned char *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got < ((size_t)1 << 30) ? n - got : ((size_t)1 << 30);
        ssize_t r = read(fd, p + got, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return attn__fail(ctx, ATTN_E_IO, "cannot read %s '%.300s': %s", what, path,
                              strerror(errno));
        if (r == 0)
            return attn__fail(ctx, ATTN_E_IO, "%s '%.300s' shrank while being read (%zu of %zu "
                              "bytes)", what, path, got, n);
        got += (size_t)r;
    }
    return ATTN_OK;
}

attn_status attn__file_read(attn_ctx *ctx, const char *path, const char *what, uint64_t max,
                            unsigned char **data, size_t *len) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!data || !len, ctx, ATTN_E_INVALID, "file read: NULL output");
    *data = NULL;
    *len = 0;
    if (!what) what = "file";
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "%s: path is NULL or empty", what);
    int fd = -1;
    size_t n = 0;
    ATTN_TRY(open_bounded(ctx, path, what, max, &fd, &n));
    unsigned char *p = attn__malloc(ctx, n + 1);
    if (!p) {
        close(fd);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory reading %s '%.300s' (%zu bytes)",
                          what, path, n);
    }
    attn_status st = read_exact(ctx, fd, path, what, p, n);
    close(fd);
    if (st) {
        attn__free(ctx, p);
        return st;
    }
    p[n] = 0;
    *data = p;
    *len = n;
    return ATTN_OK;
}

/* ---- memory-mapped reads ----------------------------------------------------------------- */
attn_status attn__file_map(attn_ctx *ctx, const char *path, const char *what, uint64_t max,
                           attn__fmap *m) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "file map: NULL output");
    memset(m, 0, sizeof *m);
    if (!what) what = "file";
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "%s: path is NULL or empty", what);
    int fd = -1;
    size_t n = 0;
    ATTN_TRY(open_bounded(ctx, path, what, max, &fd, &n));
    if (n == 0) { /* nothing to map (mmap refuses a length of 0) */
        close(fd);
        return ATTN_OK;
    }
#if ATTN__HAVE_MMAP
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        close(fd); /* the mapping keeps the file */
        m->data = p;
        m->len = n;
        m->mapped = 1;
        return ATTN_OK;
    }
    /* a file system without mmap support: read it instead */
#endif
    unsigned char *b = attn__malloc(ctx, n);
    if (!b) {
        close(fd);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory reading %s '%.300s' (%zu bytes)",
                          what, path, n);
    }
    attn_status st = read_exact(ctx, fd, path, what, b, n);
    close(fd);
    if (st) {
        attn__free(ctx, b);
        return st;
    }
    m->data = b;
    m->len = n;
    return ATTN_OK;
}

void attn__file_unmap(attn_ctx *ctx, attn__fmap *m) {
    if (!m) return;
#if ATTN__HAVE_MMAP
    if (m->mapped && m->data) munmap((void *)(uintptr_t)m->data, m->len);
#endif
    if (!m->mapped) attn__free(ctx, (void *)(uintptr_t)m->data);
    memset(m, 0, sizeof *m);
}

/* ---- atomic writes ----------------------------------------------------------------------- */
static int write_all(int fd, const attn__piece *pieces, size_t npieces) {
    for (size_t i = 0; i < npieces; i++) {
        const unsigned char *p = pieces[i].data;
        size_t left = pieces[i].n;
        while (left) {
            size_t chunk = left < ((size_t)1 << 30) ? left : ((size_t)1 << 30);
            ssize_t w = write(fd, p, chunk);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) return errno;
            if (w == 0) return EIO;
            p += w;
            left -= (size_t)w;
        }
    }
    return 0;
}

/* A device or FIFO named as the output: written in place, never created or removed. */
static attn_status write_in_place(attn_ctx *ctx, const char *path, const attn__piece *pieces,
                                  size_t npieces) {
    int fd;
    do fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return attn__fail(ctx, ATTN_E_IO, "cannot open '%.300s' for writing: %s", path,
                          strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
        close(fd); /* it changed kind between the checks: refuse rather than guess */
        return attn__fail(ctx, ATTN_E_IO, "'%.300s' changed while being opened", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int e = write_all(fd, pieces, npieces);
    if (close(fd) != 0 && !e) e = errno;
    if (e)
        return attn__fail(ctx, ATTN_E_IO, "cannot write '%.300s': %s", path, strerror(e));
    return ATTN_OK;
}

attn_status attn__file_write(attn_ctx *ctx, const char *path, const attn__piece *pieces,
                             size_t npieces) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "output path is NULL or empty");
    ATTN_FAIL_IF(npieces && !pieces, ctx, ATTN_E_INVALID, "file write: NULL pieces");
    struct stat sb;
    int exists = stat(path, &sb) == 0; /* follows links: the kind of what would be written */
    if (exists && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)))
        return write_in_place(ctx, path, pieces, npieces);
    if (exists && !S_ISREG(sb.st_mode))
        return attn__fail(ctx, ATTN_E_IO, "cannot write '%.300s': it is %s, not a regular file",
                          path, kind_of(sb.st_mode));
    /* the file to replace: a link is followed, so that the link itself stays */
    char *real = NULL;
    struct stat lsb;
    if (exists && lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
        real = realpath(path, NULL);
        if (!real)
            return attn__fail(ctx, ATTN_E_IO, "cannot resolve '%.300s': %s", path,
                              strerror(errno));
    }
    const char *target = real ? real : path;
    size_t tn = strlen(target);
    const char *slash = strrchr(target, '/');
    size_t dirlen = slash ? (size_t)(slash - target) + 1 : 0; /* with its '/' */
    size_t cap;
    char *tmp = NULL;
    if (attn__add_size(tn, 64, &cap)) tmp = attn__malloc(ctx, cap);
    if (!tmp) {
        free(real);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (output path)");
    }
    /* ".NAME.tmp-PID-N" beside the target; O_EXCL makes the name ours.  open() applies the
     * umask to 0666, as for any new file; an existing file's permissions are kept below. */
    static unsigned long counter; /* any value will do: collisions only retry */
    int fd = -1, e = 0;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        unsigned long k = ++counter + (unsigned long)attempt * 7919u;
        snprintf(tmp, cap, "%.*s.%s.tmp-%ld-%lu", (int)dirlen, target, target + dirlen,
                 (long)getpid(), k);
        do fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
        while (fd < 0 && errno == EINTR);
        e = fd < 0 ? errno : 0;
        if (fd < 0 && e != EEXIST) break;
    }
    if (fd < 0) {
        attn_status st = attn__fail(ctx, ATTN_E_IO, "cannot create a file beside '%.300s': %s",
                                    path, strerror(e));
        attn__free(ctx, tmp);
        free(real);
        return st;
    }
    if (exists) (void)fchmod(fd, sb.st_mode & 07777);
    e = write_all(fd, pieces, npieces);
    if (!e && fsync(fd) != 0 && errno != EINVAL && errno != EROFS) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (!e && rename(tmp, target) != 0) e = errno;
    attn_status st = ATTN_OK;
    if (e) {
        unlink(tmp); /* our own temporary file, never the target */
        st = attn__fail(ctx, ATTN_E_IO, "cannot write '%.300s': %s", path, strerror(e));
    }
    attn__free(ctx, tmp);
    free(real);
    return st;
}
