/* Date phrases for `attn train dates` (see dates.h for the formats, split and vocabulary). */
#include <string.h>

#include "dates.h"

/* ---- calendar -------------------------------------------------------------------------- */
int attn__dates_is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int attn__dates_days_in_month(int y, int m) {
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12) return 0;
    return dm[m - 1] + (m == 2 && attn__dates_is_leap(y));
}

int attn__dates_valid(int y, int m, int d) {
    return y >= 1 && y <= 9999 && d >= 1 && d <= attn__dates_days_in_month(y, m);
}

/* Howard Hinnant's days_from_civil / civil_from_days (eras of 400 years). */
int64_t attn__dates_to_days(int y, int m, int d) {
    int64_t yy = (int64_t)y - (m <= 2);
    int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
    int64_t yoe = yy - era * 400;                                         /* [0, 399] */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;        /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;                  /* [0, 146096] */
    return era * 146097 + doe - 719468;
}

void attn__dates_from_days(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t dd = doy - (153 * mp + 2) / 5 + 1;
    int64_t mm = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)(yoe + era * 400 + (mm <= 2));
    *m = (int)mm;
    *d = (int)dd;
}

int attn__dates_weekday(int y, int m, int d) {
    int64_t r = (attn__dates_to_days(y, m, d) + 3) % 7; /* 1970-01-01 was a Thursday */
    return (int)(r < 0 ? r + 7 : r);
}

static const char *const month_names[12] = {"january", "february", "march",     "april",
                                            "may",     "june",     "july",      "august",
                                            "september", "october", "november", "december"};
static const char *const weekday_names[7] = {"monday", "tuesday",  "wednesday", "thursday",
                                             "friday", "saturday", "sunday"};

const char *attn__dates_month_name(int m) { return m >= 1 && m <= 12 ? month_names[m - 1] : NULL; }
const char *attn__dates_weekday_name(int w) { return w >= 0 && w <= 6 ? weekday_names[w] : NULL; }

/* ---- ISO strings ----------------------------------------------------------------------- */
static void put_digits(char *p, int v, int n) {
    for (int i = n - 1; i >= 0; i--, v /= 10) p[i] = (char)('0' + v % 10);
}

void attn__dates_iso(int y, int m, int d, char out[11]) {
    put_digits(out, y, 4);
    out[4] = '-';
    put_digits(out + 5, m, 2);
    out[7] = '-';
    put_digits(out + 8, d, 2);
    out[10] = 0;
}

int attn__dates_parse_iso(const char *s, int *year, int *month, int *day) {
    if (!s) return 0;
    for (int i = 0; i < 10; i++) {
        char c = s[i];
        if (i == 4 || i == 7) {
            if (c != '-') return 0;
        } else if (c < '0' || c > '9') {
            return 0; /* also stops at an early NUL */
        }
    }
    if (s[10] != 0) return 0;
    int y = 0, m = 0, d = 0;
    for (int i = 0; i < 4; i++) y = y * 10 + (s[i] - '0');
    m = (s[5] - '0') * 10 + (s[6] - '0');
    d = (s[8] - '0') * 10 + (s[9] - '0');
    if (!attn__dates_valid(y, m, d)) return 0;
    if (year) *year = y;
    if (month) *month = m;
    if (day) *day = d;
    return 1;
}

int attn__dates_is_iso(const char *s) { return attn__dates_parse_iso(s, NULL, NULL, NULL); }

/* ---- random numbers: SplitMix64 -------------------------------------------------------- */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t rng_next(uint64_t *s) {
    *s += 0x9E3779B97F4A7C15ull;
    return mix64(*s);
}
/* Uniform in [0, n) for n >= 1 (bias below 2^-40 for the small n used here). */
static uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }

/* ---- split ----------------------------------------------------------------------------- */
int attn__dates_is_test(int y, int m, int d) {
    uint64_t key = (uint64_t)(y * 10000 + m * 100 + d);
    return mix64(key ^ 0xA77D47E5C0FFEE11ull) % ATTN__DATES_TEST_MOD == 0;
}

