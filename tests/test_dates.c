/* Date phrases for `attn train dates`: the calendar (weekdays against Zeller's congruence),
 * ISO strings, every format of every date in the range read back by a small reference parser
 * written here, the train/test split, determinism, the vocabulary and batches. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/dates.h"
#include "testutil.h"

static attn_ctx *ctx;

/* Zeller's congruence, independent of the library: 0 = Monday ... 6 = Sunday. */
static int zeller(int y, int m, int d) {
    if (m < 3) m += 12, y -= 1;
    int K = y % 100, J = y / 100;
    int h = (d + 13 * (m + 1) / 5 + K + K / 4 + J / 4 + 5 * J) % 7; /* 0 = Saturday */
    return (h + 5) % 7;
}

static void test_calendar(void) {
    TU_CHECK(attn__dates_weekday(2026, 11, 21) == 5, "2026-11-21 is a Saturday");
    TU_CHECK(attn__dates_weekday(1999, 5, 3) == 0, "1999-05-03 is a Monday");
    TU_CHECK(attn__dates_weekday(1970, 1, 1) == 3, "1970-01-01 is a Thursday");
    TU_CHECK(attn__dates_weekday(2000, 1, 1) == 5, "2000-01-01 is a Saturday");
    TU_CHECK(attn__dates_weekday(1900, 1, 1) == 0, "1900-01-01 is a Monday");
    TU_CHECK(attn__dates_weekday(2099, 12, 31) == 3, "2099-12-31 is a Thursday");
    TU_CHECK(attn__dates_valid(2000, 2, 29), "2000-02-29 exists");
    TU_CHECK(!attn__dates_valid(1900, 2, 29), "1900-02-29 does not exist");
    TU_CHECK(!attn__dates_valid(2100, 2, 29) && attn__dates_valid(2024, 2, 29) &&
                 !attn__dates_valid(2023, 2, 29),
             "leap years");
    TU_CHECK(!attn__dates_valid(2026, 4, 31) && attn__dates_valid(2026, 12, 31) &&
                 !attn__dates_valid(2026, 13, 1) && !attn__dates_valid(2026, 0, 1) &&
                 !attn__dates_valid(2026, 1, 0),
             "month lengths");
    TU_CHECK(attn__dates_to_days(1970, 1, 1) == 0 && attn__dates_to_days(2000, 3, 1) == 11017,
             "day numbers");
    /* every day of the range: consecutive numbers, round trip, weekday */
    int64_t t = attn__dates_to_days(1900, 1, 1), bad = 0;
    for (int y = 1900; y <= 2099; y++)
        for (int m = 1; m <= 12; m++)
            for (int d = 1; d <= attn__dates_days_in_month(y, m); d++, t++) {
                int yy, mm, dd;
                attn__dates_from_days(t, &yy, &mm, &dd);
                bad += attn__dates_to_days(y, m, d) != t || yy != y || mm != m || dd != d ||
                       attn__dates_weekday(y, m, d) != zeller(y, m, d);
            }
    TU_CHECK(bad == 0, "%lld days wrong", (long long)bad);
    TU_CHECK(t - attn__dates_to_days(1900, 1, 1) == 73049, "73049 days in 1900..2099");
    TU_CHECK(strcmp(attn__dates_month_name(9), "september") == 0 &&
                 strcmp(attn__dates_weekday_name(6), "sunday") == 0 &&
                 !attn__dates_month_name(13) && !attn__dates_weekday_name(7),
             "names");
}

static void test_iso(void) {
    int y, m, d;
    TU_CHECK(attn__dates_parse_iso("2026-11-21", &y, &m, &d) && y == 2026 && m == 11 && d == 21,
             "parse 2026-11-21");
    TU_CHECK(attn__dates_is_iso("2000-02-29") && !attn__dates_is_iso("1900-02-29"), "leap");
    const char *bad[] = {"2026-11-31", "2026-1-21", "2026-11-21 ", "2026/11/21", "", "20261121",
                         "2026-11-2",  "0000-01-01", "2026-00-10", "2026-11-00", "x026-11-21",
                         " 2026-11-21"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        TU_CHECK(!attn__dates_is_iso(bad[i]), "\"%s\" accepted", bad[i]);
    TU_CHECK(!attn__dates_is_iso(NULL), "NULL accepted");
    char buf[11];
    attn__dates_iso(1999, 5, 3, buf);
    TU_CHECK(strcmp(buf, "1999-05-03") == 0, "iso text %s", buf);
}

/* ---- reference parser ------------------------------------------------------------------ */
static const char *months[12] = {"january", "february", "march",     "april",   "may",      "june",
                                 "july",    "august",   "september", "october", "november", "december"};
static const char *wdays[7] = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"};

static int find_name(const char *w, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(w, names[i]) == 0 || (strlen(w) == 3 && strncmp(w, names[i], 3) == 0))
            return i;
    return -1;
}

