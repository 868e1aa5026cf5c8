/* Files: reads refuse what is not a regular file and what is over a bound; writes are atomic
 * (a failed write leaves an existing file as it was) and never remove a device.  Issue 10. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "file.h"
#include "testutil.h"

static char dir[256];

static const char *in_dir(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        tu_fail(__FILE__, __LINE__, "cannot create %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

/* the whole file, or "" (static buffer) */
static const char *get(const char *path) {
    static char buf[8192];
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return "<missing>";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* number of entries in dir other than . and .. whose name starts with '.' (temporaries) */
static int leftovers(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '^\\.' ", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static void test_fail_message(attn_ctx *ctx) {
    /* a caller prefixing the context's own message (review F6): no garbling */
    attn__fail(ctx, ATTN_E_FORMAT, "inner detail %d", 42);
    attn__fail(ctx, ATTN_E_FORMAT, "outer: %s", attn_ctx_errmsg(ctx));
    TU_CHECK(!strcmp(attn_ctx_errmsg(ctx), "outer: inner detail 42"), "message '%s'",
             attn_ctx_errmsg(ctx));
    attn__fail(ctx, ATTN_E_FORMAT, "%s / %s", attn_ctx_errmsg(ctx), attn_ctx_errmsg(ctx));
    TU_CHECK(!strcmp(attn_ctx_errmsg(ctx), "outer: inner detail 42 / outer: inner detail 42"),
             "message '%s'", attn_ctx_errmsg(ctx));
}

static void test_reads(attn_ctx *ctx) {
    unsigned char *d = NULL;
    size_t n = 0;
    put(in_dir("a.txt"), "hello");
    TU_STATUS(attn__file_read(ctx, in_dir("a.txt"), "text", 0, &d, &n), ATTN_OK, ctx);
    TU_CHECK(d && n == 5 && !memcmp(d, "hello", 6), "read back");
    attn_buffer_free(ctx, d);
    TU_STATUS(attn__file_read(ctx, in_dir("nope"), "text", 0, &d, &n), ATTN_E_NOT_FOUND, ctx);
    TU_STATUS(attn__file_read(ctx, dir, "text", 0, &d, &n), ATTN_E_IO, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "not a regular file (a directory)"), "dir: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn__file_read(ctx, "/dev/zero", "text", 0, &d, &n), ATTN_E_IO, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "not a regular file"), "/dev/zero: %s",
             attn_ctx_errmsg(ctx));
    /* a FIFO with no writer: refused at once (the alarm ends a hang as a failure) */
    if (mkfifo(in_dir("fifo"), 0600) == 0) {
        alarm(20);
        TU_STATUS(attn__file_read(ctx, in_dir("fifo"), "text", 0, &d, &n), ATTN_E_IO, ctx);
        attn_st *st = NULL;
        TU_STATUS(attn_st_read_file(ctx, in_dir("fifo"), &st), ATTN_E_IO, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "FIFO"), "fifo: %s", attn_ctx_errmsg(ctx));
        alarm(0);
        unlink(in_dir("fifo"));
    }
    /* bounds: the caller's and the context's */
    TU_STATUS(attn__file_read(ctx, in_dir("a.txt"), "text", 4, &d, &n), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_FILE_BYTES, 4), ATTN_OK, ctx);
    TU_STATUS(attn__file_read(ctx, in_dir("a.txt"), "text", 0, &d, &n), ATTN_E_UNSUPPORTED, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "ATTN_LIMIT_FILE_BYTES"), "limit: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_FILE_BYTES, 5), ATTN_OK, ctx);
    TU_STATUS(attn__file_read(ctx, in_dir("a.txt"), "text", 0, &d, &n), ATTN_OK, ctx);
    attn_buffer_free(ctx, d);
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_FILE_BYTES, 0), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_ctx_set_limit(ctx, (attn_limit)99, 1), ATTN_E_INVALID, ctx);
    TU_CHECK(attn_ctx_limit(ctx, ATTN_LIMIT_FILE_BYTES) == 5, "limit kept");
    TU_CHECK(attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS) > 0, "default layers limit");
    attn_ctx_set_limit(ctx, ATTN_LIMIT_FILE_BYTES, (int64_t)1 << 40);
}