static int64_t range_lo(void) { return attn__dates_to_days(ATTN__DATES_YEAR_MIN, 1, 1); }
static int64_t range_hi(void) { return attn__dates_to_days(ATTN__DATES_YEAR_MAX, 12, 31); }

int attn__dates_test_count(void) {
    int n = 0;
    for (int64_t t = range_lo(); t <= range_hi(); t++) {
        int y, m, d;
        attn__dates_from_days(t, &y, &m, &d);
        n += attn__dates_is_test(y, m, d);
    }
    return n;
}

/* ---- rendering ------------------------------------------------------------------------- */
static const char *const format_names[ATTN__DATES_NFORMATS] = {
    "D Mon YYYY",         "D Month YYYY",        "Month D, YYYY",
    "Mon D YYYY",         "Weekday, Month D, YYYY", "Wd D Mon YYYY",
    "M/D/YY",             "D.M.YYYY",            "YYYY/MM/DD",
    "the Dth of Month YYYY", "Month Dth, YYYY",  "Dth Month YYYY",
    "D-Mon-YYYY",         "M/D/YYYY",            "YYYY-MM-DD",
    "YYYYMMDD",           "Weekday D Month YYYY", "Mon. D, YYYY",
    "D Mon 'YY",          "Wd, Mon Dth, YYYY",   "Weekday the Dth of Month YYYY",
    "D.M.YY"};

const char *attn__dates_format_name(int f) {
    return f >= 0 && f < ATTN__DATES_NFORMATS ? format_names[f] : NULL;
}

static int two_digit_year(int f) { return f == 6 || f == 18 || f == 21; }

int attn__dates_format_allowed(int f, int year) {
    if (f < 0 || f >= ATTN__DATES_NFORMATS) return 0;
    return !two_digit_year(f) || (year >= 1950 && year <= 2049);
}

typedef struct pbuf {
    char s[96]; /* far more than any phrase: overflow cannot happen before the length check */
    int n;
    unsigned cs; /* case style */
} pbuf;

static void pb_char(pbuf *b, char c) {
    if (b->n < (int)sizeof b->s - 1) b->s[b->n++] = c;
}
static void pb_str(pbuf *b, const char *s) {
    while (*s) pb_char(b, *s++);
}
/* A word in the case style; title = capitalised in the Title style. */
static void pb_word(pbuf *b, const char *w, int len, int title) {
    for (int i = 0; w[i] && i < len; i++) {
        char c = w[i];
        if (b->cs == ATTN__DSTYLE_UPPER || (b->cs == ATTN__DSTYLE_TITLE && title && i == 0))
            if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
        pb_char(b, c);
    }
}
static void pb_num(pbuf *b, int v, int width) {
    char t[12];
    int n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 && n < 11);
    while (n < width && n < 11) t[n++] = '0';
    while (n > 0) pb_char(b, t[--n]);
}
static void pb_ordinal(pbuf *b, int d) {
    pb_num(b, d, 0);
    const char *suf = (d % 100 >= 11 && d % 100 <= 13) ? "th"
                      : d % 10 == 1                    ? "st"
                      : d % 10 == 2                    ? "nd"
                      : d % 10 == 3                    ? "rd"
                                                       : "th";
    pb_word(b, suf, 2, 0);
}