/* Reads any phrase the generator makes; returns 1 with the date, 0 if it cannot.  Checks
 * the weekday, ordinal suffixes and word case on the way. */
static int ref_parse(const char *s, int *Y, int *M, int *D) {
    struct {
        int val, ndig, apos, ordinal;
    } num[4];
    int nn = 0, month = -1, wday = -1, nwords = 0;
    char seps[8];
    int nseps = 0;
    size_t i = 0, n = strlen(s);
    while (i < n) {
        char c = s[i];
        if (c == ' ' || c == ',') {
            i++;
            continue;
        }
        if (c == '/' || c == '.' || c == '-') {
            if (nseps < 8) seps[nseps++] = c;
            i++;
            continue;
        }
        int apos = 0;
        if (c == '\'') {
            apos = 1;
            if (++i >= n || !isdigit((unsigned char)s[i])) return 0;
        }
        if (isdigit((unsigned char)s[i])) {
            if (nn == 4) return 0;
            int v = 0, nd = 0;
            while (i < n && isdigit((unsigned char)s[i])) {
                if (nd < 9) v = v * 10 + (s[i] - '0');
                nd++, i++;
            }
            char suf[8] = {0};
            int ns = 0;
            while (i < n && isalpha((unsigned char)s[i]) && ns < 7)
                suf[ns++] = (char)tolower((unsigned char)s[i++]);
            if (ns && isalpha((unsigned char)s[i])) return 0;
            int ord = 0;
            if (ns) {
                const char *want = (v % 100 >= 11 && v % 100 <= 13) ? "th"
                                   : v % 10 == 1 ? "st" : v % 10 == 2 ? "nd" : v % 10 == 3 ? "rd" : "th";
                if (strcmp(suf, want) != 0) return 0;
                ord = 1;
            }
            num[nn].val = v, num[nn].ndig = nd, num[nn].apos = apos, num[nn].ordinal = ord;
            nn++;
            continue;
        }
        if (!isalpha((unsigned char)c)) return 0;
        char w[16] = {0}, raw[16] = {0};
        int k = 0;
        while (i < n && isalpha((unsigned char)s[i])) {
            if (k >= 15) return 0;
            raw[k] = s[i];
            w[k] = (char)tolower((unsigned char)s[i]);
            k++, i++;
        }
        /* case: all lower, all upper, or capitalised */
        int up = 0;
        for (int j = 0; j < k; j++) up += isupper((unsigned char)raw[j]) != 0;
        if (!(up == 0 || up == k || (up == 1 && isupper((unsigned char)raw[0])))) return 0;
        nwords++;
        int mi = find_name(w, months, 12), wi = find_name(w, wdays, 7);
        if (strcmp(w, "the") == 0 || strcmp(w, "of") == 0) continue;
        if (mi >= 0 && month < 0) month = mi + 1;
        else if (wi >= 0 && wday < 0) wday = wi;
        else return 0;
    }
    int y = -1, m = -1, d = -1;
    if (month > 0) {
        if (nn != 2) return 0;
        m = month;
        for (int k = 0; k < 2; k++) {
            if (num[k].ndig == 4 && !num[k].ordinal && !num[k].apos) y = num[k].val;
            else if (num[k].apos && num[k].ndig == 2) y = num[k].val >= 50 ? 1900 + num[k].val : 2000 + num[k].val;
            else if (num[k].ndig <= 2 && !num[k].apos) d = num[k].val;
        }
    } else if (nn == 1 && num[0].ndig == 8 && nseps == 0) {
        y = num[0].val / 10000, m = num[0].val / 100 % 100, d = num[0].val % 100;
    } else if (nn == 3 && nseps == 2 && seps[0] == seps[1]) {
        for (int k = 0; k < 3; k++)
            if (num[k].ordinal || num[k].apos) return 0;
        char sp = seps[0];
        if (num[0].ndig == 4) { /* YYYY/MM/DD or YYYY-MM-DD */
            if (sp == '.' || num[1].ndig != 2 || num[2].ndig != 2) return 0;
            y = num[0].val, m = num[1].val, d = num[2].val;
        } else {
            int yv = num[2].val;
            if (num[2].ndig == 2) yv = yv >= 50 ? 1900 + yv : 2000 + yv;
            else if (num[2].ndig != 4) return 0;
            if (sp == '/') m = num[0].val, d = num[1].val, y = yv;      /* US */
            else if (sp == '.') d = num[0].val, m = num[1].val, y = yv; /* day first */
            else return 0;
        }
    } else {
        return 0;
    }
    if (y < 0 || m < 0 || d < 0 || !attn__dates_valid(y, m, d)) return 0;
    if (wday >= 0 && wday != zeller(y, m, d)) return 0;
    (void)nwords;
    *Y = y, *M = m, *D = d;
    return 1;
}

