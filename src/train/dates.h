/* Date phrases for `attn train dates`: a deterministic generator of (human date, ISO date)
 * pairs, the character vocabulary, encoding to token ids and training batches.
 *
 * Dates run from 1900-01-01 to 2099-12-31 (proleptic Gregorian calendar).  Every date belongs
 * to the training split or to the held-out test split, fixed by a hash of (year, month, day):
 * about 1 date in 20 is a test date, and the training generator never emits one, whatever
 * the format.  Example k of a seed and split is a pure function of (seed, split, k), so
 * batches can be made in any order, on any thread, and replayed.
 *
 * Formats (ATTN__DATES_NFORMATS of them; examples for 2026-11-21 or 1999-05-03):
 *    0 "21 Nov 2026"                   11 "3rd May 1999"
 *    1 "21 November 2026"              12 "21-Nov-2026"
 *    2 "November 21, 2026"             13 "11/21/2026"          (US: month first)
 *    3 "Nov 21 2026"                   14 "2026-11-21"          (already ISO)
 *    4 "Saturday, November 21, 2026"   15 "20261121"
 *    5 "Sat 21 Nov 2026"               16 "Saturday 21 November 2026"
 *    6 "11/21/26"    (US, 2-digit)     17 "Nov. 21, 2026"
 *    7 "21.11.2026"  (day first)       18 "21 Nov '26"          (2-digit)
 *    8 "2026/11/21"                    19 "Sat, Nov 21st, 2026"
 *    9 "the 3rd of May 1999"           20 "Saturday the 21st of November 2026"
 *   10 "May 3rd, 1999"                 21 "21.11.26"            (day first, 2-digit)
 * Numbers separated by '/' are month first unless the year comes first (4 digits); numbers
 * separated by '.' are day first.  Two-digit years mean 19YY for YY >= 50 and 20YY for
 * YY < 50, and are only generated for the years 1950..2049, so every phrase has exactly one
 * reading.  Weekdays are the true weekdays of the date.  Each example also draws a style: the
 * case of the words (Title 50%, lower 35%, UPPER 15%), zero-padded day and month numbers
 * (30%, where the format allows both), a doubled space (10%), a leading or a trailing space
 * (3% each).
 *
 * Case: inputs keep their case, and the vocabulary has both cases.  Encoding with
 * ATTN__DATES_FOLD_CASE maps capitals to the ids of the small letters (the capital ids are then
 * never used), which makes the task easier for a small model.
 *
 * Vocabulary (ATTN__DATES_VOCAB ids): 0 PAD, 1 BOS, 2 EOS, 3 UNK, then the characters
 * " ',-./", '0'..'9', 'A'..'Z', 'a'..'z' in that order (ids 4..71).  Targets use '0'..'9' and
 * '-' only. */
#ifndef ATTN_TRAIN_DATES_H
#define ATTN_TRAIN_DATES_H
#include "internal.h"

enum { ATTN__DATES_PAD = 0, ATTN__DATES_BOS = 1, ATTN__DATES_EOS = 2, ATTN__DATES_UNK = 3 };
#define ATTN__DATES_VOCAB 72
#define ATTN__DATES_MAX_SRC 40  /* characters in an input phrase, at most */
#define ATTN__DATES_ISO_LEN 10  /* "YYYY-MM-DD" */
#define ATTN__DATES_TGT_LEN 11  /* decoder steps: BOS + ISO in, ISO + EOS out */
#define ATTN__DATES_YEAR_MIN 1900
#define ATTN__DATES_YEAR_MAX 2099
#define ATTN__DATES_NFORMATS 22
#define ATTN__DATES_TEST_MOD 20 /* a date is held out when its hash % 20 == 0 */

enum { ATTN__DATES_TRAIN = 0, ATTN__DATES_TEST = 1 };
#define ATTN__DATES_FOLD_CASE 1u /* encode flag: capitals -> small letters */

/* Style bits for attn__dates_render (attn__dates_example draws them at random). */
#define ATTN__DSTYLE_LOWER 0u
#define ATTN__DSTYLE_TITLE 1u
#define ATTN__DSTYLE_UPPER 2u
#define ATTN__DSTYLE_CASE_MASK 3u
#define ATTN__DSTYLE_PAD (1u << 2)      /* zero-pad day and month numbers */
#define ATTN__DSTYLE_DOUBLE (1u << 3)   /* double one space ... */
#define ATTN__DSTYLE_WHICH_SHIFT 4      /* ... the one at index (style >> 4 & 15) % spaces */
#define ATTN__DSTYLE_LEADING (1u << 8)  /* a space before */
#define ATTN__DSTYLE_TRAILING (1u << 9) /* a space after */

typedef struct attn__date_pair {
    char src[ATTN__DATES_MAX_SRC + 1]; /* the human phrase, NUL-terminated */
    char tgt[ATTN__DATES_ISO_LEN + 1]; /* "YYYY-MM-DD" */
    int year, month, day;
    int format;   /* 0 .. ATTN__DATES_NFORMATS-1 */
    unsigned style;
} attn__date_pair;

/* ---- calendar -------------------------------------------------------------------------- */
ATTN__HIDDEN int attn__dates_is_leap(int year);
/* 0 for a month outside 1..12. */
ATTN__HIDDEN int attn__dates_days_in_month(int year, int month);
/* 1 when (year, month, day) is a date of the years 1..9999. */
ATTN__HIDDEN int attn__dates_valid(int year, int month, int day);
/* Days since 1970-01-01 (negative before), and back. */
ATTN__HIDDEN int64_t attn__dates_to_days(int year, int month, int day);
ATTN__HIDDEN void attn__dates_from_days(int64_t days, int *year, int *month, int *day);
/* Day of the week, ISO numbering from 0: 0 = Monday ... 6 = Sunday. */
ATTN__HIDDEN int attn__dates_weekday(int year, int month, int day);
/* "january".."december" (month 1..12), "monday".."sunday" (0..6); NULL out of range. */
ATTN__HIDDEN const char *attn__dates_month_name(int month);
ATTN__HIDDEN const char *attn__dates_weekday_name(int weekday);