int attn__dates_render(int y, int m, int d, int f, unsigned style, char *out, size_t cap) {
    if (!out || cap == 0) return -1;
    out[0] = 0;
    if (!attn__dates_valid(y, m, d) || !attn__dates_format_allowed(f, y)) return -1;
    pbuf b;
    b.n = 0;
    b.cs = style & ATTN__DSTYLE_CASE_MASK;
    if (b.cs > ATTN__DSTYLE_UPPER) b.cs = ATTN__DSTYLE_TITLE;
    int pw = (style & ATTN__DSTYLE_PAD) ? 2 : 0; /* width of day and month numbers */
    const char *mon = month_names[m - 1], *wd = weekday_names[attn__dates_weekday(y, m, d)];
    int yy = y % 100;
    switch (f) {
    case 0: /* D Mon YYYY */
        pb_num(&b, d, pw), pb_char(&b, ' '), pb_word(&b, mon, 3, 1), pb_char(&b, ' ');
        pb_num(&b, y, 4);
        break;
    case 1: /* D Month YYYY */
        pb_num(&b, d, pw), pb_char(&b, ' '), pb_word(&b, mon, 99, 1), pb_char(&b, ' ');
        pb_num(&b, y, 4);
        break;
    case 2: /* Month D, YYYY */
        pb_word(&b, mon, 99, 1), pb_char(&b, ' '), pb_num(&b, d, pw), pb_str(&b, ", ");
        pb_num(&b, y, 4);
        break;
    case 3: /* Mon D YYYY */
        pb_word(&b, mon, 3, 1), pb_char(&b, ' '), pb_num(&b, d, pw), pb_char(&b, ' ');
        pb_num(&b, y, 4);
        break;
    case 4: /* Weekday, Month D, YYYY */
        pb_word(&b, wd, 99, 1), pb_str(&b, ", "), pb_word(&b, mon, 99, 1), pb_char(&b, ' ');
        pb_num(&b, d, pw), pb_str(&b, ", "), pb_num(&b, y, 4);
        break;
    case 5: /* Wd D Mon YYYY */
        pb_word(&b, wd, 3, 1), pb_char(&b, ' '), pb_num(&b, d, pw), pb_char(&b, ' ');
        pb_word(&b, mon, 3, 1), pb_char(&b, ' '), pb_num(&b, y, 4);
        break;
    case 6: /* M/D/YY */
        pb_num(&b, m, pw), pb_char(&b, '/'), pb_num(&b, d, pw), pb_char(&b, '/');
        pb_num(&b, yy, 2);
        break;
    case 7: /* D.M.YYYY */
        pb_num(&b, d, pw), pb_char(&b, '.'), pb_num(&b, m, pw), pb_char(&b, '.');
        pb_num(&b, y, 4);
        break;
    case 8: /* YYYY/MM/DD */
        pb_num(&b, y, 4), pb_char(&b, '/'), pb_num(&b, m, 2), pb_char(&b, '/');
        pb_num(&b, d, 2);
        break;
    case 9: /* the Dth of Month YYYY */
        pb_word(&b, "the", 3, 1), pb_char(&b, ' '), pb_ordinal(&b, d), pb_str(&b, " ");
        pb_word(&b, "of", 2, 0), pb_char(&b, ' '), pb_word(&b, mon, 99, 1), pb_char(&b, ' ');
        pb_num(&b, y, 4);
        break;
    case 10: /* Month Dth, YYYY */
        pb_word(&b, mon, 99, 1), pb_char(&b, ' '), pb_ordinal(&b, d), pb_str(&b, ", ");
        pb_num(&b, y, 4);
        break;
    case 11: /* Dth Month YYYY */
        pb_ordinal(&b, d), pb_char(&b, ' '), pb_word(&b, mon, 99, 1), pb_char(&b, ' ');
        pb_num(&b, y, 4);
        break;
    case 12: /* D-Mon-YYYY */
        pb_num(&b, d, pw), pb_char(&b, '-'), pb_word(&b, mon, 3, 1), pb_char(&b, '-');
        pb_num(&b, y, 4);
        break;
    case 13: /* M/D/YYYY */
        pb_num(&b, m, pw), pb_char(&b, '/'), pb_num(&b, d, pw), pb_char(&b, '/');
        pb_num(&b, y, 4);
        break;
    case 14: /* YYYY-MM-DD */
        pb_num(&b, y, 4), pb_char(&b, '-'), pb_num(&b, m, 2), pb_char(&b, '-');
        pb_num(&b, d, 2);
        break;
    case 15: /* YYYYMMDD */
        pb_num(&b, y, 4), pb_num(&b, m, 2), pb_num(&b, d, 2);
        break;
    case 16: /* Weekday D Month YYYY */
        pb_word(&b, wd, 99, 1), pb_char(&b, ' '), pb_num(&b, d, pw), pb_char(&b, ' ');
        pb_word(&b, mon, 99, 1), pb_char(&b, ' '), pb_num(&b, y, 4);
        break;
    case 17: /* Mon. D, YYYY ("May" has no abbreviation, so no period) */
        pb_word(&b, mon, 3, 1);
        if (m != 5) pb_char(&b, '.');
        pb_char(&b, ' '), pb_num(&b, d, pw), pb_str(&b, ", "), pb_num(&b, y, 4);
        break;
    case 18: /* D Mon 'YY */
        pb_num(&b, d, pw), pb_char(&b, ' '), pb_word(&b, mon, 3, 1), pb_str(&b, " '");
        pb_num(&b, yy, 2);
        break;
    case 19: /* Wd, Mon Dth, YYYY */
        pb_word(&b, wd, 3, 1), pb_str(&b, ", "), pb_word(&b, mon, 3, 1), pb_char(&b, ' ');
        pb_ordinal(&b, d), pb_str(&b, ", "), pb_num(&b, y, 4);
        break;
    case 20: /* Weekday the Dth of Month YYYY */
        pb_word(&b, wd, 99, 1), pb_char(&b, ' '), pb_word(&b, "the", 3, 0), pb_char(&b, ' ');
        pb_ordinal(&b, d), pb_char(&b, ' '), pb_word(&b, "of", 2, 0), pb_char(&b, ' ');
        pb_word(&b, mon, 99, 1), pb_char(&b, ' '), pb_num(&b, y, 4);
        break;
    default: /* 21: D.M.YY */
        pb_num(&b, d, pw), pb_char(&b, '.'), pb_num(&b, m, pw), pb_char(&b, '.');
        pb_num(&b, yy, 2);
        break;
    }
    b.s[b.n] = 0;
    /* extra spaces */
    char t[sizeof b.s + 4];
    int n = 0, spaces = 0, which = -1;
    for (int i = 0; i < b.n; i++) spaces += b.s[i] == ' ';
    if ((style & ATTN__DSTYLE_DOUBLE) && spaces > 0)
        which = (int)((style >> ATTN__DSTYLE_WHICH_SHIFT) & 15u) % spaces;
    if (style & ATTN__DSTYLE_LEADING) t[n++] = ' ';
    for (int i = 0, k = 0; i < b.n; i++) {
        t[n++] = b.s[i];
        if (b.s[i] == ' ' && k++ == which) t[n++] = ' ';
    }
    if (style & ATTN__DSTYLE_TRAILING) t[n++] = ' ';
    if (n > ATTN__DATES_MAX_SRC || (size_t)n >= cap) return -1;
    memcpy(out, t, (size_t)n);
    out[n] = 0;
    return n;
}