static uint64_t hash3(int a, int b, int c) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull ^ (uint64_t)b * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)c * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return h * 0xBF58476D1CE4E5B9ull;
}

static void test_formats(void) {
    /* the reference parser is strict where it matters */
    int ry, rm, rd;
    TU_CHECK(ref_parse("the 3rd of May 1999", &ry, &rm, &rd) && ry == 1999 && rm == 5 && rd == 3,
             "reference parser");
    TU_CHECK(ref_parse("11/21/26", &ry, &rm, &rd) && ry == 2026 && rm == 11 && rd == 21 &&
                 ref_parse("21.11.26", &ry, &rm, &rd) && ry == 2026 &&
                 ref_parse("3 may '99", &ry, &rm, &rd) && ry == 1999,
             "reference parser, two-digit years");
    const char *wrong[] = {"Sunday, November 21, 2026", "the 3th of may 1999", "21/11/2026",
                           "2026.11.21", "mAy 3 1999", "31 Feb 2000", "may 3 1999 4",
                           "blursday 3 may 1999"};
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++)
        TU_CHECK(!ref_parse(wrong[i], &ry, &rm, &rd), "reference parser read \"%s\"", wrong[i]);

    /* the examples of the documentation */
    static const struct {
        int f;
        unsigned style;
        const char *text;
    } ex[] = {{0, 1, "21 Nov 2026"},
              {1, 1, "21 November 2026"},
              {2, 1, "November 21, 2026"},
              {3, 0, "nov 21 2026"},
              {4, 0, "saturday, november 21, 2026"},
              {5, 0, "sat 21 nov 2026"},
              {6, 0, "11/21/26"},
              {7, 0, "21.11.2026"},
              {8, 0, "2026/11/21"},
              {12, 0, "21-nov-2026"},
              {13, 0, "11/21/2026"},
              {14, 0, "2026-11-21"},
              {15, 0, "20261121"},
              {16, 2, "SATURDAY 21 NOVEMBER 2026"},
              {17, 1, "Nov. 21, 2026"},
              {18, 1, "21 Nov '26"},
              {19, 1, "Sat, Nov 21st, 2026"},
              {20, 1, "Saturday the 21st of November 2026"},
              {21, 0, "21.11.26"}};
    char buf[64];
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        attn__dates_render(2026, 11, 21, ex[i].f, ex[i].style, buf, sizeof buf);
        TU_CHECK(strcmp(buf, ex[i].text) == 0, "format %d: \"%s\" != \"%s\"", ex[i].f, buf,
                 ex[i].text);
    }
    static const struct {
        int f;
        unsigned style;
        const char *text;
    } ex2[] = {{9, 0, "the 3rd of may 1999"},
               {9, 1, "The 3rd of May 1999"},
               {10, 1, "May 3rd, 1999"},
               {11, 0, "3rd may 1999"},
               {11, 2, "3RD MAY 1999"},
               {17, 1, "May 3, 1999"},
               {6, 4, "05/03/99"},
               {0, 1 | ATTN__DSTYLE_DOUBLE | (1u << 4) | ATTN__DSTYLE_LEADING, " 3 May  1999"},
               {14, ATTN__DSTYLE_TRAILING, "1999-05-03 "}};
    for (size_t i = 0; i < sizeof ex2 / sizeof *ex2; i++) {
        attn__dates_render(1999, 5, 3, ex2[i].f, ex2[i].style, buf, sizeof buf);
        TU_CHECK(strcmp(buf, ex2[i].text) == 0, "format %d: \"%s\" != \"%s\"", ex2[i].f, buf,
                 ex2[i].text);
    }
    TU_CHECK(attn__dates_render(1949, 1, 1, 6, 0, buf, sizeof buf) < 0 &&
                 attn__dates_render(2050, 1, 1, 18, 0, buf, sizeof buf) < 0 &&
                 attn__dates_render(2049, 12, 31, 21, 0, buf, sizeof buf) > 0,
             "two-digit years only for 1950..2049");
    TU_CHECK(attn__dates_render(2026, 2, 30, 0, 0, buf, sizeof buf) < 0 &&
                 attn__dates_render(2026, 2, 3, 22, 0, buf, sizeof buf) < 0 &&
                 attn__dates_render(2026, 2, 3, 1, 0, buf, 5) < 0,
             "bad date, format or buffer refused");
    TU_CHECK(ATTN__DATES_NFORMATS >= 15, "at least 15 formats");
    for (int f = 0; f < ATTN__DATES_NFORMATS; f++)
        TU_CHECK(attn__dates_format_name(f) != NULL, "format %d unnamed", f);

    /* every date x every format, in a style drawn from the date: the reference parser reads
     * it back, its characters are in the vocabulary, and it fits; the longest style (doubled
     * space, leading and trailing spaces) fits too */
    long fails = 0, unk = 0, toolong = 0, checked = 0;
    int maxlen = 0;
    for (int y = 1900; y <= 2099; y++)
        for (int m = 1; m <= 12; m++)
            for (int d = 1; d <= attn__dates_days_in_month(y, m); d++)
                for (int f = 0; f < ATTN__DATES_NFORMATS; f++) {
                    if (!attn__dates_format_allowed(f, y)) continue;
                    unsigned style = (unsigned)(hash3(y * 100 + m, d, f) >> 40) & 0x3FFu;
                    if ((style & 3u) == 3u) style &= ~3u;
                    for (int pass = 0; pass < 2; pass++) {
                        unsigned st = pass ? style | ATTN__DSTYLE_DOUBLE | ATTN__DSTYLE_LEADING |
                                                 ATTN__DSTYLE_TRAILING
                                           : style;
                        int len = attn__dates_render(y, m, d, f, st, buf, sizeof buf);
                        checked++;
                        if (len < 0 || len > ATTN__DATES_MAX_SRC) {
                            toolong++;
                            continue;
                        }
                        if (len > maxlen) maxlen = len;
                        for (int k = 0; k < len; k++)
                            unk += attn__dates_char_id((unsigned char)buf[k], 0) == ATTN__DATES_UNK;
                        int py, pm, pd;
                        if (!ref_parse(buf, &py, &pm, &pd) || py != y || pm != m || pd != d) {
                            if (fails < 5)
                                tu_fail(__FILE__, __LINE__, "format %d style %#x: \"%s\" is not %04d-%02d-%02d",
                                        f, st, buf, y, m, d);
                            fails++;
                        }
                    }
                }
    TU_CHECK(fails == 0 && unk == 0 && toolong == 0,
             "%ld of %ld phrases misread, %ld unknown characters, %ld too long", fails, checked,
             unk, toolong);
    TU_CHECK(maxlen <= ATTN__DATES_MAX_SRC && maxlen >= 30, "longest phrase %d", maxlen);
}