/* ---- ISO strings ----------------------------------------------------------------------- */
/* Writes "YYYY-MM-DD" and a NUL into out (11 bytes) for a valid date of years 1..9999. */
ATTN__HIDDEN void attn__dates_iso(int year, int month, int day, char out[11]);
/* 1 when s is exactly "YYYY-MM-DD" (ten characters, nothing after) naming a valid date;
 * then stores the parts (each pointer may be NULL).  0 otherwise. */
ATTN__HIDDEN int attn__dates_parse_iso(const char *s, int *year, int *month, int *day);
ATTN__HIDDEN int attn__dates_is_iso(const char *s);

/* ---- split and generator --------------------------------------------------------------- */
/* 1 for a held-out (test) date. */
ATTN__HIDDEN int attn__dates_is_test(int year, int month, int day);
/* A short pattern naming the format ("D Mon YYYY"); NULL out of range. */
ATTN__HIDDEN const char *attn__dates_format_name(int format);
/* 1 when the format may be used for the year (two-digit years: 1950..2049 only). */
ATTN__HIDDEN int attn__dates_format_allowed(int format, int year);
/* The phrase of a date in a format and style (ATTN__DSTYLE_* bits).  Returns its length, or
 * -1 if the date, format (for that year) or buffer size is not valid; out gets a NUL. */
ATTN__HIDDEN int attn__dates_render(int year, int month, int day, int format, unsigned style,
                                    char *out, size_t cap);
/* Example `index` of (seed, split): a date of the split drawn uniformly from the range, a
 * format drawn uniformly among those allowed for its year, and a style. */
ATTN__HIDDEN void attn__dates_example(uint64_t seed, int split, uint64_t index,
                                      attn__date_pair *out);
/* Number of held-out dates in the range. */
ATTN__HIDDEN int attn__dates_test_count(void);
/* n DISTINCT held-out dates (n <= attn__dates_test_count()), each in a format and style of
 * its example: examples 0, 1, 2, ... of (seed, ATTN__DATES_TEST), skipping repeated dates.
 * The evaluation set of `attn train dates` is attn__dates_heldout(ctx, seed, 1000, ...). */
ATTN__HIDDEN attn_status attn__dates_heldout(attn_ctx *ctx, uint64_t seed, int n,
                                             attn__date_pair *out);

/* ---- vocabulary ------------------------------------------------------------------------ */
/* Id of a character (ATTN__DATES_UNK if not in the vocabulary); flags ATTN__DATES_FOLD_CASE. */
ATTN__HIDDEN int attn__dates_char_id(int c, unsigned flags);
/* Character of an id, or -1 for PAD/BOS/EOS/UNK and ids out of range. */
ATTN__HIDDEN int attn__dates_id_char(int id);
/* Printable name of an id for labels: the character, or "<pad>", "<bos>", "<eos>", "<unk>",
 * "<?>" (static strings). */
ATTN__HIDDEN const char *attn__dates_id_name(int id);
/* Character ids of text (no BOS/EOS): returns the count, or -1 if more than cap. */
ATTN__HIDDEN int attn__dates_encode(const char *text, unsigned flags, int64_t *ids, int cap);
/* Text of ids: stops at EOS or PAD, skips BOS, UNK and unknown ids become '?'.  Writes at most
 * cap - 1 characters and a NUL (cap >= 1); returns the length written. */
ATTN__HIDDEN int attn__dates_decode(const int64_t *ids, int n, char *out, size_t cap);

/* ---- batches --------------------------------------------------------------------------- */
/* Examples first .. first+B-1 of (seed, split), encoded (flags as attn__dates_encode):
 *   src      [B, S] I64  the phrase's ids, then PAD
 *   src_pad  [B, S] U8   1 at padding, 0 at characters (ATTN_MASK_BLOCK polarity: the
 *                        src_key_padding_mask / memory_key_padding_mask of nn.Transformer);
 *                        may be NULL
 *   tgt_in   [B, T] I64  BOS then the ISO date (T = ATTN__DATES_TGT_LEN: no padding needed)
 *   tgt_out  [B, T] I64  the ISO date then EOS
 *   pairs    [B]         the examples as text; may be NULL
 * S >= ATTN__DATES_MAX_SRC holds any phrase; a smaller S fails with ATTN_E_SHAPE if a phrase
 * does not fit. */
ATTN__HIDDEN attn_status attn__dates_batch(attn_ctx *ctx, uint64_t seed, int split,
                                           uint64_t first, int B, int S, unsigned flags,
                                           int64_t *src, unsigned char *src_pad,
                                           int64_t *tgt_in, int64_t *tgt_out,
                                           attn__date_pair *pairs);
/* The same from given pairs (e.g. the held-out set): src/src_pad/tgt_in/tgt_out as above. */
ATTN__HIDDEN attn_status attn__dates_encode_pairs(attn_ctx *ctx, const attn__date_pair *pairs,
                                                  int B, int S, unsigned flags, int64_t *src,
                                                  unsigned char *src_pad, int64_t *tgt_in,
                                                  int64_t *tgt_out);

#endif