/* ---- examples -------------------------------------------------------------------------- */
static uint64_t example_state(uint64_t seed, int split, uint64_t index) {
    return mix64(mix64(seed ^ 0x0DA7E5DA7E5ull) + 2 * index + (uint64_t)(split != 0));
}

void attn__dates_example(uint64_t seed, int split, uint64_t index, attn__date_pair *out) {
    uint64_t s = example_state(seed, split, index);
    int64_t lo = range_lo(), count = range_hi() - lo + 1;
    int want = split == ATTN__DATES_TEST;
    int y, m, d;
    do {
        attn__dates_from_days(lo + (int64_t)rng_below(&s, (uint32_t)count), &y, &m, &d);
    } while (attn__dates_is_test(y, m, d) != want);
    int allowed[ATTN__DATES_NFORMATS], na = 0;
    for (int f = 0; f < ATTN__DATES_NFORMATS; f++)
        if (attn__dates_format_allowed(f, y)) allowed[na++] = f;
    int f = allowed[rng_below(&s, (uint32_t)na)];
    unsigned style = 0;
    uint32_t c = rng_below(&s, 100);
    style |= c < 50 ? ATTN__DSTYLE_TITLE : c < 85 ? ATTN__DSTYLE_LOWER : ATTN__DSTYLE_UPPER;
    if (rng_below(&s, 100) < 30) style |= ATTN__DSTYLE_PAD;
    if (rng_below(&s, 100) < 10)
        style |= ATTN__DSTYLE_DOUBLE | (rng_below(&s, 16) << ATTN__DSTYLE_WHICH_SHIFT);
    if (rng_below(&s, 100) < 3) style |= ATTN__DSTYLE_LEADING;
    if (rng_below(&s, 100) < 3) style |= ATTN__DSTYLE_TRAILING;
    memset(out, 0, sizeof *out);
    if (attn__dates_render(y, m, d, f, style, out->src, sizeof out->src) < 0) {
        /* cannot happen for the dates and formats above (tests check every one); stay total */
        style = ATTN__DSTYLE_LOWER;
        f = 14;
        attn__dates_render(y, m, d, f, style, out->src, sizeof out->src);
    }
    attn__dates_iso(y, m, d, out->tgt);
    out->year = y;
    out->month = m;
    out->day = d;
    out->format = f;
    out->style = style;
}

