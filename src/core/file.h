/* Files: bounded reads of regular files and atomic writes (src/core/file.c).  Internal.
 *
 * Every file the library reads goes through attn__file_read: the file is opened without
 * blocking (a FIFO with no writer cannot hang the open), refused by type unless it is a
 * regular file, sized with fstat and refused past a bound before anything is allocated
 * (attn__file_map does the same and maps the file instead of reading it).
 * Every file it writes goes through attn_file_out_* (attn.h, "Output files"; attn__file_write
 * for pieces in memory): the bytes go to a temporary file beside the target, which replaces
 * the target by rename() only once everything is written and synced, so a failed write leaves
 * an existing file as it was. */
#ifndef ATTN_FILE_H
#define ATTN_FILE_H

#include "internal.h"

/* Reads the whole regular file at path into memory from ctx, with a 0 byte after the data
 * (not counted in *len), so text parsers may rely on it.  `what` names the file in messages
 * ("config.json").  max bounds the size in bytes (0 = only the context's
 * ATTN_LIMIT_FILE_BYTES); both bounds apply.  A missing file is ATTN_E_NOT_FOUND, a directory,
 * FIFO, socket or device ATTN_E_IO ("not a regular file"), a file over the bound
 * ATTN_E_UNSUPPORTED naming the limit. */
ATTN__HIDDEN attn_status attn__file_read(attn_ctx *ctx, const char *path, const char *what,
                                         uint64_t max, unsigned char **data /* OUT */,
                                         size_t *len /* OUT */);
/* A model folder's text file (config.json, vocab.txt, tokenizer_config.json, ...):
 * attn__file_read bounded by ATTN_LIMIT_TEXT_BYTES.  optional: a missing file is ATTN_OK with
 * *data NULL and *len 0, no error left set. */
ATTN__HIDDEN attn_status attn__text_file_read(attn_ctx *ctx, const char *path, const char *what,
                                              int optional, unsigned char **data /* OUT */,
                                              size_t *len /* OUT */);

/* dir/name read as attn__text_file_read reads it (name names it in messages).  why NULL: the
 * file is optional (missing: ATTN_OK, *data NULL); else a missing file is ATTN_E_NOT_FOUND
 * with "DIR: missing NAME (WHY)".  A path over 4095 bytes is ATTN_E_INVALID. */
ATTN__HIDDEN attn_status attn__folder_text_read(attn_ctx *ctx, const char *dir, const char *name,
                                                const char *why, unsigned char **data /* OUT */,
                                                size_t *len /* OUT */);

/* A file's bytes for reading in place: mapped read-only (mmap, MAP_PRIVATE) where the system
 * has memory-mapped files, else read into memory from ctx.  Either way the bytes are only read
 * and nothing is copied twice; pages of a mapping are loaded as they are touched. */
typedef struct attn__fmap {
    const unsigned char *data; /* NULL for an empty file */
    size_t len;
    int mapped;                /* 1: a mapping (munmap), 0: memory from ctx (attn__free) */
} attn__fmap;

/* Maps the regular file at path: the same checks, bounds and messages as attn__file_read
 * (a missing file ATTN_E_NOT_FOUND, anything but a regular file ATTN_E_IO, a file over max or
 * ATTN_LIMIT_FILE_BYTES ATTN_E_UNSUPPORTED), then mmap; where mmap is missing or fails for
 * this file the bytes are read instead (no 0 byte is added after them).  A mapping shows the
 * file as it is: if another process truncates the file while it is mapped, touching the lost
 * pages raises SIGBUS (as for every memory-mapped reader).  Release with attn__file_unmap. */
ATTN__HIDDEN attn_status attn__file_map(attn_ctx *ctx, const char *path, const char *what,
                                        uint64_t max, attn__fmap *m /* OUT */);
/* attn__file_map that always reads the bytes into memory (no mapping: a file truncated later
 * cannot raise SIGBUS; costs its size in memory and the time to read it). */
ATTN__HIDDEN attn_status attn__file_map_read(attn_ctx *ctx, const char *path, const char *what,
                                             uint64_t max, attn__fmap *m /* OUT */);
/* Releases what attn__file_map gave (a zeroed attn__fmap is fine); m is zeroed. */
ATTN__HIDDEN void attn__file_unmap(attn_ctx *ctx, attn__fmap *m);

/* All of p[0, n) to the open file fd (a log opened to append), retrying interrupted writes;
 * ATTN_E_IO naming path otherwise. */
ATTN__HIDDEN attn_status attn__fd_write(attn_ctx *ctx, int fd, const char *path, const void *p,
                                        size_t n);

/* One piece of an output file. */
typedef struct attn__piece {
    const void *data;
    size_t n;
} attn__piece;

/* Writes the pieces, in order, as the file at path: attn_file_out_open, _write, _commit (the
 * contract in attn.h, "Output files"). */
ATTN__HIDDEN attn_status attn__file_write(attn_ctx *ctx, const char *path,
                                          const attn__piece *pieces, size_t npieces);

#endif