static void test_writes(attn_ctx *ctx) {
    attn__piece pc[2] = {{"new ", 4}, {"content", 7}};
    /* a new file, then a replaced one that keeps its permissions */
    TU_STATUS(attn__file_write(ctx, in_dir("out.st"), pc, 2), ATTN_OK, ctx);
    TU_CHECK(!strcmp(get(in_dir("out.st")), "new content"), "new file");
    put(in_dir("old.st"), "precious");
    chmod(in_dir("old.st"), 0640);
    TU_STATUS(attn__file_write(ctx, in_dir("old.st"), pc, 2), ATTN_OK, ctx);
    struct stat sb;
    TU_CHECK(stat(in_dir("old.st"), &sb) == 0 && (sb.st_mode & 0777) == 0640, "mode kept");
    TU_CHECK(!strcmp(get(in_dir("old.st")), "new content"), "replaced");
    TU_CHECK(leftovers() == 0, "temporary files left: %d", leftovers());

    /* a write that fails half-way (file size limit): the old file stays whole */
    put(in_dir("keep.st"), "precious");
    static char big[1 << 16];
    memset(big, 'x', sizeof big);
    attn__piece bp = {big, sizeof big};
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        TU_STATUS(attn__file_write(ctx, in_dir("keep.st"), &bp, 1), ATTN_E_IO, ctx);
        setrlimit(RLIMIT_FSIZE, &old);
        TU_CHECK(!strcmp(get(in_dir("keep.st")), "precious"), "old file damaged: '%.20s'",
                 get(in_dir("keep.st")));
        TU_CHECK(leftovers() == 0, "temporary files left after failure: %d", leftovers());
    }
    signal(SIGXFSZ, prev);

    /* a device: written in place, never removed (review F2: -o on a /dev/full node) */
    TU_STATUS(attn__file_write(ctx, "/dev/null", pc, 2), ATTN_OK, ctx);
    TU_CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode), "/dev/null intact");
    if (mknod(in_dir("full"), S_IFCHR | 0666, makedev(1, 7)) == 0) {
        TU_STATUS(attn__file_write(ctx, in_dir("full"), pc, 2), ATTN_E_IO, ctx);
        TU_CHECK(stat(in_dir("full"), &sb) == 0 && S_ISCHR(sb.st_mode), "device node removed");
        unlink(in_dir("full"));
    }
    /* a directory: refused, left alone */
    mkdir(in_dir("sub"), 0700);
    TU_STATUS(attn__file_write(ctx, in_dir("sub"), pc, 2), ATTN_E_IO, ctx);
    TU_CHECK(stat(in_dir("sub"), &sb) == 0 && S_ISDIR(sb.st_mode), "directory intact");
    rmdir(in_dir("sub"));
    /* a symbolic link: its target is replaced, the link stays */
    put(in_dir("target.st"), "old");
    if (symlink("target.st", in_dir("link.st")) == 0) {
        TU_STATUS(attn__file_write(ctx, in_dir("link.st"), pc, 2), ATTN_OK, ctx);
        TU_CHECK(lstat(in_dir("link.st"), &sb) == 0 && S_ISLNK(sb.st_mode), "link kept");
        TU_CHECK(!strcmp(get(in_dir("target.st")), "new content"), "target written");
    }
    /* missing directory: a clear error, nothing created */
    TU_STATUS(attn__file_write(ctx, in_dir("no/such/dir/x.st"), pc, 2), ATTN_E_IO, ctx);
    TU_STATUS(attn__file_write(ctx, "", pc, 2), ATTN_E_INVALID, ctx);
    TU_CHECK(leftovers() == 0, "temporary files left: %d", leftovers());

    /* the public writers go through it: a failed safetensors save keeps the old file */
    put(in_dir("model.st"), "precious");
    attn_st_writer *w = NULL;
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    float v[4] = {1, 2, 3, 4};
    attn_tensor t = attn_view1(v, 4);
    TU_STATUS(attn_st_writer_add_view(w, "v", &t), ATTN_OK, ctx);
    lim.rlim_cur = 8;
    prev = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        TU_STATUS(attn_st_writer_save(w, in_dir("model.st")), ATTN_E_IO, ctx);
        setrlimit(RLIMIT_FSIZE, &old);
        TU_CHECK(!strcmp(get(in_dir("model.st")), "precious"), "safetensors save damaged it");
    }
    signal(SIGXFSZ, prev);
    TU_STATUS(attn_st_writer_save(w, in_dir("model.st")), ATTN_OK, ctx);
    attn_st *st = NULL;
    TU_STATUS(attn_st_read_file(ctx, in_dir("model.st"), &st), ATTN_OK, ctx);
    TU_CHECK(st && attn_st_count(st) == 1, "saved file reads back");
    attn_st_free(st);
    attn_st_writer_free(w);
}

/* The streaming writer (attn_file_out_*): many small and large writes give exactly the bytes;
 * abort leaves the target and no temporary; a failed write makes the commit fail; a FIFO
 * without a reader and a dangling link are refused at open; NULL handling; stale temporary
 * files of a dead process are removed, a live one's kept, other names never touched. */