attn_status attn__dates_heldout(attn_ctx *ctx, uint64_t seed, int n, attn__date_pair *out) {
    ATTN_FAIL_IF(!out && n > 0, ctx, ATTN_E_INVALID, "dates: output is NULL");
    int avail = attn__dates_test_count();
    ATTN_FAIL_IF(n < 0 || n > avail, ctx, ATTN_E_INVALID,
                 "dates: %d held-out dates asked for; there are %d", n, avail);
    enum { NDAYS = 73049 }; /* days from 1900-01-01 to 2099-12-31 */
    unsigned char seen[(NDAYS + 7) / 8];
    memset(seen, 0, sizeof seen);
    int64_t lo = range_lo();
    for (uint64_t i = 0; n > 0; i++) {
        attn__date_pair p;
        attn__dates_example(seed, ATTN__DATES_TEST, i, &p);
        int64_t k = attn__dates_to_days(p.year, p.month, p.day) - lo;
        if (k < 0 || k >= NDAYS || (seen[k >> 3] >> (k & 7)) & 1) continue;
        seen[k >> 3] |= (unsigned char)(1u << (k & 7));
        *out++ = p;
        n--;
    }
    return ATTN_OK;
}

/* ---- vocabulary ------------------------------------------------------------------------ */
static const char id_chars[] = " ',-./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static const char id_names[68][2] = {
    " ", "'", ",", "-", ".", "/", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "A", "B",
    "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S", "T",
    "U", "V", "W", "X", "Y", "Z", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l",
    "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z"};

