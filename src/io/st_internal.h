/* Internal glue between the safetensors files of src/io. */
#ifndef ATTN_IO_ST_INTERNAL_H
#define ATTN_IO_ST_INTERNAL_H

#include "internal.h"

/* The context a writer was created with (its errors are recorded there). */
ATTN__HIDDEN attn_ctx *attn__st_writer_ctx(const attn_st_writer *w);

#endif