static void test_split_and_examples(void) {
    int ntest = attn__dates_test_count();
    TU_CHECK(ntest > 73049 / 20 - 300 && ntest < 73049 / 20 + 300, "%d test dates", ntest);
    /* 1,000 distinct held-out dates, deterministic */
    attn__date_pair *ho = malloc(1000 * sizeof *ho), *ho2 = malloc(1000 * sizeof *ho2);
    TU_STATUS(attn__dates_heldout(ctx, 1234, 1000, ho), ATTN_OK, ctx);
    TU_STATUS(attn__dates_heldout(ctx, 1234, 1000, ho2), ATTN_OK, ctx);
    TU_CHECK(memcmp(ho, ho2, 1000 * sizeof *ho) == 0, "held-out set not deterministic");
    unsigned char *is_ho = calloc(73049, 1);
    int64_t lo = attn__dates_to_days(1900, 1, 1);
    int dup = 0, nottest = 0, badpair = 0;
    for (int i = 0; i < 1000; i++) {
        int64_t k = attn__dates_to_days(ho[i].year, ho[i].month, ho[i].day) - lo;
        dup += is_ho[k];
        is_ho[k] = 1;
        nottest += !attn__dates_is_test(ho[i].year, ho[i].month, ho[i].day);
        int y, m, d;
        badpair += !ref_parse(ho[i].src, &y, &m, &d) || y != ho[i].year || m != ho[i].month ||
                   d != ho[i].day || !attn__dates_parse_iso(ho[i].tgt, &y, &m, &d) ||
                   y != ho[i].year;
    }
    TU_CHECK(dup == 0 && nottest == 0 && badpair == 0, "held-out: %d repeated, %d not test, %d bad",
             dup, nottest, badpair);
    TU_STATUS(attn__dates_heldout(ctx, 1, ntest + 1, ho), ATTN_E_INVALID, ctx);

    /* 100k training examples: never a test date, all readable, every format and case seen */
    long leak = 0, bad = 0, out_of_range = 0;
    int fmt_seen[ATTN__DATES_NFORMATS] = {0}, case_seen[3] = {0}, extra_space = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        attn__date_pair p;
        attn__dates_example(99, ATTN__DATES_TRAIN, i, &p);
        leak += attn__dates_is_test(p.year, p.month, p.day);
        int64_t k = attn__dates_to_days(p.year, p.month, p.day) - lo;
        if (k < 0 || k >= 73049) {
            out_of_range++;
            continue;
        }
        leak += is_ho[k];
        int y, m, d;
        char iso[11];
        attn__dates_iso(p.year, p.month, p.day, iso);
        bad += !ref_parse(p.src, &y, &m, &d) || y != p.year || m != p.month || d != p.day ||
               strcmp(iso, p.tgt) != 0 || (int)strlen(p.src) > ATTN__DATES_MAX_SRC;
        fmt_seen[p.format]++;
        case_seen[p.style & 3u]++;
        extra_space += strstr(p.src, "  ") != NULL || p.src[0] == ' ';
    }
    TU_CHECK(leak == 0, "%ld held-out dates in training", leak);
    TU_CHECK(bad == 0 && out_of_range == 0, "%ld bad training pairs, %ld out of range", bad,
             out_of_range);
    for (int f = 0; f < ATTN__DATES_NFORMATS; f++)
        TU_CHECK(fmt_seen[f] > 2000, "format %d seen %d times", f, fmt_seen[f]);
    TU_CHECK(case_seen[0] > 20000 && case_seen[1] > 30000 && case_seen[2] > 8000,
             "case styles %d %d %d", case_seen[0], case_seen[1], case_seen[2]);
    TU_CHECK(extra_space > 5000, "extra spaces %d", extra_space);
    /* test examples are test dates */
    long nt = 0;
    for (uint64_t i = 0; i < 5000; i++) {
        attn__date_pair p;
        attn__dates_example(99, ATTN__DATES_TEST, i, &p);
        nt += !attn__dates_is_test(p.year, p.month, p.day);
    }
    TU_CHECK(nt == 0, "%ld test examples are training dates", nt);
    /* determinism: same seed same examples, another seed other examples */
    attn__date_pair a, b;
    int same = 1, differ = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        attn__dates_example(7, 0, i, &a);
        attn__dates_example(7, 0, i, &b);
        same &= memcmp(&a, &b, sizeof a) == 0;
        attn__dates_example(8, 0, i, &b);
        differ += strcmp(a.src, b.src) != 0;
    }
    TU_CHECK(same && differ > 900, "determinism (%d of 1000 differ across seeds)", differ);
    free(ho);
    free(ho2);
    free(is_ho);
}