int attn__dates_char_id(int c, unsigned flags) {
    if ((flags & ATTN__DATES_FOLD_CASE) && c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
    if (c >= '0' && c <= '9') return 10 + (c - '0');
    if (c >= 'A' && c <= 'Z') return 20 + (c - 'A');
    if (c >= 'a' && c <= 'z') return 46 + (c - 'a');
    switch (c) {
    case ' ': return 4;
    case '\'': return 5;
    case ',': return 6;
    case '-': return 7;
    case '.': return 8;
    case '/': return 9;
    default: return ATTN__DATES_UNK;
    }
}

int attn__dates_id_char(int id) {
    if (id < 4 || id >= ATTN__DATES_VOCAB) return -1;
    return (unsigned char)id_chars[id - 4];
}

const char *attn__dates_id_name(int id) {
    static const char *const special[4] = {"<pad>", "<bos>", "<eos>", "<unk>"};
    if (id >= 0 && id < 4) return special[id];
    if (id >= 4 && id < ATTN__DATES_VOCAB) return id_names[id - 4];
    return "<?>";
}

int attn__dates_encode(const char *text, unsigned flags, int64_t *ids, int cap) {
    if (!text) return 0;
    int n = 0;
    for (; text[n]; n++) {
        if (n >= cap || !ids) return -1;
        ids[n] = attn__dates_char_id((unsigned char)text[n], flags);
    }
    return n;
}

int attn__dates_decode(const int64_t *ids, int n, char *out, size_t cap) {
    if (!out || cap == 0) return 0;
    size_t k = 0;
    for (int i = 0; ids && i < n && k + 1 < cap; i++) {
        int64_t id = ids[i];
        if (id == ATTN__DATES_EOS || id == ATTN__DATES_PAD) break;
        if (id == ATTN__DATES_BOS) continue;
        int c = (id >= 4 && id < ATTN__DATES_VOCAB) ? attn__dates_id_char((int)id) : '?';
        out[k++] = (char)c;
    }
    out[k] = 0;
    return (int)k;
}

/* ---- batches --------------------------------------------------------------------------- */
static attn_status check_batch_args(attn_ctx *ctx, int B, int S, const int64_t *src,
                                    const int64_t *tgt_in, const int64_t *tgt_out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(B <= 0 || S <= 0, ctx, ATTN_E_INVALID,
                 "dates: batch size %d and source length %d must be positive", B, S);
    ATTN_FAIL_IF(!src || !tgt_in || !tgt_out, ctx, ATTN_E_INVALID,
                 "dates: src, tgt_in and tgt_out must not be NULL");
    size_t bs;
    ATTN_FAIL_IF(!attn__mul_size((size_t)B, (size_t)S, &bs) ||
                     bs > SIZE_MAX / sizeof(int64_t),
                 ctx, ATTN_E_OVERFLOW, "dates: batch [%d, %d] overflows", B, S);
    return ATTN_OK;
}

static attn_status encode_one(attn_ctx *ctx, const attn__date_pair *p, int b, int S,
                              unsigned flags, int64_t *src, unsigned char *src_pad,
                              int64_t *tgt_in, int64_t *tgt_out) {
    int64_t *row = src + (size_t)b * (size_t)S;
    int len = attn__dates_encode(p->src, flags, row, S);
    ATTN_FAIL_IF(len < 0, ctx, ATTN_E_SHAPE,
                 "dates: phrase %d \"%s\" (%zu characters) does not fit source length %d", b,
                 p->src, strlen(p->src), S);
    for (int j = len; j < S; j++) row[j] = ATTN__DATES_PAD;
    if (src_pad)
        for (int j = 0; j < S; j++) src_pad[(size_t)b * (size_t)S + (size_t)j] = j >= len;
    ATTN_FAIL_IF(!attn__dates_is_iso(p->tgt), ctx, ATTN_E_INVALID,
                 "dates: target %d \"%s\" is not an ISO date", b, p->tgt);
    int64_t *ti = tgt_in + (size_t)b * ATTN__DATES_TGT_LEN;
    int64_t *to = tgt_out + (size_t)b * ATTN__DATES_TGT_LEN;
    ti[0] = ATTN__DATES_BOS;
    for (int j = 0; j < ATTN__DATES_ISO_LEN; j++) {
        int64_t id = attn__dates_char_id((unsigned char)p->tgt[j], 0);
        ti[j + 1] = id;
        to[j] = id;
    }
    to[ATTN__DATES_ISO_LEN] = ATTN__DATES_EOS;
    return ATTN_OK;
}

attn_status attn__dates_batch(attn_ctx *ctx, uint64_t seed, int split, uint64_t first, int B,
                              int S, unsigned flags, int64_t *src, unsigned char *src_pad,
                              int64_t *tgt_in, int64_t *tgt_out, attn__date_pair *pairs) {
    ATTN_TRY(check_batch_args(ctx, B, S, src, tgt_in, tgt_out));
    ATTN_FAIL_IF(split != ATTN__DATES_TRAIN && split != ATTN__DATES_TEST, ctx, ATTN_E_INVALID,
                 "dates: unknown split %d", split);
    for (int b = 0; b < B; b++) {
        attn__date_pair p;
        attn__dates_example(seed, split, first + (uint64_t)b, &p);
        ATTN_TRY(encode_one(ctx, &p, b, S, flags, src, src_pad, tgt_in, tgt_out));
        if (pairs) pairs[b] = p;
    }
    return ATTN_OK;
}

attn_status attn__dates_encode_pairs(attn_ctx *ctx, const attn__date_pair *pairs, int B, int S,
                                     unsigned flags, int64_t *src, unsigned char *src_pad,
                                     int64_t *tgt_in, int64_t *tgt_out) {
    ATTN_TRY(check_batch_args(ctx, B, S, src, tgt_in, tgt_out));
    ATTN_FAIL_IF(!pairs, ctx, ATTN_E_INVALID, "dates: pairs is NULL");
    for (int b = 0; b < B; b++)
        ATTN_TRY(encode_one(ctx, &pairs[b], b, S, flags, src, src_pad, tgt_in, tgt_out));
    return ATTN_OK;
}
