/* Input and output shared by the commands (cli.h): the one bounded reader of text files and
 * standard input, the escaping of text that comes from files, error messages (attn_cli_fail),
 * and the check of standard output at exit. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How long a FIFO given as an input waits for a program to open it for writing. */
#define ATTN_CLI_FIFO_WAIT_MS 10000

#include "cli.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef O_NOCTTY
#define O_NOCTTY 0
#endif

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
#ifdef S_ISSOCK
    if (S_ISSOCK(m)) return "a socket";
#endif
    return "of an unknown kind";
}

/* Reads fd to its end into a NUL-terminated buffer, refusing more than max bytes; size_hint:
 * the expected size (a regular file's), 0 if unknown.  Returns 0, an errno value, or -1 when
 * there was more than max. */
static int read_bounded(int fd, uint64_t max, uint64_t size_hint, const char *first,
                        size_t nfirst, char **data, size_t *len) {
    /* room for max + 1 bytes (to see one past the bound) and the NUL */
    uint64_t most = max < SIZE_MAX - 2 ? max + 2 : SIZE_MAX;
    uint64_t want = size_hint ? size_hint + 2 : 65536;
    size_t cap = (size_t)(want < most ? want : most), n = nfirst;
    char *p = malloc(cap);
    if (!p) return ENOMEM;
    memcpy(p, first, nfirst); /* bytes already read (nfirst <= 1 < cap) */
    while ((uint64_t)n <= max) {
        if (n + 1 >= cap) {
            size_t nc = cap <= SIZE_MAX / 2 ? cap * 2 : SIZE_MAX;
            if ((uint64_t)nc > most) nc = (size_t)most;
            char *q = realloc(p, nc);
            if (!q) {
                free(p);
                return ENOMEM;
            }
            p = q, cap = nc;
        }
        ssize_t r = read(fd, p + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { /* inherited O_NONBLOCK */
            struct pollfd pf = {fd, POLLIN, 0};
            if (poll(&pf, 1, -1) >= 0 || errno == EINTR) continue;
        }
        if (r < 0) {
            int e = errno;
            free(p);
            return e;
        }
        if (r == 0) {
            p[n] = 0;
            *data = p;
            *len = n;
            return 0;
        }
        n += (size_t)r;
    }
    free(p);
    return -1;
}

/* fd: a FIFO opened without blocking.  Waits up to ATTN_CLI_FIFO_WAIT_MS for a writer: 1 when
 * one has it open (a read that would block), when its first byte came (into first[0],
 * *nfirst = 1) or when one came and went (the end of the input); 0 when none came; -1 with
 * errno on a read error. */
static int fifo_wait_writer(int fd, char *first, size_t *nfirst) {
    for (int waited = 0;; waited += 20) {
        ssize_t r = read(fd, first, 1);
        if (r == 1) {
            *nfirst = 1;
            return 1;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        if (r < 0 && errno != EINTR) return -1;
        if (r == 0) { /* no writer now: none yet, or one that closed it (POLLHUP) */
            struct pollfd pf = {fd, POLLIN, 0};
            if (poll(&pf, 1, 0) > 0 && (pf.revents & POLLHUP)) return 1;
        }
        if (waited >= ATTN_CLI_FIFO_WAIT_MS) return 0;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int attn_cli_read_all(const char *cmd, const char *path, int64_t max, const char *limit_name,
                      char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    uint64_t lim = max > 0 ? (uint64_t)max : 0;
    int is_stdin = !strcmp(path, "-"), fd = 0, is_fifo = 0;
    char first[1];
    size_t nfirst = 0;
    const char *shown = is_stdin ? "standard input" : path;
    uint64_t hint = 0;
    if (is_stdin) { /* standard input from a file: refused early when it is too long */
        struct stat sb;
        off_t at = lseek(0, 0, SEEK_CUR);
        if (fstat(0, &sb) == 0 && S_ISREG(sb.st_mode) && at >= 0 && sb.st_size > at) {
            hint = (uint64_t)(sb.st_size - at);
            if (hint > lim) {
                fprintf(stderr, "attn %s: %s: %llu bytes, over the limit of %llu bytes (%s)\n",
                        cmd, shown, (unsigned long long)hint, (unsigned long long)lim,
                        limit_name);
                return 0;
            }
        }
    } else {
        /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever */
        do fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        while (fd < 0 && errno == EINTR);
        if (fd < 0) {
            fprintf(stderr, "attn %s: cannot open %s: %s\n", cmd, path, strerror(errno));
            return 0;
        }
        struct stat sb;
        if (fstat(fd, &sb) != 0) {
            fprintf(stderr, "attn %s: cannot stat %s: %s\n", cmd, path, strerror(errno));
            close(fd);
            return 0;
        }
        if (!S_ISREG(sb.st_mode) && !S_ISFIFO(sb.st_mode)) {
            fprintf(stderr, "attn %s: %s: not a regular file (%s)\n", cmd, path,
                    kind_of(sb.st_mode));
            close(fd);
            return 0;
        }
        if (S_ISREG(sb.st_mode)) {
            uint64_t size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
            if (size > lim) {
                fprintf(stderr, "attn %s: %s: %llu bytes, over the limit of %llu bytes (%s)\n",
                        cmd, path, (unsigned long long)size, (unsigned long long)lim,
                        limit_name);
                close(fd);
                return 0;
            }
            hint = size;
        }
        is_fifo = S_ISFIFO(sb.st_mode);
        if (is_fifo) { /* a writer may open it a moment after us: wait for one, boundedly */
            int w = fifo_wait_writer(fd, first, &nfirst);
            if (w <= 0) {
                if (w == 0)
                    fprintf(stderr, "attn %s: %s is a FIFO and no program opened it for writing "
                                    "within %d s\n", cmd, path, ATTN_CLI_FIFO_WAIT_MS / 1000);
                else
                    fprintf(stderr, "attn %s: cannot read %s: %s\n", cmd, path,
                            strerror(errno));
                close(fd);
                return 0;
            }
        }
        /* reads block again: a FIFO's writer may be slow; with no writer a read sees the end */
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    int e = read_bounded(fd, lim, hint, first, nfirst, data, len);
    if (!is_stdin) close(fd);
    if (e == -1) {
        fprintf(stderr, "attn %s: %s: more than the limit of %llu bytes (%s)\n", cmd, shown,
                (unsigned long long)lim, limit_name);
    } else if (e == ENOMEM) {
        fprintf(stderr, "attn %s: out of memory reading %s\n", cmd, shown);
    } else if (e) {
        fprintf(stderr, "attn %s: cannot read %s: %s\n", cmd, shown, strerror(e));
    }
    return e == 0;
}

/* Reads from fd until `want` bytes are in or the stream ends; returns the count, or -1 with
 * errno set. */
static ssize_t read_upto(int fd, unsigned char *p, size_t want) {
    size_t n = 0;
    while (n < want) {
        ssize_t r = read(fd, p + n, want - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { /* inherited O_NONBLOCK */
            struct pollfd pf = {fd, POLLIN, 0};
            if (poll(&pf, 1, -1) >= 0 || errno == EINTR) continue;
        }
        if (r < 0) return -1;
        if (r == 0) break;
        n += (size_t)r;
    }
    return (ssize_t)n;
}

/* The largest integer in the "data_offsets" arrays of a safetensors JSON header: where the
 * data section ends, if the header is valid.  Only a bound on how much to read: the parser
 * checks the header itself. */
static uint64_t st_data_extent(const unsigned char *h, size_t n) {
    uint64_t most = 0;
    int state = 0; /* 1: after the key "data_offsets"; 2: inside its array */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = h[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && h[j] != '"') j += h[j] == '\\' ? 2 : 1;
            state = j - i - 1 == 12 && j < n && !memcmp(h + i + 1, "data_offsets", 12);
            i = j;
        } else if (state == 1 && c == '[') {
            state = 2;
        } else if (state == 2 && c >= '0' && c <= '9') {
            uint64_t v = 0;
            for (; i < n && h[i] >= '0' && h[i] <= '9'; i++)
                v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(h[i] - '0');
            i--;
            if (v > most) most = v;
        } else if (state == 2 && c == ']') {
            state = 0;
        } else if (state == 1 && c != ':' && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            state = 0;
        }
    }
    return most;
}

int attn_cli_read_st_stdin(const char *cmd, int64_t max, const char *limit_name, char **data,
                           size_t *len) {
    *data = NULL;
    *len = 0;
    struct stat sb;
    if (fstat(0, &sb) == 0 && S_ISREG(sb.st_mode)) /* a file: sized before it is read */
        return attn_cli_read_all(cmd, "-", max, limit_name, data, len);
    uint64_t lim = max > 0 ? (uint64_t)max : 0, most = 100000000; /* the parser's header limit */
    /* the 8-byte header length, then the header, then as much data as the header describes:
     * an endless stream is read no further than what its first bytes claim */
    size_t cap = 65536, n = 0;
    unsigned char *p = malloc(cap + 1);
    if (!p) goto nomem;
    ssize_t r = read_upto(0, p, 8);
    if (r < 0) goto ioerr;
    n = (size_t)r;
    if (n == 8) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | p[i];
        if (hl <= most) { /* else the parser names the limit from these 8 bytes */
            uint64_t total = 8 + hl;
            if (total > lim) goto over;
            for (int pass = 0; pass < 2; pass++) {
                while ((uint64_t)n < total) {
                    if (n == cap) {
                        size_t nc = (uint64_t)cap * 2 < total ? cap * 2 : (size_t)total;
                        unsigned char *q = realloc(p, nc + 1);
                        if (!q) goto nomem;
                        p = q, cap = nc;
                    }
                    size_t want = (size_t)total - n < cap - n ? (size_t)total - n : cap - n;
                    r = read_upto(0, p + n, want);
                    if (r < 0) goto ioerr;
                    n += (size_t)r;
                    if ((size_t)r < want) break; /* the end: the parser says what is missing */
                }
                if (pass == 0) {
                    if ((uint64_t)n < total) break;
                    uint64_t ext = st_data_extent(p + 8, (size_t)hl);
                    if (ext > lim - total) goto over;
                    total += ext;
                }
            }
        }
    }
    p[n] = 0;
    *data = (char *)p;
    *len = n;
    return 1;
over:
    fprintf(stderr, "attn %s: standard input: the safetensors header describes more than the "
            "limit of %llu bytes (%s)\n", cmd, (unsigned long long)lim, limit_name);
    free(p);
    return 0;
ioerr:
    fprintf(stderr, "attn %s: cannot read standard input: %s\n", cmd, strerror(errno));
    free(p);
    return 0;
nomem:
    fprintf(stderr, "attn %s: out of memory reading standard input\n", cmd);
    free(p);
    return 0;
}

int attn_cli_text_bound(const char *cmd, attn_ctx *ctx, int64_t *max, const char **name) {
    *max = attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES);
    *name = "ATTN_LIMIT_TEXT_BYTES";
    const char *env = getenv("ATTN_MAX_TEXT_BYTES");
    long long v;
    if (!env || !*env) return 1;
    if (!attn_cli_parse_i64(env, 1, INT64_MAX, &v)) {
        fprintf(stderr, "attn %s: ATTN_MAX_TEXT_BYTES: expected a positive integer, got '%s'\n",
                cmd, env);
        return 0;
    }
    if (v < *max) *max = v, *name = "ATTN_MAX_TEXT_BYTES";
    return 1;
}

int attn_cli_read_text(const char *cmd, attn_ctx *ctx, const char *path, char **data,
                       size_t *len) {
    int64_t max;
    const char *name;
    *data = NULL;
    *len = 0;
    if (!attn_cli_text_bound(cmd, ctx, &max, &name)) return 0;
    return attn_cli_read_all(cmd, path, max, name, data, len);
}

int attn_cli_chat_template(const char *cmd, attn_ctx *ctx, attn_llm *m, const char *path) {
    char *t = NULL;
    size_t n = 0;
    const char *named = attn_chat_template_named(path);
    struct stat sb;
    if (named && stat(path, &sb) != 0) { /* a format's name, and no file of that name here */
        attn_status st = attn_llm_set_chat_template(ctx, m, named);
        if (st != ATTN_OK) attn_cli_fail(ctx, cmd, st);
        return st == ATTN_OK;
    }
    if (!attn_cli_read_text(cmd, ctx, path, &t, &n)) return 0;
    if (strlen(t) != n) {
        fprintf(stderr, "attn %s: %s: a NUL byte at byte %zu: not a chat template\n", cmd, path,
                strlen(t));
        free(t);
        return 0;
    }
    attn_status st = attn_llm_set_chat_template(ctx, m, t);
    if (st != ATTN_OK) {
        size_t k = strcspn(t, "\n");
        char first[84];
        snprintf(first, sizeof first, "%.*s%s", (int)(k > 80 ? 77 : k), t, k > 80 ? "..." : "");
        fprintf(stderr, "attn %s: %s: not a chat template attn formats (its first line: \"", cmd,
                path);
        attn_cli_put_escaped(stderr, first);
        fprintf(stderr, "\"): ");
        attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
        fprintf(stderr, " (%s)\n", attn_status_name(st));
    }
    free(t);
    return st == ATTN_OK;
}

static int stdout_errno; /* the errno of a failed write to stdout (attn_cli_write_stdout) */

size_t attn_cli_write_stdout(const void *p, size_t n) {
    errno = 0;
    size_t w = fwrite(p, 1, n, stdout);
    if (w != n && !stdout_errno) stdout_errno = errno ? errno : EIO;
    return w;
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if the bytes there are not one. */
static int utf8_len(const unsigned char *p) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000;
    else return 0;
    unsigned cp = c & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

size_t attn_cli_put_escaped(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t out = 0;
    while (*p) {
        int n = utf8_len(p);
        if (n == 0 || (n == 1 && (*p < 0x20 || *p == 0x7f))) {
            fprintf(f, "\\x%02x", *p);
            out += 4, p++;
        } else {
            fwrite(p, 1, (size_t)n, f);
            out += (size_t)n, p += n;
        }
    }
    return out;
}

int attn_cli_fail_tagged(attn_ctx *ctx, const char *tag, const char *cmd, attn_status st) {
    /* the line is built first and goes out in one write, so that the lines of processes
     * sharing a stderr (MPI ranks) do not interleave */
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    FILE *f = m ? m : stderr;
    fprintf(f, "%sattn %s: ", tag ? tag : "", cmd);
    attn_cli_put_escaped(f, attn_ctx_errmsg(ctx)); /* it may quote a file's bytes */
    fprintf(f, " (%s)\n", attn_status_name(st));
    if (m && fclose(m) == 0) fwrite(line, 1, len, stderr);
    free(line);
    return 1;
}

int attn_cli_fail(attn_ctx *ctx, const char *cmd, attn_status st) {
    return attn_cli_fail_tagged(ctx, NULL, cmd, st);
}

int attn_cli_close_stdout(const char *cmd, int rc) {
    int failed = ferror(stdout) != 0, e = 0;
    errno = 0;
    if (fflush(stdout) != 0) failed = 1, e = errno; /* retries what is pending: its errno */
    errno = 0;
    if (fclose(stdout) != 0) {
        if (!e) e = errno;
        failed = 1;
    }
    if (!failed) return rc;
    if (!e) e = stdout_errno; /* nothing was pending: the write that failed said why */
    fprintf(stderr, "attn%s%s: error writing to standard output: %s\n", cmd ? " " : "",
            cmd ? cmd : "", strerror(e ? e : EIO));
    return rc ? rc : 1;
}

void attn_cli_guard_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* open the wrong way round: the descriptor is taken, and using it still fails */
        int g = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
        if (g >= 0 && g != fd) {
            dup2(g, fd);
            close(g);
        }
    }
}
