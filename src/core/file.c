/* Bounded reads and read-only mappings of regular files, and atomic writes (see file.h for the
 * contract). */
#define _XOPEN_SOURCE 700
#include "file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <time.h>
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

attn_status attn__text_file_read(attn_ctx *ctx, const char *path, const char *what, int optional,
                                 unsigned char **data, size_t *len) {
    attn_status st = attn__file_read(ctx, path, what,
                                     (uint64_t)attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES), data,
                                     len);
    if (st == ATTN_E_NOT_FOUND && optional) {
        attn_ctx_clear_error(ctx);
        return ATTN_OK;
    }
    return st;
}

attn_status attn__folder_text_read(attn_ctx *ctx, const char *dir, const char *name,
                                   const char *why, unsigned char **data, size_t *len) {
    char path[4096];
    *data = NULL, *len = 0;
    ATTN_FAIL_IF(snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path, ctx,
                 ATTN_E_INVALID, "model folder path too long");
    attn_status st = attn__text_file_read(ctx, path, name, why == NULL, data, len);
    if (st == ATTN_E_NOT_FOUND)
        return attn__fail(ctx, st, "%.300s: missing %s (%s)", dir, name, why);
    return st;
}

/* ---- memory-mapped reads ----------------------------------------------------------------- */
static attn_status map_or_read(attn_ctx *ctx, const char *path, const char *what, uint64_t max,
                               int may_map, attn__fmap *m) {
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
    void *p = may_map ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
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

attn_status attn__file_map(attn_ctx *ctx, const char *path, const char *what, uint64_t max,
                           attn__fmap *m) {
    return map_or_read(ctx, path, what, max, 1, m);
}

attn_status attn__file_map_read(attn_ctx *ctx, const char *path, const char *what,
                                uint64_t max, attn__fmap *m) {
    return map_or_read(ctx, path, what, max, 0, m);
}

void attn__file_unmap(attn_ctx *ctx, attn__fmap *m) {
    if (!m) return;
#if ATTN__HAVE_MMAP
    if (m->mapped && m->data) munmap((void *)(uintptr_t)m->data, m->len);
#endif
    if (!m->mapped) attn__free(ctx, (void *)(uintptr_t)m->data);
    memset(m, 0, sizeof *m);
}

/* ---- output files (attn_file_out_*) -------------------------------------------------------
 * Regular targets: bytes go to ".NAME.tmp-PID-RANDOM" beside the target (created with O_EXCL,
 * so a name someone planted, link or file, is never opened), then fsync, rename over the
 * target, fsync of the directory.  Devices and FIFOs: written in place. */
struct attn_file_out {
    attn_ctx *ctx;
    int fd;
    int in_place;       /* a device or FIFO: no temporary, nothing to rename */
    int err;            /* the first errno of a failed write (kept: the file is abandoned) */
    char *path;         /* as given, for messages */
    char *target;       /* what rename replaces (path, or the file a link names) */
    char *tmp;          /* the temporary file, NULL in place */
    size_t fill;
    unsigned char buf[1 << 16];
};

static int write_bytes(int fd, const unsigned char *p, size_t left) {
    while (left) {
        size_t chunk = left < ((size_t)1 << 30) ? left : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        p += w;
        left -= (size_t)w;
    }
    return 0;
}

attn_status attn__fd_write(attn_ctx *ctx, int fd, const char *path, const void *p, size_t n) {
    int e = write_bytes(fd, p, n);
    ATTN_FAIL_IF(e, ctx, ATTN_E_IO, "%s: %s", path, strerror(e));
    return ATTN_OK;
}

/* 64 random bits for the temporary name: the kernel's generator, else time and addresses
 * (the name only has to be hard to guess; O_EXCL makes it ours either way). */
static uint64_t random_bits(const void *salt) {
    uint64_t r = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
        if (read(fd, &r, sizeof r) != (ssize_t)sizeof r) r = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
         (uint64_t)(uintptr_t)salt << 17 ^ (uint64_t)getpid() << 40;
    return r;
}

/* F7 of the round-3 review: temporary files of this target left by a process that was killed
 * (kill -9, power loss) are removed when the target is next written.  Only names of exactly
 * our form ".NAME.tmp-PID-HEX" for this NAME, only regular files (never followed), and only
 * when no process PID exists here (a live writer's file is left alone; a PID reused since
 * leaves a stale file for a later write). */
static void remove_stale(const char *dir, const char *name) {
    DIR *d = opendir(dir[0] ? dir : ".");
    if (!d) return;
    const size_t nl = strlen(name);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (s[0] != '.' || strncmp(s + 1, name, nl) != 0 || strncmp(s + 1 + nl, ".tmp-", 5))
            continue;
        const char *q = s + 1 + nl + 5;
        long pid = 0;
        int digits = 0;
        for (; *q >= '0' && *q <= '9' && digits < 10; q++, digits++) pid = pid * 10 + (*q - '0');
        if (!digits || *q != '-' || pid <= 0) continue;
        int hex = 0;
        for (q++; (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'); q++) hex++;
        if (hex != 16 || *q) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to know */
        struct stat sb;
        if (fstatat(dirfd(d), s, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            (void)unlinkat(dirfd(d), s, 0);
    }
    closedir(d);
}

static void out_free(attn_file_out *f) {
    attn_ctx *ctx = f->ctx;
    free(f->target);
    attn__free(ctx, f->path);
    attn__free(ctx, f->tmp);
    attn__free(ctx, f);
}

static char *dup_ctx(attn_ctx *ctx, const char *s) {
    size_t n = strlen(s), cap;
    char *d = attn__add_size(n, 1, &cap) ? attn__malloc(ctx, cap) : NULL;
    if (d) memcpy(d, s, cap);
    return d;
}

attn_status attn_file_out_open(attn_ctx *ctx, const char *path, attn_file_out **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "attn_file_out_open: out is NULL");
    *out = NULL;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "output path is NULL or empty");
    attn_file_out *f = attn__malloc(ctx, sizeof *f);
    if (!f) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (output file)");
    memset(f, 0, offsetof(attn_file_out, buf));
    f->ctx = ctx;
    f->fd = -1;
    if (!(f->path = dup_ctx(ctx, path))) {
        out_free(f);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (output path)");
    }
    struct stat sb, lsb;
    int exists = stat(path, &sb) == 0; /* follows links: the kind of what would be written */
    int link = lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode);
    attn_status st = ATTN_OK;
    if (!exists && link) {
        st = attn__fail(ctx, ATTN_E_IO,
                        "cannot write '%.300s': it is a symbolic link to a missing file", path);
    } else if (exists && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
        /* written in place, never created or removed; O_NONBLOCK: a FIFO without a reader
         * is an error (ENXIO), not a hang */
        do f->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        while (f->fd < 0 && errno == EINTR);
        struct stat fb;
        if (f->fd < 0)
            st = attn__fail(ctx, ATTN_E_IO, "cannot open '%.300s' for writing: %s", path,
                            errno == ENXIO ? "a FIFO with no reader" : strerror(errno));
        else if (fstat(f->fd, &fb) != 0 || !(S_ISCHR(fb.st_mode) || S_ISFIFO(fb.st_mode)))
            st = attn__fail(ctx, ATTN_E_IO, "'%.300s' changed while being opened", path);
        else {
            int fl = fcntl(f->fd, F_GETFL);
            if (fl >= 0) (void)fcntl(f->fd, F_SETFL, fl & ~O_NONBLOCK);
            f->in_place = 1;
        }
    } else if (exists && !S_ISREG(sb.st_mode)) {
        st = attn__fail(ctx, ATTN_E_IO, "cannot write '%.300s': it is %s, not a regular file",
                        path, kind_of(sb.st_mode));
    } else {
        /* the file to replace: a link is followed, so that the link itself stays */
        f->target = link ? realpath(path, NULL) : strdup(path);
        if (!f->target)
            st = attn__fail(ctx, link ? ATTN_E_IO : ATTN_E_NOMEM, "cannot resolve '%.300s': %s",
                            path, strerror(errno));
    }
    if (st == ATTN_OK && !f->in_place) {
        const char *target = f->target, *slash = strrchr(target, '/');
        size_t tn = strlen(target), dirlen = slash ? (size_t)(slash - target) + 1 : 0, cap;
        if (attn__add_size(tn, 48, &cap)) f->tmp = attn__malloc(ctx, cap);
        if (!f->tmp) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (output path)");
        } else {
            char *dir = f->tmp; /* the directory, for the stale files: reuses tmp's memory */
            memcpy(dir, target, dirlen);
            dir[dirlen] = 0;
            remove_stale(dir, target + dirlen);
            int e = 0;
            for (int attempt = 0; attempt < 16 && f->fd < 0; attempt++) {
                snprintf(f->tmp, cap, "%.*s.%s.tmp-%ld-%016llx", (int)dirlen, target,
                         target + dirlen, (long)getpid(),
                         (unsigned long long)random_bits(f));
                do f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY |
                                            O_NOFOLLOW, 0666);
                while (f->fd < 0 && errno == EINTR);
                e = f->fd < 0 ? errno : 0;
                if (f->fd < 0 && e != EEXIST) break;
            }
            if (f->fd < 0) {
                attn__free(ctx, f->tmp), f->tmp = NULL;
                st = attn__fail(ctx, ATTN_E_IO, "cannot create a file beside '%.300s': %s",
                                path, strerror(e));
            } else if (exists) { /* the replaced file's permissions; new files get the umask */
                (void)fchmod(f->fd, sb.st_mode & 07777);
            }
        }
    }
    if (st != ATTN_OK) {
        if (f->fd >= 0) close(f->fd);
        out_free(f);
        return st;
    }
    *out = f;
    return ATTN_OK;
}