static void test_vocab_batch(void) {
    const char *chars = " ',-./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (int i = 0; chars[i]; i++) {
        int id = attn__dates_char_id((unsigned char)chars[i], 0);
        TU_CHECK(id == 4 + i && attn__dates_id_char(id) == chars[i], "vocab '%c'", chars[i]);
        TU_CHECK(attn__dates_id_name(id)[0] == chars[i] && attn__dates_id_name(id)[1] == 0, "name");
    }
    TU_CHECK(ATTN__DATES_VOCAB == 4 + (int)strlen(chars), "vocab size");
    TU_CHECK(attn__dates_char_id('@', 0) == ATTN__DATES_UNK && attn__dates_char_id(0xE9, 0) == ATTN__DATES_UNK,
             "unknown characters");
    TU_CHECK(attn__dates_char_id('N', ATTN__DATES_FOLD_CASE) == attn__dates_char_id('n', 0), "fold");
    TU_CHECK(attn__dates_id_char(ATTN__DATES_EOS) < 0 && strcmp(attn__dates_id_name(2), "<eos>") == 0 &&
                 strcmp(attn__dates_id_name(99), "<?>") == 0,
             "specials");
    int64_t ids[64];
    char txt[64];
    int n = attn__dates_encode("Nov 21, 2026", 0, ids, 64);
    TU_CHECK(n == 12 && attn__dates_decode(ids, n, txt, sizeof txt) == 12 &&
                 strcmp(txt, "Nov 21, 2026") == 0,
             "encode/decode");
    TU_CHECK(attn__dates_encode("Nov 21, 2026", 0, ids, 5) == -1, "encode overflow");
    int64_t seq[] = {1, 14, 12, 3, 2, 10};
    TU_CHECK(attn__dates_decode(seq, 6, txt, sizeof txt) == 3 && strcmp(txt, "42?") == 0,
             "decode stops at EOS: %s", txt);
    TU_CHECK(attn__dates_decode(seq, 6, txt, 2) == 1 && strcmp(txt, "4") == 0, "decode cap");

    enum { B = 64, S = ATTN__DATES_MAX_SRC, T = ATTN__DATES_TGT_LEN };
    int64_t src[B * S], ti[B * T], to[B * T];
    unsigned char pad[B * S];
    attn__date_pair pairs[B];
    if (TU_STATUS(attn__dates_batch(ctx, 5, ATTN__DATES_TRAIN, 1000, B, S, 0, src, pad, ti, to, pairs),
                  ATTN_OK, ctx)) {
        int bad = 0;
        for (int b = 0; b < B; b++) {
            attn__date_pair p;
            attn__dates_example(5, ATTN__DATES_TRAIN, 1000 + (uint64_t)b, &p);
            bad += memcmp(&p, &pairs[b], sizeof p) != 0;
            int len = (int)strlen(p.src);
            for (int j = 0; j < S; j++) {
                int64_t id = src[b * S + j];
                bad += pad[b * S + j] != (j >= len);
                bad += j < len ? id != attn__dates_char_id((unsigned char)p.src[j], 0) : id != ATTN__DATES_PAD;
            }
            bad += ti[b * T] != ATTN__DATES_BOS || to[b * T + T - 1] != ATTN__DATES_EOS;
            for (int j = 0; j < 10; j++) bad += ti[b * T + 1 + j] != to[b * T + j];
            attn__dates_decode(to + b * T, T, txt, sizeof txt);
            bad += strcmp(txt, p.tgt) != 0;
            attn__dates_decode(src + b * S, S, txt, sizeof txt);
            bad += strcmp(txt, p.src) != 0;
        }
        TU_CHECK(bad == 0, "batch: %d mismatches", bad);
    }
    /* fold case: no capital ids */
    if (TU_STATUS(attn__dates_batch(ctx, 5, ATTN__DATES_TEST, 0, B, S, ATTN__DATES_FOLD_CASE, src, NULL,
                                    ti, to, NULL),
                  ATTN_OK, ctx)) {
        int caps = 0;
        for (int i = 0; i < B * S; i++) caps += src[i] >= 20 && src[i] < 46;
        TU_CHECK(caps == 0, "fold case left %d capitals", caps);
    }
    /* pairs given (e.g. the held-out set) */
    attn__date_pair ho[8];
    attn__dates_heldout(ctx, 3, 8, ho);
    TU_STATUS(attn__dates_encode_pairs(ctx, ho, 8, S, 0, src, pad, ti, to), ATTN_OK, ctx);
    attn__dates_decode(to + 3 * T, T, txt, sizeof txt);
    TU_CHECK(strcmp(txt, ho[3].tgt) == 0, "encode_pairs target");
    /* errors */
    TU_STATUS(attn__dates_batch(ctx, 5, 0, 0, 0, S, 0, src, pad, ti, to, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn__dates_batch(ctx, 5, 2, 0, B, S, 0, src, pad, ti, to, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn__dates_batch(ctx, 5, 0, 0, B, S, 0, NULL, pad, ti, to, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn__dates_batch(ctx, 5, 0, 0, B, 8, 0, src, pad, ti, to, NULL), ATTN_E_SHAPE, ctx);
    strcpy(ho[0].tgt, "2026-13-01");
    TU_STATUS(attn__dates_encode_pairs(ctx, ho, 1, S, 0, src, pad, ti, to), ATTN_E_INVALID, ctx);
}

int main(void) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    test_calendar();
    test_iso();
    test_formats();
    test_split_and_examples();
    test_vocab_batch();
    attn_ctx_free(ctx);
    return tu_finish("test_dates");
}