static void test_stream(attn_ctx *ctx) {
    attn_file_out *f = NULL;
    static unsigned char want[300000];
    for (size_t i = 0; i < sizeof want; i++) want[i] = (unsigned char)(i * 7 + (i >> 9));
    TU_STATUS(attn_file_out_open(ctx, in_dir("s.bin"), &f), ATTN_OK, ctx);
    size_t at = 0, step = 1;
    while (f && at < sizeof want) { /* 1, 2, 4, ... byte pieces past the buffer's size */
        size_t n = sizeof want - at < step ? sizeof want - at : step;
        TU_STATUS(attn_file_out_write(f, want + at, n), ATTN_OK, ctx);
        at += n, step *= 2;
    }
    TU_STATUS(attn_file_out_commit(f), ATTN_OK, ctx);
    FILE *r = fopen(in_dir("s.bin"), "rb");
    static unsigned char got[sizeof want + 1];
    size_t n = r ? fread(got, 1, sizeof got, r) : 0;
    if (r) fclose(r);
    TU_CHECK(n == sizeof want && !memcmp(got, want, n), "streamed bytes differ (%zu read)", n);
    /* abort: the target as it was, nothing left */
    put(in_dir("a.st"), "precious");
    TU_STATUS(attn_file_out_open(ctx, in_dir("a.st"), &f), ATTN_OK, ctx);
    TU_STATUS(attn_file_out_write(f, "junk", 4), ATTN_OK, ctx);
    attn_file_out_abort(f);
    TU_CHECK(!strcmp(get(in_dir("a.st")), "precious"), "abort changed the target");
    TU_CHECK(leftovers() == 0, "abort left %d temporary files", leftovers());
    attn_file_out_abort(NULL);
    TU_STATUS(attn_file_out_commit(NULL), ATTN_E_INVALID, NULL);
    TU_STATUS(attn_file_out_write(NULL, "x", 1), ATTN_E_INVALID, NULL);
    TU_STATUS(attn_file_out_open(ctx, in_dir("x"), NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_file_out_open(NULL, in_dir("x"), &f), ATTN_E_INVALID, NULL);
    /* a failed write (device full) fails the commit */
    if (mknod(in_dir("full2"), S_IFCHR | 0666, makedev(1, 7)) == 0) {
        TU_STATUS(attn_file_out_open(ctx, in_dir("full2"), &f), ATTN_OK, ctx);
        static char big[1 << 17];
        attn_status ws = attn_file_out_write(f, big, sizeof big);
        TU_CHECK(ws == ATTN_E_IO, "a write to a full device: %s", attn_status_name(ws));
        TU_STATUS(attn_file_out_commit(f), ATTN_E_IO, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "No space left") != NULL, "message: %s",
                 attn_ctx_errmsg(ctx));
        unlink(in_dir("full2"));
    }
    /* a FIFO without a reader: refused at once; a dangling link: refused, nothing created */
    if (mkfifo(in_dir("fifo"), 0600) == 0) {
        TU_STATUS(attn_file_out_open(ctx, in_dir("fifo"), &f), ATTN_E_IO, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "no reader") != NULL, "message: %s",
                 attn_ctx_errmsg(ctx));
        unlink(in_dir("fifo"));
    }
    if (symlink("missing.st", in_dir("dangling")) == 0) {
        TU_STATUS(attn_file_write(ctx, in_dir("dangling"), "x", 1), ATTN_E_IO, ctx);
        TU_CHECK(access(in_dir("missing.st"), F_OK) != 0, "the dangling link's file was made");
        unlink(in_dir("dangling"));
    }
    /* stale temporary files */
    char dead[128], live[128], other[128], odd[128];
    snprintf(dead, sizeof dead, ".t.st.tmp-2147483646-0123456789abcdef");
    snprintf(live, sizeof live, ".t.st.tmp-%ld-0123456789abcdef", (long)getpid());
    snprintf(other, sizeof other, ".u.st.tmp-2147483646-0123456789abcdef");
    snprintf(odd, sizeof odd, ".t.st.tmp-2147483646-0123");
    put(in_dir(dead), "x"), put(in_dir(live), "x"), put(in_dir(other), "x"), put(in_dir(odd), "x");
    TU_STATUS(attn_file_write(ctx, in_dir("t.st"), "new", 3), ATTN_OK, ctx);
    TU_CHECK(access(in_dir(dead), F_OK) != 0, "a dead process's temporary file was left");
    TU_CHECK(access(in_dir(live), F_OK) == 0, "a live process's temporary file was removed");
    TU_CHECK(access(in_dir(other), F_OK) == 0, "another target's temporary file was removed");
    TU_CHECK(access(in_dir(odd), F_OK) == 0, "a name not of our form was removed");
    unlink(in_dir(live)), unlink(in_dir(other)), unlink(in_dir(odd));
    TU_CHECK(leftovers() == 0, "temporary files left: %d", leftovers());
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/attn_test_files.XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    attn_ctx *ctx = tu_ctx(1);
    test_fail_message(ctx);
    test_reads(ctx);
    test_writes(ctx);
    test_stream(ctx);
    attn_ctx_free(ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_files");
}