static int out_flush(attn_file_out *f) {
    if (!f->err && f->fill) f->err = write_bytes(f->fd, f->buf, f->fill);
    f->fill = 0;
    return f->err;
}

attn_status attn_file_out_write(attn_file_out *f, const void *data, size_t n) {
    if (!f) return ATTN_E_INVALID;
    ATTN_FAIL_IF(n && !data, f->ctx, ATTN_E_INVALID, "attn_file_out_write: data is NULL");
    if (!f->err) {
        if (n <= sizeof f->buf - f->fill) {
            if (n) memcpy(f->buf + f->fill, data, n);
            f->fill += n;
        } else if (!out_flush(f)) {
            if (n < sizeof f->buf) memcpy(f->buf, data, n), f->fill = n;
            else f->err = write_bytes(f->fd, data, n);
        }
    }
    if (f->err)
        return attn__fail(f->ctx, ATTN_E_IO, "cannot write '%.300s': %s", f->path,
                          strerror(f->err));
    return ATTN_OK;
}

void attn_file_out_abort(attn_file_out *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp); /* our own temporary file, never the target */
    out_free(f);
}

attn_status attn_file_out_commit(attn_file_out *f) {
    if (!f) return ATTN_E_INVALID;
    attn_ctx *ctx = f->ctx;
    int e = out_flush(f);
    if (!e && !f->in_place && fsync(f->fd) != 0 && errno != EINVAL && errno != EROFS) e = errno;
    if (close(f->fd) != 0 && !e) e = errno;
    f->fd = -1;
    if (!e && f->tmp && rename(f->tmp, f->target) != 0) e = errno;
    if (e) {
        attn_status st = attn__fail(ctx, ATTN_E_IO, "cannot write '%.300s': %s", f->path,
                                    strerror(e));
        attn_file_out_abort(f);
        return st;
    }
    if (f->tmp) { /* the rename itself made durable: fsync the directory */
        char *slash = strrchr(f->target, '/');
        int dfd;
        if (slash && slash != f->target) *slash = 0;
        const char *dir = slash ? (slash == f->target ? "/" : f->target) : ".";
        do dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        while (dfd < 0 && errno == EINTR);
        if (dfd >= 0) {
            (void)fsync(dfd); /* some file systems refuse a directory fsync: nothing lost */
            close(dfd);
        }
        attn__free(ctx, f->tmp), f->tmp = NULL;
    }
    out_free(f);
    return ATTN_OK;
}

attn_status attn__file_write(attn_ctx *ctx, const char *path, const attn__piece *pieces,
                             size_t npieces) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(npieces && !pieces, ctx, ATTN_E_INVALID, "file write: NULL pieces");
    attn_file_out *f;
    ATTN_TRY(attn_file_out_open(ctx, path, &f));
    for (size_t i = 0; i < npieces; i++) {
        attn_status st = attn_file_out_write(f, pieces[i].data, pieces[i].n);
        if (st != ATTN_OK) {
            attn_file_out_abort(f);
            return st;
        }
    }
    return attn_file_out_commit(f);
}

attn_status attn_file_write(attn_ctx *ctx, const char *path, const void *data, size_t n) {
    const attn__piece p = {data, n};
    return attn__file_write(ctx, path, &p, 1);
}
