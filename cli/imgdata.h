/* Image data for the CLI's ViT commands (cli/imgdata.c): IDX files (gzipped or raw, read with
 * zlib: the library itself stays dependency-free), single PGM/PNG grayscale images, seeded
 * shuffling, mini-batches and light augmentation.  Every function that can fail returns 0 on
 * success and 1 on failure with a message in err (never prints, never exits); sizes are
 * checked against what the file holds before anything is allocated. */
#ifndef ATTN_CLI_IMGDATA_H
#define ATTN_CLI_IMGDATA_H
#include <stddef.h>
#include <stdint.h>

/* A set of same-size 8-bit grayscale images with optional labels. */
typedef struct img_set {
    int64_t n, rows, cols; /* images, height, width */
    uint8_t *pixels;       /* [n, rows, cols], row-major, 0 = black */
    uint8_t *labels;       /* [n], or NULL when no label file was read */
    int num_classes;       /* 1 + the largest label in the whole label file, also when max_n
                              kept fewer images (0 without labels) */
} img_set;

/* Reads an IDX3 ubyte image file and (labels_path not NULL) its IDX1 ubyte label file; each is
 * gzipped or raw (told by its first bytes, not by its name).  max_n > 0 keeps only the first
 * max_n images.  Refused: a bad magic number or element type, dimensions of 0 or whose product
 * overflows, a file holding fewer bytes than its header claims (or trailing bytes), a label
 * file whose count differs from the image file's, labels >= max_label (0: no limit), a corrupt
 * gzip stream.  The message names the file and what is wrong. */
int img_idx_load(const char *images_path, const char *labels_path, int64_t max_n, int max_label,
                 img_set *out, char *err, size_t errlen);

/* Fashion-MNIST / MNIST folder: "train-images-idx3-ubyte" and "train-labels-idx1-ubyte" (train
 * = 1) or "t10k-..." (train = 0), each with or without ".gz" (the .gz is tried first). */
int img_mnist_load(const char *dir, int train, int64_t max_n, img_set *out, char *err,
                   size_t errlen);

void img_set_free(img_set *s); /* takes NULL and a zeroed set; leaves it zeroed */

/* One grayscale image from a PGM (P2 or P5, maxval <= 255 or 16-bit scaled down) or PNG file
 * (8-bit gray, gray+alpha, RGB, RGBA or palette; 16-bit scaled; non-interlaced; colour turned
 * to gray as 0.299 R + 0.587 G + 0.114 B, alpha composited on black); *pixels is malloc'ed
 * [rows, cols].  Refused: anything else, with a message. */
int img_read_gray(const char *path, int64_t *rows, int64_t *cols, uint8_t **pixels, char *err,
                  size_t errlen);

/* The order of epoch `epoch` of a run seeded with `seed`: perm[0..n) a permutation of 0..n-1
 * (Fisher-Yates driven by a counter-based generator: the same for any thread count and
 * reproducible from (seed, epoch) alone, so a resumed run sees the same order).  The exact
 * generator, as Python, is in cli/imgdata.c's opening comment (as are the batch's choices). */
void img_shuffle(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm);

/* Augmentation: a random crop of the image padded by `pad` zero pixels on every side (0: none)
 * and a horizontal flip with probability 1/2 (flip = 0: never). */
typedef struct img_aug {
    int pad;
    int flip;
} img_aug;

/* Fills out [B, 1, rows, cols] with images idx[0..B) of s (each in [0, s->n)), as
 * (pixel / 255 - mean) / std (padding pixels are 0 before that), and labels [B] (int64, -1
 * where s has no labels; NULL: not wanted).  aug may be NULL (none); the random choices of
 * image i of the batch depend only on (seed, stream, idx[i]) — pass the step or epoch as
 * stream — so a batch is the same for any thread count and on resume. */
void img_batch(const img_set *s, const int64_t *idx, int64_t B, const img_aug *aug,
               uint64_t seed, uint64_t stream, float mean, float std, float *out,
               int64_t *labels);

/* Fashion-MNIST's training-set pixel mean and standard deviation (of pixel / 255). */
#define IMG_FASHION_MEAN 0.2860f
#define IMG_FASHION_STD 0.3530f

/* Fashion-MNIST's class names, index = label. */
extern const char *const img_fashion_classes[10];

#endif
