/* libFuzzer target: the JSON acceptor of response_format and strict calls, and its schemas
 * (src/serve/serve_jsa.c).
 *
 * An input is a JSON schema, FZ_SEP, then an answer's bytes (the first input byte's low bit: the
 * schema is strict).  The schema, where it parses, is compiled; the answer is fed to the
 * acceptor (with the schema where it compiled, and without) once whole and once in pieces of
 * 1..7 bytes, each piece tried on a cheap copy first (attn__jsa_copy, as the server tries a
 * token), and up to its end (attn__jsa_feed_upto, as a call's arguments).
 *
 * Promises checked: no sanitizer report, leak or hang; the whole and the pieces reach the same
 * verdict and the same done; a piece taken on the copy is taken on the state; an answer the
 * acceptor takes whole and done is a JSON object to sj_parse; feeding up to the end stops where
 * the object closes. */
#include "fuzz_util.h"
#include "serve_jsa.h"
#include "serve_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run(const attn__jss *sc, const char *a, size_t n) {
    attn__jsa w, p, c;
    attn__jsa_init(&w, sc);
    const int whole = attn__jsa_feed(&w, a, n);
    attn__jsa_init(&p, sc);
    int pieces = 1;
    for (size_t i = 0, k = 0; i < n && pieces; k++) {
        size_t m = 1 + (k * 5 + (unsigned char)a[i]) % 7;
        if (m > n - i) m = n - i;
        attn__jsa_copy(&c, &p);
        const int on_copy = attn__jsa_feed(&c, a + i, m);
        pieces = attn__jsa_feed(&p, a + i, m);
        FZ_CHECK(on_copy == pieces);
        i += m;
    }
    FZ_CHECK(whole == pieces);
    FZ_CHECK(!whole || attn__jsa_done(&w) == attn__jsa_done(&p));
    if (whole && attn__jsa_done(&w)) {
        sj_doc d = {0};
        char err[128];
        FZ_CHECK(sj_parse(&d, a, n, err, sizeof err) && d.root->kind == SJ_OBJ);
        sj_free(&d);
    }
    attn__jsa u;
    size_t used = 0;
    attn__jsa_init(&u, sc);
    if (attn__jsa_feed_upto(&u, a, n, &used)) {
        FZ_CHECK(used <= n);
        FZ_CHECK(used == n || attn__jsa_done(&u));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 16)) return 0;
    fz_seg seg[2];
    const int ns = fz_split(data, size, seg, 2);
    const char *ans = ns > 1 ? (const char *)seg[1].p : "";
    const size_t an = ns > 1 ? seg[1].n : 0;
    sj_doc d = {0};
    char err[256];
    attn__jss *sc = NULL;
    if (sj_parse(&d, (const char *)seg[0].p, seg[0].n, err, sizeof err)) {
        const int ok = attn__jss_compile(d.root, size > 0 && (data[0] & 1), &sc, err, sizeof err);
        FZ_CHECK(ok == (sc != NULL));
        FZ_CHECK(ok || err[0]);
    }
    sj_free(&d); /* the compiled schema keeps nothing of the document */
    run(sc, ans, an);
    run(NULL, ans, an);
    attn__jss_free(sc);
    return 0;
}
