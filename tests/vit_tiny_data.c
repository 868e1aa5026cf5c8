/* A tiny Fashion-MNIST look-alike for the tests of attn train vit / classify / attention-map
 * (tests/test_vit_cli.sh):
 *
 *   vit_tiny_data DIR [NTRAIN [NTEST]]
 *
 * writes DIR/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
 * t10k-labels-idx1-ubyte (raw IDX, 28x28, labels i % 10), test0.pgm (test image 0 as a P5 PGM)
 * and big.pgm (a 32x32 PGM, the wrong size).  Image i of class k is a bright bar whose place and
 * orientation depend on k, over a little noise from a fixed generator: the same files every
 * time, and a pattern a tiny model can start to learn in one epoch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SIDE 28

static uint32_t rng = 12345;
static unsigned next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 24;
}

static void image(int k, unsigned char *px) {
    for (int i = 0; i < SIDE * SIDE; i++) px[i] = (unsigned char)(next() & 31);
    int pos = 3 + 2 * (k % 5), vertical = k >= 5;
    for (int a = 4; a < 24; a++)
        for (int b = pos; b < pos + 5; b++) px[vertical ? a * SIDE + b : b * SIDE + a] = 230;
}

static void be32(FILE *f, uint32_t v) {
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

static FILE *open_w(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

static void set(const char *dir, const char *prefix, int n, unsigned char *first) {
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    FILE *fi = open_w(dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    FILE *fl = open_w(dir, name);
    be32(fi, 0x803), be32(fi, (uint32_t)n), be32(fi, SIDE), be32(fi, SIDE);
    be32(fl, 0x801), be32(fl, (uint32_t)n);
    unsigned char px[SIDE * SIDE];
    for (int i = 0; i < n; i++) {
        image(i % 10, px);
        if (i == 0 && first)
            for (int j = 0; j < SIDE * SIDE; j++) first[j] = px[j];
        fwrite(px, 1, sizeof px, fi);
        fputc(i % 10, fl);
    }
    if (fclose(fi) || fclose(fl)) {
        perror(dir);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: vit_tiny_data DIR [NTRAIN [NTEST]]\n");
        return 2;
    }
    int ntrain = argc > 2 ? atoi(argv[2]) : 320, ntest = argc > 3 ? atoi(argv[3]) : 100;
    unsigned char t0[SIDE * SIDE];
    set(argv[1], "train", ntrain, NULL);
    set(argv[1], "t10k", ntest, t0);
    FILE *f = open_w(argv[1], "test0.pgm");
    fprintf(f, "P5\n%d %d\n255\n", SIDE, SIDE);
    fwrite(t0, 1, sizeof t0, f);
    fclose(f);
    f = open_w(argv[1], "big.pgm");
    fprintf(f, "P5\n32 32\n255\n");
    for (int i = 0; i < 32 * 32; i++) fputc(i & 255, f);
    return fclose(f) != 0;
}
