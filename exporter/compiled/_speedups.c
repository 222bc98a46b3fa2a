/* Compiled fast paths for the hot loops of reading a journal: finding and decoding the lines
 * that may matter (the line layer, sources/lines.py), tokenizing the common llama.cpp lines and
 * running the parser's state machine over them (parse/tokens.py, parse/parser.py).
 *
 * Each function has a pure-Python reference that stays the specification:
 *   scan(data, ...)       ~ [EntryDecoder(node).decode(raw) or raw
 *                            for raw in sources.lines.find_lines(data)]
 *                           (as a Lines, when every line is decoded: a sequence whose LogLines
 *                           are made when first asked for, each line's common token read
 *                           while the line is in the cache; join(parts) chains them)
 *   tokenize(msg)         ~ parse.tokens.tokenize(msg)
 *   feed(parser, ...)     ~ parser.feed_reference(lines): the Python loop of Parser.feed_all
 *                           (on a Lines, the common lines read from their tokens: no LogLine)
 * The C side handles only the shapes it recognises exactly and hands everything else back
 * (raw bytes, None, or the index of the line to leave to Python) for the Python code to
 * decide, so it is never the only judge of a line. scan decodes two shapes: the plain
 * short-iso-precise line, and the usual journalctl -o json entry (one flat object of string
 * fields, valid UTF-8, escapes decoded as json does, a decimal time in range and PID); a line
 * longer than max_line is always handed back. No input raises: arbitrary bytes in scan, any
 * str in tokenize, any values in feed's lines (a time or PID that does not fit in 64 bits, or a
 * time outside times.MIN_TIME_US..MAX_TIME_US, is handed back); only bad argument types do.
 * tests/unit/compiled/test_speedups.py and tests/hostile/test_parse_fuzz.py hold the two sides
 * to the same answers (and, for feed, the same parser state after).
 *
 * The records cross by position and some objects by attribute name: the layouts below name
 * each position and attribute this code uses, and check_layouts(layouts), which
 * exporter.compiled.switch calls at import, refuses Python layouts that differ from them.
 */
#define _GNU_SOURCE /* memmem, memrchr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* (every x86-64) */
#endif

#define MAX_DURATION_US (7LL * 86400LL * 1000000LL) /* parse.tokens.MAX_DURATION_US */
#define MAX_TOKENS 1000000000LL                       /* parse.tokens.MAX_TOKENS */
#define MIN_TIME_US 0LL                               /* times.MIN_TIME_US */
#define MAX_TIME_US 253402300799999999LL              /* times.MAX_TIME_US */
#define MAX_PID_DIGITS 10 /* entries: a longer PID is 0 (short) or not the usual shape (JSON) */

/* ---- layouts: the positions and names shared with the Python code (see check_layouts) ---- */

/* records.LogLine, Interval and Event: each field's position */
enum { L_NODE, L_TIME_US, L_CURSOR, L_PID, L_MESSAGE, L_N };
enum {
    I_NODE, I_START_US, I_END_US, I_TOKENS, I_PROMPT_TOKENS, I_GENERATED_TOKENS, I_PROMPT_US,
    I_GENERATION_US, I_SLOT, I_TASK, I_PID, I_REASON, I_MODEL, I_N
};
enum { E_NODE, E_TIME_US, E_KIND, E_PID, E_SLOT, E_TASK, E_DETAIL, E_MODEL, E_VALUE, E_N };
/* parse.tokens: a Token's items, and the kinds this code makes (the first of TOKEN_KINDS) */
enum { K_KIND, K_SLOT, K_TASK, K_US, K_COUNT, K_N };
enum { OTHER, HEADER, PROMPT, EVAL, TOTAL, LAUNCH, RELEASE, TOKEN_KINDS_N };
/* parse.contract.FeedTypes: what feed makes its records of */
enum { T_INTERVAL, T_STARTED, T_EMPTY, T_EVENT, T_BLOCK, T_NO_BLOCK, T_N };
/* parse.contract.BLOCK_FIELDS, in the order Block takes them */
enum { B_SLOT, B_TASK, B_PROMPT_US, B_PROMPT_TOKENS, B_GENERATION_US, B_GENERATED_TOKENS, B_N };
/* parse.contract.PARSER_READS: the Parser attributes feed reads (and `block`, which it sets) */
enum { P_NODE, P_PID, P_STARTED, P_LAST_TIMED, P_BLOCK, P_TASK_REASONS, P_N };

static const char *const logline_fields[L_N] = {"node", "time_us", "cursor", "pid", "message"};
static const char *const interval_fields[I_N] = {
    "node", "start_us", "end_us", "tokens", "prompt_tokens", "generated_tokens", "prompt_us",
    "generation_us", "slot", "task", "pid", "reason", "model"};
static const char *const event_fields[E_N] = {"node", "time_us", "kind", "pid",
                                              "slot", "task", "detail", "model", "value"};
static const char *const token_fields[K_N] = {"kind", "slot", "task", "us", "count"};
static const char *const token_kinds[TOKEN_KINDS_N] = {"OTHER", "HEADER", "PROMPT", "EVAL",
                                                       "TOTAL", "LAUNCH", "RELEASE"};
static const char *const feed_types[T_N] = {"interval", "started", "empty",
                                            "event", "block", "no_block"};
static const char *const block_fields[B_N] = {
    "slot", "task", "prompt_us", "prompt_tokens", "generation_us", "generated_tokens"};
static const char *const parser_reads[P_N] = {"node", "pid", "started",
                                              "last_timed", "block", "task_reasons"};

/* Each layout by the name the switch gives it; `prefix` when the Python tuple may go on past
 * the names here (the Python tokenizer makes more kinds than this code). */
static const struct {
    const char *name;
    const char *const *names;
    int n, prefix;
} layouts[] = {
    {"LogLine", logline_fields, L_N, 0},
    {"Interval", interval_fields, I_N, 0},
    {"Event", event_fields, E_N, 0},
    {"Token", token_fields, K_N, 0},
    {"TokenKind", token_kinds, TOKEN_KINDS_N, 1},
    {"FeedTypes", feed_types, T_N, 0},
    {"Block", block_fields, B_N, 0},
    {"Parser", parser_reads, P_N, 0},
};
#define N_LAYOUTS ((int)(sizeof layouts / sizeof layouts[0]))

/* ---- scan: keyword lines of a chunk, the usual shapes decoded ---------------------------- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Python's bytes.isspace / the regex \s for bytes: space, \t, \n, \v, \f, \r */
static int is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static int digits(const char *p, int n, long long *out) {
    long long v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(p[i])) return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

/* days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil) */
static long long days_from_civil(long long y, long long m, long long d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(long long y, long long m) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return days[m - 1];
}

/* What the decoders found in one line: its time and pid, where its message (and, for JSON,
 * cursor) are, and whether they hold escapes; `ok` 0 for a line to hand back raw. */
enum { SHAPE_SHORT, SHAPE_JSON };

/* What one common line says: a parse.tokens.Token with every number present (0 where the Token
 * holds None: OTHER's four, the slot lines' us and count). */
typedef struct {
    int kind;
    long long slot, task, us, count;
} Tok;

typedef struct {
    long long time_us, pid;
    Py_ssize_t len;          /* the line's, without its newline */
    int ok;
    Py_ssize_t msg, end;     /* the message: line[msg:end] */
    Py_ssize_t cur, cur_end; /* the cursor (JSON; empty for short lines) */
    unsigned char shape, msg_esc, cur_esc;
    unsigned char has_tok; /* the message is a common line (tok), read while the line was hot */
    Tok tok;
} Found;

static int bytes_token(const char *s, Py_ssize_t n, Tok *t);

/* The date of the last line decode_short read, and its day number: a dump's lines come in
 * order, so nearly every line has the date of the one before (its digits and checks skipped). */
typedef struct {
    char ymd[10]; /* `2026-09-22`, with `days`, valid when `has` is set */
    long long days;
    int has;
} Day;

/* `2026-09-22T07:31:04.127792+0000 host ident[1234]: message` -> 1 and `out` filled; 0 when the
 * line is not exactly that shape or its time is out of range (the caller keeps it raw for
 * EntryDecoder, which decodes it or names the error). EntryDecoder converts the date-hour with
 * its offset first: both that and the line's time must be in range. */
static int decode_short(const char *s, Py_ssize_t n, Found *out, Day *day) {
    long long Y, M, D, h, mi, sec, frac = 0, pid = 0, off = 0;
    Py_ssize_t i = 19;
    if (n < 21 || s[10] != 'T' || !digits(s + 11, 2, &h) || s[13] != ':' ||
        !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &sec) || h > 23 ||
        mi > 59 || sec > 60)
        return 0;
    if (!day->has || memcmp(s, day->ymd, sizeof day->ymd) != 0) {
        day->has = 0;
        if (!digits(s, 4, &Y) || s[4] != '-' || !digits(s + 5, 2, &M) || s[7] != '-' ||
            !digits(s + 8, 2, &D) || Y < 1970 || M < 1 || M > 12 || D < 1 ||
            D > days_in_month(Y, M))
            return 0;
        memcpy(day->ymd, s, sizeof day->ymd);
        day->days = days_from_civil(Y, M, D), day->has = 1;
    }
    if (s[i] == '.') {
        int k = 0;
        i++;
        while (i < n && is_digit(s[i]) && k < 7) frac = frac * 10 + (s[i++] - '0'), k++;
        if (k == 0 || k > 6) return 0;
        for (; k < 6; k++) frac *= 10;
    }
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        long long oh, om;
        int sign = s[i] == '-' ? -1 : 1;
        if (i + 5 > n || !digits(s + i + 1, 2, &oh)) return 0;
        i += 3;
        if (s[i] == ':') i++;
        if (i + 2 > n || !digits(s + i, 2, &om) || oh > 23 || om > 59) return 0;
        i += 2;
        off = sign * (oh * 3600 + om * 60);
    } else if (i < n && s[i] == 'Z') {
        i++;
    }
    if (i >= n || s[i] != ' ') return 0;
    i++;
    Py_ssize_t host = i; /* \S+ then one space */
    while (i < n && !is_ws(s[i])) i++;
    if (i == host || i >= n || s[i] != ' ') return 0;
    i++;
    Py_ssize_t ident = i; /* identifier chars, then `[pid]` or nothing, then `:` */
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-' || s[i] == '.' ||
                     s[i] == '@' || s[i] == '/'))
        i++;
    if (i == ident || i >= n) return 0;
    if (s[i] == '[') {
        Py_ssize_t p = ++i;
        while (i < n && is_digit(s[i])) i++;
        if (i == p || i >= n || s[i] != ']') return 0;
        if (i - p <= MAX_PID_DIGITS) digits(s + p, (int)(i - p), &pid); /* else 0, as there */
        i++;
    }
    if (i >= n || s[i] != ':') return 0;
    i++;
    if (i < n && s[i] == ' ') i++;
    Py_ssize_t end = n;
    if (end > i && s[end - 1] == '\r') end--;
    long long hour_s = day->days * 86400 + h * 3600 - off; /* Y <= 9999: fits */
    long long time_us = (hour_s + mi * 60 + sec) * 1000000 + frac;
    if (hour_s < 0 || time_us > MAX_TIME_US) return 0;
    out->time_us = time_us, out->pid = pid, out->msg = i, out->end = end;
    out->cur = out->cur_end = 0, out->shape = SHAPE_SHORT, out->msg_esc = out->cur_esc = 0;
    return 1;
}

/* -- the usual journal JSON entry -- */

/* Bytes that end a run of plain string content: `"`, `\`, control characters (which json
 * refuses in a string) and non-ASCII (validated as UTF-8). */
static unsigned char json_stop[256];

static void init_json_stop(void) {
    for (int c = 0; c < 256; c++) json_stop[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
}

/* From s[i], the first byte (before n) that ends a run of plain string content, or n. */
static Py_ssize_t json_plain_run(const char *s, Py_ssize_t i, Py_ssize_t n) {
#if defined(__SSE2__)
    /* 16 bytes at a time: `"`, `\`, and (as signed bytes) < 0x20, which takes in >= 0x80 */
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote),
                                                 _mm_cmpeq_epi8(v, backslash)),
                                    _mm_cmplt_epi8(v, space));
        int mask = _mm_movemask_epi8(stop);
        if (mask) return i + __builtin_ctz((unsigned)mask);
    }
#endif
    while (i < n && !json_stop[(unsigned char)s[i]]) i++;
    return i;
}

static int is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* One UTF-8 sequence at s[i] (a byte >= 0x80), strictly as Python's UTF-8 codec takes it (no
 * overlong forms, no surrogates, nothing above U+10FFFF): its length, or 0 when invalid. */
static int utf8_len(const unsigned char *s, Py_ssize_t avail) {
    unsigned char c = s[0];
    int k;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (avail < k || s[1] < lo || s[1] > hi) return 0;
    for (int j = 2; j < k; j++)
        if (s[j] < 0x80 || s[j] > 0xBF) return 0;
    return k;
}

/* The bytes of a line that end a run of plain string content, as a bitmap (bit i of word
 * i / 64 for s[i]; none past n): built once a line, so finding a string's end is a bit scan,
 * not a search per string whose end a branch must guess. Lines up to BITMAP_BYTES use one. */
#define BITMAP_BYTES 8192
static void stop_bitmap(const char *s, Py_ssize_t n, uint64_t *bm) {
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    for (; i + 64 <= n; i += 64) {
        uint64_t word = 0;
        for (int k = 0; k < 4; k++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(s + i + 16 * k));
            __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote),
                                                     _mm_cmpeq_epi8(v, backslash)),
                                        _mm_cmplt_epi8(v, space));
            word |= (uint64_t)(unsigned)_mm_movemask_epi8(stop) << (16 * k);
        }
        bm[i >> 6] = word;
    }
#endif
    if (i < n) {
        uint64_t word = 0;
        for (Py_ssize_t j = i; j < n; j++)
            word |= (uint64_t)json_stop[(unsigned char)s[j]] << (j - i);
        bm[i >> 6] = word;
    }
}

/* The first stop byte at or after s[i] by the bitmap, or n. */
static inline Py_ssize_t next_stop(const uint64_t *bm, Py_ssize_t i, Py_ssize_t n) {
    if (i >= n) return n;
    Py_ssize_t w = i >> 6;
    uint64_t bits = bm[w] & (~0ULL << (i & 63));
    while (bits == 0) {
        if (++w << 6 >= n) return n;
        bits = bm[w];
    }
    return (w << 6) + __builtin_ctzll(bits);
}

/* A JSON string whose opening quote is at s[*at - 1]: 1 with *at just after its closing quote
 * and *esc set when it holds an escape; 0 when json would refuse it, or read it to a string
 * holding a lone surrogate (which is handed back rather than made here). */
static int json_string(const char *s, Py_ssize_t n, const uint64_t *bm, Py_ssize_t *at,
                       unsigned char *esc) {
    Py_ssize_t i = *at;
    *esc = 0;
    for (;;) {
        i = bm != NULL ? next_stop(bm, i, n) : json_plain_run(s, i, n);
        if (i >= n) return 0;
        unsigned char c = (unsigned char)s[i];
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c >= 0x80) {
            int k = utf8_len((const unsigned char *)s + i, n - i);
            if (k == 0) return 0;
            i += k;
            continue;
        }
        /* a backslash */
        *esc = 1;
        if (i + 1 >= n) return 0;
        switch (s[i + 1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            i += 2;
            continue;
        case 'u': {
            unsigned u, u2;
            if (i + 6 > n || !hex4(s + i + 2, &u)) return 0;
            i += 6;
            if (u >= 0xDC00 && u <= 0xDFFF) return 0; /* a lone low surrogate */
            if (u >= 0xD800 && u <= 0xDBFF) {         /* must be a pair */
                if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s + i + 2, &u2) ||
                    u2 < 0xDC00 || u2 > 0xDFFF)
                    return 0;
                i += 6;
            }
            continue;
        }
        default:
            return 0;
        }
    }
    *at = i + 1;
    return 1;
}

/* The fields of a journal entry the LogLine is made of. */
enum { F_TIME, F_PID, F_CURSOR, F_MESSAGE, F_N };
#define FIELD(name) {name, sizeof name - 1}
static const struct {
    const char *name;
    Py_ssize_t len;
} json_fields[F_N] = {FIELD("__REALTIME_TIMESTAMP"), FIELD("_PID"), FIELD("__CURSOR"),
                      FIELD("MESSAGE")};

static int json_field(const char *s, Py_ssize_t n) {
    for (int f = 0; f < F_N; f++) /* (the length and the last byte first: no call for most) */
        if (n == json_fields[f].len && s[n - 1] == json_fields[f].name[n - 1] &&
            memcmp(s, json_fields[f].name, (size_t)n) == 0)
            return f;
    return -1;
}

/* `{"__CURSOR": "s=...", "__REALTIME_TIMESTAMP": "1790062375127792", ..., "_PID": "4242",
 * "MESSAGE": "slot ..."}` -> 1 and `out` filled: one flat object (json's whitespace allowed)
 * of string values only, valid UTF-8, with each of the four fields once, the time 1 to 18
 * digits and in range, the PID 1 to 10 digits, no key and neither number escaped. 0 for
 * anything else (the caller hands it back to EntryDecoder). Needs no GIL. */
static int decode_json(const char *s, Py_ssize_t n, Found *out) {
    uint64_t bitmap[BITMAP_BYTES / 64];
    const uint64_t *bm = n <= BITMAP_BYTES ? (stop_bitmap(s, n, bitmap), bitmap) : NULL;
    Py_ssize_t i = 1, start[F_N] = {0}, stop[F_N] = {0};
    unsigned char escaped[F_N] = {0}, seen[F_N] = {0};
    if (n < 2 || s[0] != '{') return 0;
    for (;;) {
        while (i < n && is_json_ws(s[i])) i++;
        if (i >= n || s[i] != '"') return 0; /* (an empty object lacks the fields) */
        Py_ssize_t key = ++i;
        unsigned char esc;
        if (!json_string(s, n, bm, &i, &esc) || esc) return 0; /* an escaped key: hand back */
        int f = json_field(s + key, i - 1 - key);
        while (i < n && is_json_ws(s[i])) i++;
        if (i >= n || s[i] != ':') return 0;
        i++;
        while (i < n && is_json_ws(s[i])) i++;
        if (i >= n || s[i] != '"') return 0; /* a value that is no string */
        Py_ssize_t value = ++i;
        if (!json_string(s, n, bm, &i, &esc)) return 0;
        if (f >= 0) {
            if (seen[f]) return 0; /* a duplicate: json keeps the last; hand back */
            seen[f] = 1, start[f] = value, stop[f] = i - 1, escaped[f] = esc;
        }
        while (i < n && is_json_ws(s[i])) i++;
        if (i >= n) return 0;
        if (s[i] == '}') break;
        if (s[i] != ',') return 0;
        i++;
    }
    i++;
    while (i < n && is_json_ws(s[i])) i++;
    if (i != n) return 0; /* trailing bytes */
    for (int f = 0; f < F_N; f++)
        if (!seen[f]) return 0;
    Py_ssize_t tn = stop[F_TIME] - start[F_TIME], pn = stop[F_PID] - start[F_PID];
    long long t, pid;
    if (escaped[F_TIME] || escaped[F_PID] || tn < 1 || tn > 18 || pn < 1 ||
        pn > MAX_PID_DIGITS || !digits(s + start[F_TIME], (int)tn, &t) ||
        !digits(s + start[F_PID], (int)pn, &pid) || t > MAX_TIME_US)
        return 0;
    out->time_us = t, out->pid = pid;
    out->msg = start[F_MESSAGE], out->end = stop[F_MESSAGE], out->msg_esc = escaped[F_MESSAGE];
    out->cur = start[F_CURSOR], out->cur_end = stop[F_CURSOR], out->cur_esc = escaped[F_CURSOR];
    out->shape = SHAPE_JSON;
    return 1;
}

/* A JSON string's content s[0:n] (validated by json_string) as json decodes it. */
static PyObject *json_text(const char *s, Py_ssize_t n, int esc) {
    if (!esc) return PyUnicode_DecodeUTF8(s, n, NULL);
    char *buf = PyMem_Malloc(n > 0 ? (size_t)n : 1); /* an escape never decodes longer */
    if (buf == NULL) return PyErr_NoMemory();
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n;) {
        if (s[i] != '\\') {
            buf[o++] = s[i++];
            continue;
        }
        char c = s[i + 1];
        i += 2;
        switch (c) {
        case 'b': buf[o++] = '\b'; continue;
        case 'f': buf[o++] = '\f'; continue;
        case 'n': buf[o++] = '\n'; continue;
        case 'r': buf[o++] = '\r'; continue;
        case 't': buf[o++] = '\t'; continue;
        case 'u': break;
        default: buf[o++] = c; continue; /* " \ / */
        }
        unsigned u, u2;
        hex4(s + i, &u);
        i += 4;
        if (u >= 0xD800 && u <= 0xDBFF) { /* the pair json_string checked */
            hex4(s + i + 2, &u2);
            i += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (u2 - 0xDC00);
        }
        if (u < 0x80) {
            buf[o++] = (char)u;
        } else if (u < 0x800) {
            buf[o++] = (char)(0xC0 | u >> 6), buf[o++] = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            buf[o++] = (char)(0xE0 | u >> 12), buf[o++] = (char)(0x80 | (u >> 6 & 0x3F));
            buf[o++] = (char)(0x80 | (u & 0x3F));
        } else {
            buf[o++] = (char)(0xF0 | u >> 18), buf[o++] = (char)(0x80 | (u >> 12 & 0x3F));
            buf[o++] = (char)(0x80 | (u >> 6 & 0x3F)), buf[o++] = (char)(0x80 | (u & 0x3F));
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8(buf, o, NULL);
    PyMem_Free(buf);
    return text;
}

/* A LogLine(node, time_us, cursor, pid, message) of what `d` found in line `s`, or NULL with an
 * error set; `line_type` is a tuple subclass of 5 fields (a NamedTuple, whose __new__ does no
 * more than this). Lines of one server share one PID object. */
static PyObject *log_line(PyTypeObject *line_type, PyObject *node, PyObject *empty,
                          PyObject **last_pid, long long *last_pid_value, const char *s,
                          const Found *d) {
    PyObject *t = PyLong_FromLongLong(d->time_us), *pid = NULL, *cursor, *msg;
    if (*last_pid != NULL && *last_pid_value == d->pid) {
        pid = Py_NewRef(*last_pid);
    } else if ((pid = PyLong_FromLongLong(d->pid)) != NULL) {
        Py_XSETREF(*last_pid, Py_NewRef(pid));
        *last_pid_value = d->pid;
    }
    if (d->shape == SHAPE_JSON) {
        cursor = json_text(s + d->cur, d->cur_end - d->cur, d->cur_esc);
        msg = json_text(s + d->msg, d->end - d->msg, d->msg_esc);
    } else {
        cursor = Py_NewRef(empty);
        msg = PyUnicode_DecodeUTF8(s + d->msg, d->end - d->msg, "replace");
    }
    PyObject *line = NULL;
    if (t == NULL || pid == NULL || cursor == NULL || msg == NULL ||
        (line = line_type->tp_alloc(line_type, L_N)) == NULL) {
        Py_XDECREF(t), Py_XDECREF(pid), Py_XDECREF(cursor), Py_XDECREF(msg);
        return NULL;
    }
    Py_INCREF(node);
    PyTuple_SET_ITEM(line, L_NODE, node), PyTuple_SET_ITEM(line, L_TIME_US, t);
    PyTuple_SET_ITEM(line, L_CURSOR, cursor), PyTuple_SET_ITEM(line, L_PID, pid);
    PyTuple_SET_ITEM(line, L_MESSAGE, msg);
    return line;
}

/* ---- blocks: a chunk's big arrays, kept for the next chunk ------------------------------- */

/* A chunk's arrays (its Lines' items) take megabytes. Fresh from the system
 * each time, every page of them faults in zeroed (the daemon has glibc map every block of 128 KiB
 * or more: ingest.memory), which cost a third of the reading path. So the last BLOCKS_KEPT
 * blocks freed of at most BLOCK_MOST bytes are kept for the next chunks: the memory kept is
 * bounded, and a steady stream of chunks reuses the same pages. Taken and given back with the
 * GIL held (a kept block is shared state); the blocks themselves are raw memory, usable
 * without it. */
#define BLOCKS_KEPT 4
#define BLOCK_MOST ((size_t)8 << 20)
#define BLOCK_LEAST ((size_t)4096)
static void *kept[BLOCKS_KEPT];
static size_t kept_size[BLOCKS_KEPT];

/* A block of at least `need` bytes (`*got` its size), or NULL when memory is out. */
static void *block_take(size_t need, size_t *got) {
    int best = -1;
    for (int k = 0; k < BLOCKS_KEPT; k++)
        if (kept[k] != NULL && kept_size[k] >= need && kept_size[k] / 4 <= need + BLOCK_LEAST &&
            (best < 0 || kept_size[k] < kept_size[best]))
            best = k; /* the smallest that fits, and not four times too big */
    if (best >= 0) {
        void *p = kept[best];
        *got = kept_size[best], kept[best] = NULL;
        return p;
    }
    *got = need < BLOCK_LEAST ? BLOCK_LEAST : need;
    return PyMem_RawMalloc(*got);
}

/* A block back: kept (in place of the smallest kept, if smaller) or freed. */
static void block_give(void *p, size_t size) {
    if (p == NULL) return;
    if (size <= BLOCK_MOST) {
        int slot = -1;
        for (int k = 0; k < BLOCKS_KEPT && slot < 0; k++)
            if (kept[k] == NULL) slot = k;
        if (slot < 0)
            for (int k = 0; k < BLOCKS_KEPT; k++)
                if (kept_size[k] < size && (slot < 0 || kept_size[k] < kept_size[slot])) slot = k;
        if (slot >= 0) {
            PyMem_RawFree(kept[slot]);
            kept[slot] = p, kept_size[slot] = size;
            return;
        }
    }
    PyMem_RawFree(p);
}

/* ---- Lines: a chunk's keyword lines, decoded but not yet made into LogLines ---------------- */

/* One line of a Lines: its LogLine when made (joined from a list, made on access, or an escaped
 * JSON entry made by scan), else where it is in a buffer the Lines holds and what scan found. */
typedef struct {
    PyObject *obj;
    const char *line;
    Found d;
} Item;

/* A sequence of LogLines whose items are made only when asked for: `feed` reads the common
 * lines straight from the bytes, so a run of them costs no LogLine at all. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Item *items;
    size_t items_size; /* the bytes of `items` (a block: see block_take) */
    Py_buffer view; /* the bytes the items point into (scan), when has_view */
    int has_view;
    PyObject *owners; /* the joined Lines whose buffers the items point into (join), or NULL */
    int made; /* an item may hold its LogLine (obj): else dealloc skips the items */
    PyObject *node, *line_type, *empty, *last_pid;
    long long last_pid_value;
} Lines;

static PyTypeObject LinesType;

static void lines_dealloc(Lines *self) {
    for (Py_ssize_t j = 0; self->made && j < self->n; j++) Py_XDECREF(self->items[j].obj);
    block_give(self->items, self->items_size);
    if (self->has_view) PyBuffer_Release(&self->view);
    Py_XDECREF(self->owners), Py_XDECREF(self->node), Py_XDECREF(self->line_type);
    Py_XDECREF(self->empty), Py_XDECREF(self->last_pid);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Lines *lines_new(Py_ssize_t n, PyObject *node, PyObject *line_type, PyObject *empty) {
    Lines *self = PyObject_New(Lines, &LinesType);
    if (self == NULL) return NULL;
    self->n = 0, self->has_view = 0, self->made = 0, self->owners = NULL, self->last_pid = NULL;
    self->last_pid_value = 0;
    self->node = Py_XNewRef(node), self->line_type = Py_XNewRef(line_type);
    self->empty = Py_XNewRef(empty);
    self->items = NULL, self->items_size = 0;
    if (n < 0) return self; /* (the caller sets its items) */
    self->items = block_take((size_t)(n > 0 ? n : 1) * sizeof(Item), &self->items_size);
    if (self->items == NULL) {
        Py_DECREF(self);
        return (Lines *)PyErr_NoMemory();
    }
    return self;
}

static Py_ssize_t lines_len(Lines *self) { return self->n; }

/* Item j as its LogLine (a new reference), made once. */
static PyObject *lines_obj(Lines *self, Py_ssize_t j) {
    Item *it = &self->items[j];
    if (it->obj == NULL) {
        self->made = 1;
        it->obj = log_line((PyTypeObject *)self->line_type, self->node, self->empty,
                           &self->last_pid, &self->last_pid_value, it->line, &it->d);
        if (it->obj == NULL) return NULL;
    }
    return Py_NewRef(it->obj);
}

static PyObject *lines_item(Lines *self, Py_ssize_t j) {
    if (j < 0 || j >= self->n) {
        PyErr_SetString(PyExc_IndexError, "Lines index out of range");
        return NULL;
    }
    return lines_obj(self, j);
}

/* lines[i] or lines[a:b:c] (a tuple) */
static PyObject *lines_subscript(Lines *self, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t j = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (j == -1 && PyErr_Occurred()) return NULL;
        return lines_item(self, j < 0 ? j + self->n : j);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "Lines indices must be integers or slices, not %.100s",
                     Py_TYPE(key)->tp_name);
        return NULL;
    }
    Py_ssize_t a, b, step;
    if (PySlice_Unpack(key, &a, &b, &step) < 0) return NULL;
    Py_ssize_t k = PySlice_AdjustIndices(self->n, &a, &b, step);
    PyObject *t = PyTuple_New(k);
    for (Py_ssize_t j = 0; t != NULL && j < k; j++) {
        PyObject *v = lines_obj(self, a + j * step);
        if (v == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, j, v);
    }
    return t;
}

static PyObject *lines_richcompare(PyObject *self, PyObject *other, int op) {
    if ((op != Py_EQ && op != Py_NE) ||
        !(PyTuple_Check(other) || PyList_Check(other) || Py_TYPE(other) == &LinesType))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *a = PySequence_Tuple(self), *b = PySequence_Tuple(other), *r = NULL;
    if (a != NULL && b != NULL) r = PyObject_RichCompare(a, b, op);
    Py_XDECREF(a), Py_XDECREF(b);
    return r;
}

static PyObject *lines_repr(Lines *self) {
    return PyUnicode_FromFormat("<Lines of %zd>", self->n);
}

static PySequenceMethods lines_as_sequence = {
    .sq_length = (lenfunc)lines_len,
    .sq_item = (ssizeargfunc)lines_item,
};

static PyMappingMethods lines_as_mapping = {
    .mp_length = (lenfunc)lines_len,
    .mp_subscript = (binaryfunc)lines_subscript,
};

static PyTypeObject LinesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "exporter._speedups.Lines",
    .tp_basicsize = sizeof(Lines),
    .tp_dealloc = (destructor)lines_dealloc,
    .tp_repr = (reprfunc)lines_repr,
    .tp_as_sequence = &lines_as_sequence,
    .tp_as_mapping = &lines_as_mapping,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_richcompare = lines_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A sequence of LogLines, each made when first asked for (see scan).",
};

/* join(parts) -> the LogLines of every part, in order: one Lines when a part is a Lines (the
 * parts kept alive by it), else a tuple. */
static PyObject *join(PyObject *self, PyObject *arg) {
    PyObject *parts = PySequence_Tuple(arg);
    if (parts == NULL) return NULL;
    Py_ssize_t n = 0, np = PyTuple_GET_SIZE(parts);
    Lines *first = NULL, *out = NULL;
    for (Py_ssize_t k = 0; k < np; k++) {
        PyObject *p = PyTuple_GET_ITEM(parts, k);
        if (Py_TYPE(p) == &LinesType && first == NULL) first = (Lines *)p;
        Py_ssize_t len = PyObject_Length(p);
        if (len < 0) goto fail;
        n += len;
    }
    if (first == NULL) { /* only LogLines made already */
        PyObject *all = PyList_New(0);
        for (Py_ssize_t k = 0; all != NULL && k < np; k++) {
            PyObject *r = PySequence_InPlaceConcat(all, PyTuple_GET_ITEM(parts, k));
            if (r == NULL) Py_CLEAR(all);
            Py_XDECREF(r);
        }
        Py_DECREF(parts);
        if (all == NULL) return NULL;
        PyObject *t = PyList_AsTuple(all);
        Py_DECREF(all);
        return t;
    }
    if ((out = lines_new(n, first->node, first->line_type, first->empty)) == NULL) goto fail;
    for (Py_ssize_t k = 0; k < np; k++) {
        PyObject *p = PyTuple_GET_ITEM(parts, k);
        if (Py_TYPE(p) == &LinesType) {
            Lines *l = (Lines *)p;
            out->made |= l->made;
            for (Py_ssize_t j = 0; j < l->n && out->n < n; j++) {
                out->items[out->n] = l->items[j];
                Py_XINCREF(l->items[j].obj);
                out->n++;
            }
            continue;
        }
        PyObject *seq = PySequence_Fast(p, "join() takes sequences of LogLines");
        if (seq == NULL) goto fail;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seq) && out->n < n; j++) {
            Item *it = &out->items[out->n++];
            memset(it, 0, sizeof *it);
            it->obj = Py_NewRef(PySequence_Fast_GET_ITEM(seq, j));
            out->made = 1;
        }
        Py_DECREF(seq);
    }
    out->owners = parts; /* the Lines parts hold the buffers the items point into */
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    Py_DECREF(parts);
    return NULL;
}

/* Newlines in a buffer: 16 bytes a step, each match subtracting -1 from a byte counter that is
 * summed (psadbw) before it can wrap. */
static Py_ssize_t count_newlines(const char *s, Py_ssize_t n) {
    Py_ssize_t count = 0, i = 0;
#if defined(__SSE2__)
    const __m128i nl = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
    while (i + 16 <= n) {
        __m128i acc = _mm_setzero_si128();
        for (int k = 0; k < 255 && i + 16 <= n; k++, i += 16)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + i)), nl));
        __m128i sums = _mm_sad_epu8(acc, zero);
        count += _mm_cvtsi128_si32(sums) + _mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
    }
#endif
    for (; i < n; i++) count += s[i] == '\n';
    return count;
}

/* A keyword search's tables, made once for a tuple of keywords (scan keeps the last one): the
 * keywords, the Wu-Manber skip table on two-byte blocks, and for each byte the keywords it may
 * begin (first) or go on (second) with, as bit masks, so a window is checked against only the
 * keywords its first two bytes allow. */
typedef struct {
    PyObject *keywords; /* the tuple of bytes the tables are made of (a strong reference) */
    const char *kws[64];
    Py_ssize_t lens[64], m; /* m: the shortest keyword's length */
    int nkw;
    uint64_t first[256], second[256];
    unsigned char shift[65536];
    int tok_keywords; /* every common slot line (bytes_token) holds one of the keywords */
} Search;

/* The texts every line bytes_token reads holds one of (ascii_token: a header or timing line's
 * `print_timing:`, a launch line's `launch_slot_:`, a release line's `stop processing`). */
static const char *const tok_texts[] = {"print_timing:", "launch_slot_:", "stop processing"};

static void search_free(PyObject *capsule) {
    Search *t = PyCapsule_GetPointer(capsule, "smllm.search");
    if (t == NULL) return;
    Py_XDECREF(t->keywords);
    PyMem_RawFree(t);
}

static PyObject *last_search; /* a capsule of the last Search made (the GIL guards it) */

/* The Search of `keywords` (a new reference to its capsule): the last one when the same tuple,
 * else made (ValueError for keywords that are not 1 to 64 bytes of 2 or more, no newline). */
static PyObject *search_of(PyObject *keywords) {
    if (last_search != NULL) {
        Search *t = PyCapsule_GetPointer(last_search, "smllm.search");
        if (t != NULL && t->keywords == keywords) return Py_NewRef(last_search);
    }
    int nkw = (int)PyTuple_GET_SIZE(keywords);
    if (nkw < 1 || nkw > 64) {
        PyErr_SetString(PyExc_ValueError, "scan() takes 1 to 64 keywords");
        return NULL;
    }
    Search *t = PyMem_RawCalloc(1, sizeof *t);
    if (t == NULL) return PyErr_NoMemory();
    t->m = PY_SSIZE_T_MAX, t->nkw = nkw;
    for (int k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(keywords, k);
        if (!PyBytes_Check(kw) || PyBytes_GET_SIZE(kw) < 2 ||
            memchr(PyBytes_AS_STRING(kw), '\n', (size_t)PyBytes_GET_SIZE(kw))) {
            PyMem_RawFree(t);
            PyErr_SetString(PyExc_ValueError, "keywords must be bytes of 2 or more, no newline");
            return NULL;
        }
        t->kws[k] = PyBytes_AS_STRING(kw), t->lens[k] = PyBytes_GET_SIZE(kw);
        if (t->lens[k] < t->m) t->m = t->lens[k];
        t->first[(unsigned char)t->kws[k][0]] |= (uint64_t)1 << k;
        t->second[(unsigned char)t->kws[k][1]] |= (uint64_t)1 << k;
    }
    Py_ssize_t m = t->m;
    memset(t->shift, m - 1 > 255 ? 255 : (int)(m - 1), sizeof t->shift);
    for (int k = 0; k < nkw; k++)
        for (Py_ssize_t j = 1; j < m; j++) {
            unsigned h = (unsigned char)t->kws[k][j - 1] << 8 | (unsigned char)t->kws[k][j];
            if (m - 1 - j < t->shift[h]) t->shift[h] = (unsigned char)(m - 1 - j);
        }
    t->tok_keywords = 1;
    for (size_t j = 0; j < sizeof tok_texts / sizeof *tok_texts; j++) {
        const char *text = tok_texts[j];
        int held = 0;
        for (int k = 0; k < nkw && !held; k++)
            held = memmem(text, strlen(text), t->kws[k], (size_t)t->lens[k]) != NULL;
        t->tok_keywords &= held;
    }
    t->keywords = Py_NewRef(keywords); /* (the kws point into its bytes) */
    PyObject *capsule = PyCapsule_New(t, "smllm.search", search_free);
    if (capsule == NULL) {
        Py_DECREF(t->keywords);
        PyMem_RawFree(t);
        return NULL;
    }
    Py_XSETREF(last_search, Py_NewRef(capsule));
    return capsule;
}

/* One part of a chunk, as scan reads it: its keyword lines, each decoded into an item. */
typedef struct {
    const char *s;
    Py_ssize_t n;
    const Search *t;
    long long max_line, since_us;
    Item *items; /* a raw block of items_size bytes (grown as needed) */
    size_t items_size;
    Py_ssize_t count, newlines, raw; /* count -1: out of memory */
    Py_ssize_t escaped; /* JSON lines with an escape in the message or cursor */
} Part;

/* The line s[0:len] decoded into `it` (its time, PID, message and common token), or left for
 * the Python decoder (d.ok 0). */
static void decode_line(const char *line, Py_ssize_t len, long long max_line, Item *it,
                        Day *day) {
    Found *d = &it->d;
    it->obj = NULL, it->line = line, d->len = len;
    d->ok = len <= max_line && (is_digit(line[0])   ? decode_short(line, len, d, day)
                                : line[0] == '{' ? decode_json(line, len, d)
                                                 : 0);
    d->has_tok = d->ok && !(d->shape == SHAPE_JSON && d->msg_esc) &&
                 bytes_token(line + d->msg, d->end - d->msg, &d->tok);
}

/* Where the first keyword begins in s[0:n] searching from `pos` (the end of the first window:
 * the start plus the shortest keyword's length, less one), or -1: a Wu-Manber search
 * (Horspool's skip over all keywords at once, on two-byte blocks), which looks at a small
 * fraction of the bytes where a memmem per keyword would read them all once per keyword. */
static inline __attribute__((always_inline)) Py_ssize_t find_keyword(const Search *t,
                                                                     const char *s,
                                                                     Py_ssize_t pos,
                                                                     Py_ssize_t n) {
    const unsigned char *shift = t->shift;
    const Py_ssize_t m = t->m;
    while (pos < n) {
        unsigned char d = shift[(unsigned char)s[pos - 1] << 8 | (unsigned char)s[pos]];
        if (d) {
            pos += d;
            continue;
        }
        Py_ssize_t w = pos - m + 1;
        uint64_t may = t->first[(unsigned char)s[w]] & t->second[(unsigned char)s[w + 1]];
        while (may) {
            int k = __builtin_ctzll(may);
            may &= may - 1;
            if (w + t->lens[k] <= n && memcmp(s + w, t->kws[k], (size_t)t->lens[k]) == 0)
                return w;
        }
        pos++;
    }
    return -1;
}

/* Reading the next line first costs a decode in vain where it holds no keyword: a JSON entry's,
 * about a microsecond. Each such line costs MISS_COST credit, each line that was worth it (or a
 * keyword line found right after the last one kept) earns one, up to CREDIT_MOST; the next line
 * is read first only with credit left. A busy node's dump (one line in 140 without a keyword)
 * keeps it; a dump where most lines hold none (health checks between requests) spends it, and
 * is searched. */
#define MISS_COST 32
#define CREDIT_MOST 64

/* Every line of the part holding a keyword, in order, in one pass over its bytes, each decoded
 * at once, while it is in the cache. Two ways to the next such line:
 * - search: find_keyword from here, then back to the start of the line it is in;
 * - line by line, while the lines come as common slot lines (nearly every line of a busy
 *   node's dump): the next line decoded first, and kept without a search when its message is
 *   a common slot line, which holds a keyword (Search.tok_keywords); else searched alone (see
 *   MISS_COST for when).
 * Counts the part's newlines too (between the lines found, and one for each of them, whose ends
 * are found anyway). Needs no GIL (a thread's own: see each_part). */
static void *scan_part(void *arg) {
    Part *p = arg;
    const char *s = p->s;
    const Search *t = p->t;
    const Py_ssize_t n = p->n, m = t->m;
    Py_ssize_t count = 0, counted = 0, newlines = 0, raw = 0; /* newlines in s[0:counted] */
    Py_ssize_t cap = (Py_ssize_t)(p->items_size / sizeof(Item));
    int by_line = 0; /* the last line kept was a common slot line: read the next one first */
    int credit = 1;
    Py_ssize_t kept_end = -1; /* where the line after the last one kept begins */
    Day day = {.has = 0};
    while (counted < n) {
        Py_ssize_t start;
        const char *eol;
        if (count == cap) {
            Item *more = PyMem_RawRealloc(p->items, 2 * (size_t)cap * sizeof(Item));
            if (more == NULL) {
                p->count = -1;
                return NULL;
            }
            p->items = more, cap *= 2, p->items_size = (size_t)cap * sizeof(Item);
        }
        Item *it = &p->items[count];
        if (by_line) {
            start = counted;
            eol = memchr(s + start, '\n', (size_t)(n - start));
            Py_ssize_t len = eol == NULL ? n - start : eol - s - start;
            decode_line(s + start, len, p->max_line, it, &day);
            if (!it->d.has_tok && find_keyword(t, s + start, m - 1, len) < 0) {
                by_line = 0; /* a line without a keyword: searched for from the next line */
                credit -= MISS_COST;
                if (eol == NULL) {
                    counted = n;
                    break;
                }
                newlines += 1, counted = eol - s + 1;
                continue;
            }
        } else {
            Py_ssize_t w = find_keyword(t, s, counted + m - 1, n);
            if (w < 0) break;
            const char *nl = memrchr(s + counted, '\n', (size_t)(w - counted));
            start = nl == NULL ? counted : nl - s + 1;
            newlines += count_newlines(s + counted, start - counted);
            eol = memchr(s + w, '\n', (size_t)(n - w));
            decode_line(s + start, eol == NULL ? n - start : eol - s - start, p->max_line, it,
                        &day);
        }
        if ((by_line || start == kept_end) && credit < CREDIT_MOST) credit++;
        by_line = it->d.has_tok && t->tok_keywords && credit > 0;
        if (!it->d.ok) raw++, count++;
        else if (it->d.time_us >= p->since_us) /* (an older line is left out here and now) */
            count++, p->escaped += it->d.shape == SHAPE_JSON && (it->d.msg_esc || it->d.cur_esc);
        if (eol == NULL) {
            counted = n;
            break;
        }
        newlines += 1;
        counted = kept_end = eol - s + 1;
    }
    p->newlines = newlines + count_newlines(s + counted, n - counted);
    p->count = count, p->raw = raw;
    return NULL;
}

/* A tuple subclass laid out as a tuple (a NamedTuple), which tp_alloc can make directly. */
static int is_plain_tuple_type(PyObject *t) {
    if (!PyType_Check(t)) return 0;
    PyTypeObject *type = (PyTypeObject *)t;
    return PyType_IsSubtype(type, &PyTuple_Type) &&
           type->tp_basicsize == PyTuple_Type.tp_basicsize &&
           type->tp_itemsize == PyTuple_Type.tp_itemsize;
}

/* An int argument as a C value, clamped to [lo, hi] (a huge since_us or max_line is no error);
 * 0, or -1 with TypeError for anything but an int. */
static int clamped(PyObject *v, const char *what, long long lo, long long hi, long long *out) {
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = overflow < 0 ? lo : overflow > 0 ? hi : x < lo ? lo : x > hi ? hi : x;
    return 0;
}

/* The arguments scan and read_ahead (`fn`) share, checked: since_us and max_line clamped, the
 * lines' type a NamedTuple, and the keywords' search tables (a new reference in *search, its
 * tables in *t). 0, or -1 with an error set. */
static int scan_args(const char *fn, PyObject *since_arg, PyObject *max_arg,
                     PyTypeObject *line_type, PyObject *keywords, long long *since_us,
                     long long *max_line, PyObject **search, const Search **t) {
    char what[64];
    PyOS_snprintf(what, sizeof what, "%s() since_us", fn);
    if (clamped(since_arg, what, LLONG_MIN, LLONG_MAX, since_us) < 0) return -1;
    PyOS_snprintf(what, sizeof what, "%s() max_line", fn);
    if (clamped(max_arg, what, -1, PY_SSIZE_T_MAX, max_line) < 0) return -1;
    if (!is_plain_tuple_type((PyObject *)line_type)) {
        PyErr_Format(PyExc_TypeError, "%s() needs a NamedTuple type for its lines", fn);
        return -1;
    }
    if ((*search = search_of(keywords)) == NULL) return -1;
    *t = PyCapsule_GetPointer(*search, "smllm.search");
    return *t == NULL ? -1 : 0;
}

/* A chunk this long (512 KiB) or longer is read in two threads, each half on its own (cut at a
 * line end): a backlog is read about twice as fast where a core is free. (A build for a test may
 * set it lower, -DSCAN_SPLIT=2, so that nearly every chunk is split.) */
#ifndef SCAN_SPLIT
#define SCAN_SPLIT ((Py_ssize_t)512 << 10)
#endif

/* Where the first of a chunk's two halves ends: at the newline after its middle, when the chunk
 * is long enough to split (n when not, or when no newline follows the middle). */
static Py_ssize_t first_half(const char *buf, Py_ssize_t n) {
    const char *mid = n >= SCAN_SPLIT ? memchr(buf + n / 2, '\n', (size_t)(n - n / 2)) : NULL;
    return mid == NULL ? n : mid - buf + 1;
}

/* ---- workers: threads kept for the reads ahead and the halves of long chunks --------------- */

/* A thread made for each job starts where its maker runs, and waits there (milliseconds, until
 * the scheduler moves it) while another core idles: a chunk's halves then took as long as the
 * whole. Threads kept from job to job are woken where they last ran, on a core of their own. At
 * most WORKERS_MOST are kept; a job none is free for runs in the thread that has it (a half), or
 * in a thread made for it. Needs no GIL: the pool has a lock of its own. */
#define WORKERS_MOST 16

typedef struct Job {
    void *(*f)(void *);
    void *arg;
    struct Job *next;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int done; /* set under lock once f returned */
} Job;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER;
static Job *queue_head, *queue_tail;
static int workers, idle_workers, queued;

static void job_init(Job *j, void *(*f)(void *), void *arg) {
    j->f = f, j->arg = arg, j->next = NULL, j->done = 0;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cv, NULL);
}

static void job_run(Job *j) {
    j->f(j->arg);
    pthread_mutex_lock(&j->lock);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->lock); /* (after this, nothing of j is touched: its owner frees it) */
}

/* Until j has run (whoever else waits for it too). */
static void job_wait(Job *j) {
    pthread_mutex_lock(&j->lock);
    while (!j->done) pthread_cond_wait(&j->cv, &j->lock);
    pthread_mutex_unlock(&j->lock);
}

static void job_free(Job *j) {
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cv);
}

static void *worker_main(void *unused) {
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        while (queue_head == NULL) {
            idle_workers++;
            pthread_cond_wait(&pool_work, &pool_lock);
            idle_workers--;
        }
        Job *j = queue_head;
        queue_head = j->next, queued--;
        if (queue_head == NULL) queue_tail = NULL;
        pthread_mutex_unlock(&pool_lock);
        job_run(j);
        pthread_mutex_lock(&pool_lock);
    }
    return NULL;
}

/* j handed to a kept thread (one made now if none is free and fewer than WORKERS_MOST are
 * kept): 1, or 0 when there is none (then j is the caller's to run). */
static int job_submit(Job *j) {
    pthread_mutex_lock(&pool_lock);
    int ok = idle_workers > queued;
    if (!ok && workers < WORKERS_MOST) {
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            ok = pthread_create(&t, &attr, worker_main, NULL) == 0;
            pthread_attr_destroy(&attr);
        }
        workers += ok;
    }
    if (ok) {
        if (queue_tail != NULL) queue_tail->next = j;
        else queue_head = j;
        queue_tail = j, queued++;
        pthread_cond_signal(&pool_work);
    }
    pthread_mutex_unlock(&pool_lock);
    return ok;
}

/* f on each of the `np` parts (1 or 2), the first on a kept thread (in this one when none is
 * free). Needs no GIL. */
static void each_part(void *(*f)(void *), Part *parts, int np) {
    Job half;
    job_init(&half, f, &parts[0]);
    int handed = np > 1 && job_submit(&half);
    for (int k = handed; k < np; k++) f(&parts[k]);
    if (handed) job_wait(&half);
    job_free(&half);
}

/* scan's answer for the parts read (with the GIL): (lines, newlines, raw). Gives back the parts'
 * blocks, and takes `data` (held by the Lines answered, else released). */
static PyObject *scan_answer(Part *parts, int np, Py_buffer *data, PyObject *node,
                             PyTypeObject *line_type) {
    PyObject *out = NULL, *lines = NULL, *empty = NULL, *last_pid = NULL;
    Lines *l = NULL; /* every keyword line, decoded where it is of a usual shape */
    long long last_pid_value = 0;
    Py_ssize_t count = 0, newlines = 0, raw = 0, escaped = 0;
    if ((empty = PyUnicode_New(0, 0)) == NULL) goto fail;
    for (int k = 0; k < np; k++) {
        if (parts[k].count < 0) {
            PyErr_NoMemory();
            goto fail;
        }
        count += parts[k].count, newlines += parts[k].newlines, raw += parts[k].raw;
        escaped += parts[k].escaped;
    }
    if (np == 1) { /* the Lines takes the part's items as they are */
        if ((l = lines_new(-1, node, (PyObject *)line_type, empty)) == NULL) goto fail;
        l->items = parts[0].items, l->items_size = parts[0].items_size;
        parts[0].items = NULL;
    } else {
        if ((l = lines_new(count, node, (PyObject *)line_type, empty)) == NULL) goto fail;
        memcpy(l->items, parts[0].items, (size_t)parts[0].count * sizeof(Item));
        memcpy(l->items + parts[0].count, parts[1].items, (size_t)parts[1].count * sizeof(Item));
    }
    Item *items = l->items;
    l->n = count; /* (every obj is set: the Lines owns them now) */
    for (Py_ssize_t j = 0; j < count && raw == 0 && escaped > 0; j++) {
        Item *it = &items[j];
        if (it->d.shape == SHAPE_JSON && (it->d.msg_esc || it->d.cur_esc)) {
            /* made now: should the decoder refuse it after all, every line is handed back */
            l->made = 1;
            it->obj = log_line(line_type, node, empty, &l->last_pid, &l->last_pid_value,
                               it->line, &it->d);
            if (it->obj == NULL) {
                if (PyErr_ExceptionMatches(PyExc_MemoryError)) goto fail;
                PyErr_Clear();
                raw = 1;
            }
        }
    }
    if (raw == 0) { /* every line decoded (the usual case): the Lines, holding the bytes */
        if (count > 0) { /* the items point into the bytes: the Lines holds them */
            l->view = *data, l->has_view = 1;
            data->obj = NULL, data->buf = NULL;
        }
        out = Py_BuildValue("(Nnn)", (PyObject *)l, newlines, (Py_ssize_t)0);
        l = NULL;
        goto fail; /* (the common exit) */
    }
    raw = 0;
    lines = PyList_New(0);
    if (lines == NULL) goto fail;
    for (Py_ssize_t j = 0; j < count; j++) {
        const Item *it = &items[j];
        const Found *d = &it->d;
        PyObject *item = NULL;
        if (d->ok) { /* (none older than since_us: left out already) */
            item = log_line(line_type, node, empty, &last_pid, &last_pid_value, it->line, d);
            if (item == NULL && !PyErr_ExceptionMatches(PyExc_MemoryError))
                PyErr_Clear(); /* (validated, so never) the decoder's to judge: raw */
            else if (item == NULL)
                goto fail;
        }
        if (item == NULL) {
            item = PyBytes_FromStringAndSize(it->line, d->len);
            raw++;
        }
        if (item == NULL) goto fail;
        int bad = PyList_Append(lines, item);
        Py_DECREF(item);
        if (bad) goto fail;
    }
    out = Py_BuildValue("(Nnn)", lines, newlines, raw);
    lines = NULL;
fail:
    Py_XDECREF(lines);
    Py_XDECREF(l);
    Py_XDECREF(empty);
    Py_XDECREF(last_pid);
    for (int k = 0; k < np; k++) {
        block_give(parts[k].items, parts[k].items_size);
        parts[k].items = NULL;
    }
    if (data->obj != NULL) PyBuffer_Release(data);
    return out;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *keywords, *node, *since_arg, *max_arg, *out = NULL, *search = NULL;
    long long since_us, max_line;
    PyTypeObject *line_type;
    Part parts[2];
    int np = 0;
    if (!PyArg_ParseTuple(args, "y*O!UOO!O:scan", &data, &PyTuple_Type, &keywords, &node,
                          &since_arg, &PyType_Type, &line_type, &max_arg))
        return NULL;
    const Search *t;
    if (scan_args("scan", since_arg, max_arg, line_type, keywords, &since_us, &max_line, &search,
                  &t) < 0)
        goto fail;
    const char *buf = data.buf;
    Py_ssize_t n = data.len, cut = first_half(buf, n); /* (the parts: one, or two halves) */
    for (Py_ssize_t from = 0; from < n || np == 0; from = cut, cut = n) {
        Part *p = &parts[np++];
        memset(p, 0, sizeof *p);
        p->s = buf + from, p->n = cut - from, p->t = t;
        p->max_line = max_line, p->since_us = since_us;
        /* (room for a line in 200 bytes: more is grown into) */
        p->items = block_take(((size_t)p->n / 200 + 16) * sizeof(Item), &p->items_size);
        if (p->items == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    /* Nothing changes the buffer meanwhile: a bytes object cannot change, and a file source
     * reuses its bytearray only once nothing holds it. So it is read in parallel. */
    Py_BEGIN_ALLOW_THREADS
    each_part(scan_part, parts, np);
    Py_END_ALLOW_THREADS
    out = scan_answer(parts, np, &data, node, line_type);
    np = 0; /* (the answer gave back the parts' blocks, and took or released the bytes) */
fail:
    Py_XDECREF(search);
    for (int k = 0; k < np; k++) block_give(parts[k].items, parts[k].items_size);
    if (data.obj != NULL) PyBuffer_Release(&data);
    return out;
}

/* ---- Reading: a file's next bytes, read and scanned in a thread of its own ---------------- */

/* A Reading reads a regular file's next bytes into a buffer and scans their whole lines, in a
 * thread that never takes the GIL, while its caller applies what the last one found; `result`
 * answers as scan does. (In a thread that holds the GIL only to start it and to take its answer,
 * a backlog's reading no longer waits for the GIL between its read and its scan.) */
#define READING_TAIL_MOST 65536

typedef struct {
    PyObject_HEAD
    Job job;     /* the reading, on a kept thread (see job_submit) */
    int running; /* the job was handed over, and not yet waited for */
    int answered; /* result() was called */
    int fd;           /* its own (a duplicate of the caller's), closed once read: -1 then */
    long long offset; /* where the bytes are read from */
    Py_buffer data;   /* the buffer read into: held until the answer takes it */
    char *tail;       /* the bytes expected right before offset (a copy), tail_n of them */
    Py_ssize_t tail_n;
    PyObject *search, *node, *line_type;
    Part parts[2];      /* the whole lines read: in two halves when long (see SCAN_SPLIT) */
    int np;             /* how many parts were read (0: none) */
    Py_ssize_t cut;     /* the end of the last whole line read */
    Py_ssize_t got;     /* bytes read */
    int err;            /* the errno of a failed read, else 0 */
    int moved;          /* the bytes before offset are not the tail: the file changed */
    int nul;            /* a NUL among the bytes read: for the line layer to frame */
    int split;          /* a long read may be scanned in two halves */
} Reading;

static PyTypeObject ReadingType;

/* pread until `n` bytes or the end: how many, or -1 with errno. */
static Py_ssize_t read_fully(int fd, char *buf, Py_ssize_t n, long long offset) {
    Py_ssize_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, (size_t)(n - got), (off_t)(offset + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += k;
    }
    return got;
}

/* The thread: the tail checked, the bytes read (the descriptor's offset left after them, as a
 * read leaves it), their whole lines scanned. Needs no GIL. */
static void *reading_run(void *arg) {
    Reading *r = arg;
    if (r->tail_n > 0) {
        char *now = PyMem_RawMalloc((size_t)r->tail_n);
        Py_ssize_t k = now == NULL || r->offset < r->tail_n
                           ? -2
                           : read_fully(r->fd, now, r->tail_n, r->offset - r->tail_n);
        if (k == -1) r->err = errno;
        else if (now == NULL) r->err = ENOMEM;
        else r->moved = k != r->tail_n || memcmp(now, r->tail, (size_t)r->tail_n) != 0;
        PyMem_RawFree(now);
        if (r->err || r->moved) return NULL;
    }
    char *buf = r->data.buf;
    Py_ssize_t got = read_fully(r->fd, buf, r->data.len, r->offset);
    if (got < 0) {
        r->err = errno;
        return NULL;
    }
    r->got = got;
    (void)lseek(r->fd, (off_t)(r->offset + got), SEEK_SET);
    if (memchr(buf, 0, (size_t)got) != NULL) {
        r->nul = 1;
        return NULL;
    }
    const char *last = got > 0 ? memrchr(buf, '\n', (size_t)got) : NULL;
    if (last == NULL) return NULL;
    Py_ssize_t cut = r->cut = last - buf + 1;
    Py_ssize_t half = r->split ? first_half(buf, cut) : cut; /* (the parts: one, or two halves) */
    r->parts[0].s = buf, r->parts[0].n = half;
    r->parts[1].s = buf + half, r->parts[1].n = cut - half;
    r->np = half < cut ? 2 : 1;
    each_part(scan_part, r->parts, r->np);
    return NULL;
}

/* The job: reading_run, then its own descriptor closed. */
static void *reading_main(void *arg) {
    Reading *r = arg;
    reading_run(r);
    close(r->fd);
    r->fd = -1;
    return NULL;
}

/* Waited for (the GIL given up meanwhile), if it runs: by whoever else waits for it too. */
static void reading_join(Reading *r) {
    if (!r->running) return;
    Py_BEGIN_ALLOW_THREADS
    job_wait(&r->job);
    Py_END_ALLOW_THREADS
    r->running = 0;
}

/* Its buffer and blocks let go (with the GIL). */
static void reading_release(Reading *r) {
    for (int k = 0; k < 2; k++) {
        block_give(r->parts[k].items, r->parts[k].items_size);
        r->parts[k].items = NULL;
    }
    if (r->data.obj != NULL) PyBuffer_Release(&r->data);
}

static void reading_dealloc(Reading *r) {
    reading_join(r);
    job_free(&r->job);
    if (r->fd >= 0) close(r->fd);
    reading_release(r);
    PyMem_RawFree(r->tail);
    Py_XDECREF(r->search), Py_XDECREF(r->node), Py_XDECREF(r->line_type);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *read_ahead(PyObject *self, PyObject *args) {
    int fd;
    long long offset;
    Py_buffer tail;
    PyObject *keywords, *node, *since_arg, *max_arg;
    PyTypeObject *line_type;
    Reading *r = PyObject_New(Reading, &ReadingType);
    if (r == NULL) return NULL;
    job_init(&r->job, reading_main, r);
    r->running = r->answered = 0, r->tail = NULL, r->tail_n = 0, r->fd = -1;
    r->search = r->node = r->line_type = NULL;
    r->data.obj = NULL;
    memset(r->parts, 0, sizeof r->parts);
    r->np = 0, r->cut = 0;
    r->got = 0, r->err = 0, r->moved = 0, r->nul = 0;
    r->split = 1;
    if (!PyArg_ParseTuple(args, "iLw*y*O!UOO!O|p:read_ahead", &fd, &offset, &r->data, &tail,
                          &PyTuple_Type, &keywords, &node, &since_arg, &PyType_Type, &line_type,
                          &max_arg, &r->split))
        goto fail_early;
    r->tail_n = tail.len;
    if (tail.len > READING_TAIL_MOST || offset < 0 || fd < 0) {
        PyErr_SetString(PyExc_ValueError, "read_ahead() needs fd >= 0, offset >= 0, a short tail");
        PyBuffer_Release(&tail);
        goto fail;
    }
    if (tail.len > 0 && (r->tail = PyMem_RawMalloc((size_t)tail.len)) == NULL) {
        PyBuffer_Release(&tail);
        PyErr_NoMemory();
        goto fail;
    }
    if (tail.len > 0) memcpy(r->tail, tail.buf, (size_t)tail.len);
    PyBuffer_Release(&tail);
    /* its own descriptor (the same open file, and offset): should the caller's be closed
     * meanwhile, and its number reused, the thread still reads the file it was given */
    if ((r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    r->offset = offset;
    r->node = Py_NewRef(node), r->line_type = Py_NewRef((PyObject *)line_type);
    long long since_us, max_line;
    const Search *t;
    if (scan_args("read_ahead", since_arg, max_arg, line_type, keywords, &since_us, &max_line,
                  &r->search, &t) < 0)
        goto fail;
    for (int k = 0; k < 2; k++) { /* (room for a line in 200 bytes of a half: more is grown into) */
        Part *p = &r->parts[k];
        p->t = t, p->since_us = since_us, p->max_line = max_line;
        p->items = block_take(((size_t)r->data.len / 400 + 16) * sizeof(Item), &p->items_size);
        if (p->items == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    /* Nothing reads or changes the buffer meanwhile: the caller holds it for the answer. */
    if (job_submit(&r->job)) {
        r->running = 1;
    } else { /* no thread to be had: read here and now */
        Py_BEGIN_ALLOW_THREADS
        reading_main(r);
        Py_END_ALLOW_THREADS
    }
    return (PyObject *)r;
fail_early:
    r->data.obj = NULL;
fail:
    Py_DECREF(r);
    return NULL;
}

static PyObject *reading_result(Reading *r, PyObject *unused) {
    reading_join(r);
    if (r->answered) {
        PyErr_SetString(PyExc_RuntimeError, "a Reading answers once");
        return NULL;
    }
    r->answered = 1;
    PyObject *out = NULL;
    if (r->err) {
        errno = r->err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (r->parts[0].count < 0 || (r->np > 1 && r->parts[1].count < 0)) {
        PyErr_NoMemory();
    } else if (r->moved || r->nul || r->np == 0) {
        out = Py_BuildValue("(nnOnn)", r->moved ? (Py_ssize_t)-1 : r->got, (Py_ssize_t)0, Py_None,
                            (Py_ssize_t)0, (Py_ssize_t)0);
    } else {
        Py_ssize_t cut = r->cut;
        PyObject *found =
            scan_answer(r->parts, r->np, &r->data, r->node, (PyTypeObject *)r->line_type);
        if (found != NULL) {
            PyObject *lines, *newlines, *raw;
            if (PyArg_ParseTuple(found, "OOO", &lines, &newlines, &raw))
                out = Py_BuildValue("(nnOOO)", r->got, cut, lines, newlines, raw);
            Py_DECREF(found);
        }
    }
    reading_release(r);
    return out;
}

static PyObject *reading_wait(Reading *r, PyObject *unused) {
    reading_join(r);
    Py_ssize_t got = r->err ? 0 : r->moved ? -1 : r->got;
    return Py_BuildValue("(nn)", got, r->err || r->nul ? (Py_ssize_t)0 : r->cut);
}

static PyMethodDef reading_methods[] = {
    {"wait", (PyCFunction)reading_wait, METH_NOARGS,
     "wait() -> (got, cut): waits for the thread (done with the file and the buffer); got\n"
     "and cut as result() answers them (0, 0 when the read failed)."},
    {"result", (PyCFunction)reading_result, METH_NOARGS,
     "result() -> (got, cut, lines, newlines, raw): waits for the thread; the bytes read (-1\n"
     "when the bytes before the offset were not the tail given), the end of their last whole\n"
     "line, and scan's answer for the bytes before it; (got, 0, None, 0, 0) when they hold a\n"
     "NUL or no whole line. OSError when the read failed. Once only."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReadingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "exporter.compiled._speedups.Reading",
    .tp_basicsize = sizeof(Reading),
    .tp_dealloc = (destructor)reading_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A file's next bytes, read and scanned in a thread (see read_ahead).",
    .tp_methods = reading_methods,
};

/* ---- tokenize: era C/D slot lines --------------------------------------------------------- */


typedef struct {
    const char *s;
    Py_ssize_t n, i;
} Cursor;

static inline __attribute__((always_inline)) int lit_n(Cursor *c, const char *text, size_t k) {
    if ((size_t)(c->n - c->i) < k || memcmp(c->s + c->i, text, k) != 0) return 0;
    c->i += (Py_ssize_t)k;
    return 1;
}

/* the literal `text` at the cursor: 1 and past it, else 0 (its length known while compiling) */
#define lit(c, text) lit_n((c), "" text, sizeof(text) - 1)

static Py_ssize_t spaces(Cursor *c) {
    Py_ssize_t from = c->i;
    while (c->i < c->n && c->s[c->i] == ' ') c->i++;
    return c->i - from;
}

/* a non-negative decimal of at most `most` digits */
static int number(Cursor *c, int most, long long *out) {
    Py_ssize_t from = c->i;
    long long v = 0;
    while (c->i < c->n && is_digit(c->s[c->i])) {
        if (c->i - from >= most) return 0;
        v = v * 10 + (c->s[c->i++] - '0');
    }
    *out = v;
    return c->i > from;
}

/* `6739.60` -> microseconds, as parse.tokens.ms_to_us; 0 when not that shape or out of range */
static int duration(Cursor *c, long long *us) {
    long long whole, v = 0;
    if (!number(c, 12, &whole)) return 0;
    v = whole * 1000;
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        Py_ssize_t from = c->i;
        long long scale = 100;
        while (c->i < c->n && is_digit(c->s[c->i])) {
            Py_ssize_t k = c->i - from;
            if (k < 3) v += (c->s[c->i] - '0') * scale, scale /= 10;
            else if (k == 3 && c->s[c->i] >= '5') v += 1;
            c->i++;
        }
        if (c->i == from) return 0;
    }
    *us = v;
    return v <= MAX_DURATION_US;
}

/* `= 6739.60 ms / 2430 tokens` (or `runs` when `runs` is allowed) after a `... time` */
static int timing(Cursor *c, int runs, long long *us, long long *count) {
    spaces(c);
    if (!lit(c, "=")) return 0;
    spaces(c);
    if (!duration(c, us) || spaces(c) == 0 || !lit(c, "ms")) return 0;
    spaces(c);
    if (!lit(c, "/")) return 0;
    spaces(c);
    if (!number(c, 10, count) || *count > MAX_TOKENS || spaces(c) == 0) return 0;
    return lit(c, "tokens") || (runs && lit(c, "runs"));
}

/* Where `what` (k bytes) first is in the short s[0:n], or NULL: memchr for its first byte, then
 * compare (no setup cost). */
static inline __attribute__((always_inline)) const char *find_n(const char *s, Py_ssize_t n,
                                                               const char *what, size_t k) {
    const char *end = s + n, *p = s;
    while ((size_t)(end - p) >= k && (p = memchr(p, what[0], (size_t)(end - p) - k + 1))) {
        if (memcmp(p, what, k) == 0) return p;
        p++;
    }
    return NULL;
}

/* the literal `what` within s[0:n] */
#define contains(s, n, what) (find_n((s), (n), "" what, sizeof(what) - 1) != NULL)

static PyObject *kinds[TOKEN_KINDS_N]; /* the kind numbers as ints, made once */

static PyObject *token(int kind, long long slot, long long task, long long us, long long count) {
    PyObject *t = PyTuple_New(K_N);
    if (t == NULL) return NULL;
    Py_INCREF(kinds[kind]);
    PyTuple_SET_ITEM(t, K_KIND, kinds[kind]);
    long long values[K_N] = {[K_SLOT] = slot, [K_TASK] = task, [K_US] = us, [K_COUNT] = count};
    /* the numbers it holds (None after them): none for OTHER, the slot and task of a slot
     * line, all four for a timing line */
    int last = kind == OTHER                                          ? K_KIND
               : (kind == PROMPT || kind == EVAL || kind == TOTAL) ? K_COUNT
                                                                   : K_TASK;
    for (int j = K_KIND + 1; j < K_N; j++) {
        PyObject *v = j <= last ? PyLong_FromLongLong(values[j]) : Py_NewRef(Py_None);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, j, v);
    }
    return t;
}


/* 1 and `t` filled when `msg` is a common era C/D slot line read exactly as parse.tokens.tokenize
 * reads it; 0 to hand it back to the reference. */
static int ascii_token(const char *s, Py_ssize_t n, Tok *t);

static int read_token(PyObject *msg, Tok *t) {
    /* an exact, ready, ASCII str (a subclass may read differently: the reference's) */
    if (!PyUnicode_CheckExact(msg)) return 0;
#if PY_VERSION_HEX < 0x030C0000 /* (3.12 has no legacy strings) */
    if (PyUnicode_READY(msg) < 0) {
        PyErr_Clear();
        return 0;
    }
#endif
    if (!PyUnicode_IS_ASCII(msg)) return 0;
    return ascii_token((const char *)PyUnicode_1BYTE_DATA(msg), PyUnicode_GET_LENGTH(msg), t);
}

/* read_token on a message's bytes: the same answer, as its str is ASCII and equal to them. */
static int bytes_token(const char *s, Py_ssize_t n, Tok *t) {
    uint64_t high = 0;
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w;
        memcpy(&w, s + k, 8);
        high |= w;
    }
    for (; k < n; k++) high |= (unsigned char)s[k];
    return (high & 0x8080808080808080ULL) == 0 && ascii_token(s, n, t);
}

/* Does the ASCII text s[0:n] hold a control character (below 0x20, or 0x7f)? Eight bytes a
 * step: a byte x below 0x80 is below 0x20 when x + 0x60 has no high bit, and is 0x7f when x + 1
 * has one (neither sum carries into the next byte). */
static int has_control(const char *s, Py_ssize_t n) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w;
        memcpy(&w, s + k, 8);
        if ((~(w + 0x60 * ones) | (w + ones)) & high) return 1;
    }
    for (; k < n; k++)
        if ((unsigned char)s[k] < 0x20 || s[k] == 0x7f) return 1;
    return 0;
}

/* read_token on ASCII text s[0:n]. */
static int ascii_token(const char *s, Py_ssize_t n, Tok *t) {
    Cursor c = {s, n, 0};
    /* an optional log prefix of digits, dots, spaces and level letters (`50.10.605.993 I `,
     * or the wall clock's `2025-11-15 14:23:35.060 I `) */
    while (c.i < c.n && (is_digit(c.s[c.i]) || c.s[c.i] == '.' || c.s[c.i] == ' ' ||
                         c.s[c.i] == '-' || c.s[c.i] == ':' ||
                         (c.s[c.i] >= 'A' && c.s[c.i] <= 'Z')))
        c.i++;
    if (!lit(&c, "slot") || spaces(&c) == 0) return 0;
    int name;
    if (lit(&c, "print_timing:")) name = HEADER;
    else if (lit(&c, "launch_slot_:")) name = LAUNCH;
    else if (lit(&c, "release:")) name = RELEASE;
    else return 0;
    t->us = t->count = 0;
    if (!lit(&c, " id") || spaces(&c) == 0 || !number(&c, 9, &t->slot) || !lit(&c, " | task ") ||
        !number(&c, 9, &t->task) || !lit(&c, " |"))
        return 0;
    const char *rest = c.s + c.i;
    Py_ssize_t rest_n = c.n - c.i;
    if (has_control(rest, rest_n)) return 0; /* odd whitespace */
    spaces(&c);
    if (name == HEADER) {
        if (c.i == c.n) return t->kind = HEADER, 1;
        int kind = lit(&c, "prompt eval time") ? PROMPT
                   : lit(&c, "eval time")      ? EVAL
                   : lit(&c, "total time")     ? TOTAL
                                               : OTHER;
        if (kind == OTHER) {
            /* (a draft acceptance or n_gen line: its figures are the reference's to read) */
            if (contains(rest, rest_n, "time") || contains(rest, rest_n, "launch_slot_") ||
                contains(rest, rest_n, "release") || contains(rest, rest_n, "draft acceptance = ") ||
                contains(rest, rest_n, "n_gen = "))
                return 0;
            return t->kind = OTHER, 1;
        }
        if (!timing(&c, kind == EVAL, &t->us, &t->count)) return 0;
        /* a later `total time` or `prompt eval time` would change what the reference reads */
        if (kind != TOTAL && contains(c.s + c.i, c.n - c.i, "time")) return 0;
        return t->kind = kind, 1;
    }
    if (contains(rest, rest_n, "time")) return 0;
    if (name == LAUNCH) {
        if (contains(rest, rest_n, "processing task")) {
            /* an n_cmpl child (`is_child = 1`) is the reference's */
            const char *end = rest + rest_n;
            for (const char *at = rest; (at = find_n(at, end - at, "is_child = ", 11)); at++)
                for (const char *d = at + 11; d < end && is_digit(*d); d++)
                    if (*d != '0') return 0;
            return t->kind = LAUNCH, 1;
        }
        if (contains(rest, rest_n, "stop processing")) return 0;
        return t->kind = OTHER, 1;
    }
    /* `release`: a stop line when it says so; anything else is for the reference to judge */
    if (contains(rest, rest_n, "launch_slot_") || !contains(rest, rest_n, "stop processing"))
        return 0;
    return t->kind = RELEASE, 1;
}

static PyObject *tokenize(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) { /* (a str subclass is handed back: None) */
        PyErr_SetString(PyExc_TypeError, "tokenize() takes a str");
        return NULL;
    }
    Tok t;
    if (!read_token(arg, &t)) Py_RETURN_NONE;
    return token(t.kind, t.slot, t.task, t.us, t.count);
}

/* ---- feed: Parser.feed_all's state machine for runs of common lines ------------------------ */

/* Parser.block as C values: `any` 0 for NO_BLOCK; each field with its `has` bit (None: 0). */
typedef struct {
    int any, has[B_N];
    long long v[B_N];
} Block;

/* The parser's block into `b`: 1, or 0 when a field is no int that fits (feed hands back). */
static int block_in(PyObject *block, PyObject *no_block, Block *b) {
    memset(b, 0, sizeof *b);
    if (block == no_block) return 1;
    b->any = 1;
    for (int f = 0; f < B_N; f++) {
        PyObject *v = PyObject_GetAttrString(block, block_fields[f]);
        if (v == NULL) return -1;
        if (v != Py_None) {
            int overflow = 0;
            b->v[f] = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
            b->has[f] = 1;
            if (!PyLong_Check(v) || overflow || (b->v[f] == -1 && PyErr_Occurred())) {
                Py_DECREF(v);
                PyErr_Clear();
                return 0;
            }
        }
        Py_DECREF(v);
    }
    return 1;
}

static PyObject *opt_int(int has, long long v) {
    return has ? PyLong_FromLongLong(v) : Py_NewRef(Py_None);
}

static PyObject *block_name; /* "block", made once (setting it then takes no memory) */

/* `b` back into the parser: NO_BLOCK, or a new Block(slot, task, ...). 0, or -1 on error. */
static int block_out(PyObject *parser, const Block *b, PyObject *block_type, PyObject *no_block) {
    PyObject *block;
    if (!b->any) {
        block = Py_NewRef(no_block);
    } else {
        PyObject *args = PyTuple_New(B_N);
        if (args == NULL) return -1;
        for (int f = 0; f < B_N; f++) {
            PyObject *v = opt_int(b->has[f], b->v[f]);
            if (v == NULL) {
                Py_DECREF(args);
                return -1;
            }
            PyTuple_SET_ITEM(args, f, v);
        }
        block = PyObject_Call(block_type, args, NULL);
        Py_DECREF(args);
        if (block == NULL) return -1;
    }
    int bad = PyObject_SetAttr(parser, block_name, block);
    Py_DECREF(block);
    return bad;
}

/* A new tuple of `type` (a NamedTuple: its __new__ does no more) holding `items`, stolen. */
static PyObject *record(PyTypeObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *r = NULL;
    for (Py_ssize_t j = 0; j < n; j++)
        if (items[j] == NULL) goto fail;
    if ((r = type->tp_alloc(type, n)) == NULL) goto fail;
    for (Py_ssize_t j = 0; j < n; j++) PyTuple_SET_ITEM(r, j, items[j]);
    /* Untracked by the cyclic collector: a record holds only ints, strs, None and enum members,
     * so it is never part of a cycle, and the collector need not walk the hundreds of
     * thousands a backlog makes (it spent 6% of the reading path on them). */
    PyObject_GC_UnTrack(r);
    return r;
fail:
    for (Py_ssize_t j = 0; j < n; j++) Py_XDECREF(items[j]);
    return NULL;
}

static PyObject *pair(long long a, long long b) {
    PyObject *x = PyLong_FromLongLong(a), *y = PyLong_FromLongLong(b);
    if (x == NULL || y == NULL) {
        Py_XDECREF(x), Py_XDECREF(y);
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, x, y);
    Py_DECREF(x), Py_DECREF(y);
    return t;
}

/* 1 when dict `d` has the int key `k`, 0 when not, -1 on an error. */
static int has_int_key(PyObject *d, long long k) {
    PyObject *key = PyLong_FromLongLong(k);
    if (key == NULL) return -1;
    int r = PyDict_Contains(d, key);
    Py_DECREF(key);
    return r;
}

/* Whether `started` holds the key (slot, task), found by its values (no tuple made for the
 * lookup: a request looks twice): 1 and `*key` (borrowed) when it does, 0 when it does not,
 * -1 when a key is not a pair of ints of 64 bits or the dict is large (then look it up). */
#define STARTED_SCANNED 16
static int started_key(PyObject *started, long long slot, long long task, PyObject **key) {
    if (PyDict_GET_SIZE(started) > STARTED_SCANNED) return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *value;
    while (PyDict_Next(started, &pos, &k, &value)) {
        if (!PyTuple_CheckExact(k) || PyTuple_GET_SIZE(k) != 2) return -1;
        PyObject *s = PyTuple_GET_ITEM(k, 0), *t = PyTuple_GET_ITEM(k, 1);
        if (!PyLong_CheckExact(s) || !PyLong_CheckExact(t)) return -1;
        int over = 0;
        long long sv = PyLong_AsLongLongAndOverflow(s, &over);
        long long tv = over ? 0 : PyLong_AsLongLongAndOverflow(t, &over);
        if (over || PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        if (sv == slot && tv == task) {
            *key = k;
            return 1;
        }
    }
    return 0;
}

/* Whether `started` holds (slot, task): 1 and `*key` (a new reference to a key equal to it)
 * when it does, 0 when not, -1 on an error. Deleting that key cannot fail. */
static int started_find(PyObject *started, long long slot, long long task, PyObject **key) {
    PyObject *found = NULL;
    int there = started_key(started, slot, task, &found);
    if (there == 1) *key = Py_NewRef(found);
    if (there >= 0) return there;
    PyObject *made = pair(slot, task);
    if (made == NULL) return -1;
    int launched = PyDict_Contains(started, made);
    if (launched == 1) *key = made;
    else Py_DECREF(made);
    return launched;
}

/* Drop the last item of `list`, appended by the caller (a list may be shorter than its
 * allocation: nothing is allocated or freed but the item's reference). */
static void list_drop_last(PyObject *list) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *item = PyList_GET_ITEM(list, n - 1);
    Py_SET_SIZE(list, n - 1);
    Py_DECREF(item);
}

/* `(slot, task) in started`: 1, 0, or -1 on an error. */
static int started_has(PyObject *started, long long slot, long long task) {
    PyObject *found = NULL;
    int there = started_key(started, slot, task, &found);
    if (there >= 0) return there;
    PyObject *key = pair(slot, task);
    if (key == NULL) return -1;
    int launched = PyDict_Contains(started, key);
    Py_DECREF(key);
    return launched;
}

/* 1 when a launch of (slot, task) takes nothing from `started` (no other task of that slot in
 * it, and room for it within `bound`), 0 when it would, -1 on an error. */
static int launch_fits(PyObject *started, long long slot, long long task, Py_ssize_t bound) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int there = 0;
    while (PyDict_Next(started, &pos, &key, &value)) {
        if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2) return 0;
        PyObject *s = PyTuple_GET_ITEM(key, 0), *k = PyTuple_GET_ITEM(key, 1);
        if (!PyLong_CheckExact(s) || !PyLong_CheckExact(k)) return 0;
        int over = 0;
        long long sv = PyLong_AsLongLongAndOverflow(s, &over);
        long long kv = over ? 0 : PyLong_AsLongLongAndOverflow(k, &over);
        if (over || PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (sv == slot) {
            if (kv != task) return 0;
            there = 1;
        }
    }
    return there || PyDict_GET_SIZE(started) < bound;
}

/* One common line's token applied as Parser.feed_all applies it: 1 done, 0 hand back (the line
 * would add a pending stop, which Python decides), -1 on error. */
static int apply(const Tok *t, PyObject *time, long long end, PyObject *pid, PyObject *node,
                 Block *b, PyObject *started, PyObject *last_timed, PyObject *task_reasons,
                 PyObject *const *types, Py_ssize_t max_started, PyObject *out) {
    int matches = (!b->has[B_TASK] || b->v[B_TASK] == t->task) &&
                  (!b->has[B_SLOT] || b->v[B_SLOT] == t->slot);
    switch (t->kind) {
    case PROMPT:
    case EVAL: {
        if (!b->any || !matches) memset(b, 0, sizeof *b), b->any = 1;
        b->v[B_SLOT] = t->slot, b->v[B_TASK] = t->task, b->has[B_SLOT] = b->has[B_TASK] = 1;
        int us = t->kind == PROMPT ? B_PROMPT_US : B_GENERATION_US;
        int count = t->kind == PROMPT ? B_PROMPT_TOKENS : B_GENERATED_TOKENS;
        b->v[us] = t->us, b->v[count] = t->count, b->has[us] = b->has[count] = 1;
        return 1;
    }
    case TOTAL: {
        if (PyDict_GET_SIZE(last_timed) > max_started) return 0; /* (a bound that shrank) */
        if (PyDict_GET_SIZE(last_timed) == max_started) { /* a new slot beyond the bound? */
            int known = has_int_key(last_timed, t->slot);
            if (known <= 0) return known; /* (Python forgets one: the reference's to do) */
        }
        Block used = *b;
        if (!b->any || !matches) memset(&used, 0, sizeof used);
        /* all it takes is made first; then the changes that may fail, undone if a later one
         * does; then those that cannot (deleting a key that is there) */
        PyObject *key = NULL;
        int launched = started_find(started, t->slot, t->task, &key);
        if (launched < 0) return -1;
        PyObject *slot = PyLong_FromLongLong(t->slot), *task = PyLong_FromLongLong(t->task);
        PyObject *items[I_N] = {
            [I_NODE] = Py_NewRef(node),
            /* end in range, us <= a week: no overflow */
            [I_START_US] = PyLong_FromLongLong(end - t->us),
            [I_END_US] = time != NULL ? Py_NewRef(time) : PyLong_FromLongLong(end),
            [I_TOKENS] = PyLong_FromLongLong(t->count),
            [I_PROMPT_TOKENS] = opt_int(used.has[B_PROMPT_TOKENS], used.v[B_PROMPT_TOKENS]),
            [I_GENERATED_TOKENS] =
                opt_int(used.has[B_GENERATED_TOKENS], used.v[B_GENERATED_TOKENS]),
            [I_PROMPT_US] = opt_int(used.has[B_PROMPT_US], used.v[B_PROMPT_US]),
            [I_GENERATION_US] = opt_int(used.has[B_GENERATION_US], used.v[B_GENERATION_US]),
            [I_SLOT] = Py_XNewRef(slot),
            [I_TASK] = Py_XNewRef(task),
            [I_PID] = Py_NewRef(pid),
            [I_REASON] = Py_NewRef(types[T_EMPTY]), /* a timed request */
            [I_MODEL] = Py_NewRef(types[T_EMPTY]),  /* none outside router mode */
        };
        PyObject *iv = record((PyTypeObject *)types[T_INTERVAL], items, I_N);
        int noted = iv == NULL || !PyDict_GET_SIZE(task_reasons) ? 0
                                                                 : PyDict_Contains(task_reasons, task);
        int bad = iv == NULL || noted < 0 || PyList_Append(out, iv) < 0;
        if (!bad && PyDict_SetItem(last_timed, slot, task) < 0) {
            list_drop_last(out); /* (the record appended) */
            bad = 1;
        }
        if (!bad) { /* started.pop(key, None); task_reasons.pop(task, None): timed, no cancel */
            if (launched) PyDict_DelItem(started, key);
            if (noted) PyDict_DelItem(task_reasons, task);
            memset(b, 0, sizeof *b);
        }
        Py_XDECREF(key), Py_XDECREF(iv), Py_XDECREF(slot), Py_XDECREF(task);
        return bad ? -1 : 1;
    }
    case LAUNCH: {
        /* a request still on this slot is lost, and so is the oldest beyond the bound: both
         * for the reference to say (only a launch on a free slot, within it, is done here) */
        int fits = launch_fits(started, t->slot, t->task, max_started);
        if (fits <= 0) return fits;
        PyObject *key = pair(t->slot, t->task);
        PyObject *at = time != NULL ? Py_NewRef(time) : PyLong_FromLongLong(end);
        PyObject *items[E_N] = {
            [E_NODE] = Py_NewRef(node),
            [E_TIME_US] = Py_XNewRef(at),
            [E_KIND] = Py_NewRef(types[T_STARTED]),
            [E_PID] = Py_NewRef(pid),
            [E_SLOT] = PyLong_FromLongLong(t->slot),
            [E_TASK] = PyLong_FromLongLong(t->task),
            [E_DETAIL] = Py_NewRef(types[T_EMPTY]),
            [E_MODEL] = Py_NewRef(types[T_EMPTY]),
            [E_VALUE] = Py_NewRef(Py_None),
        };
        PyObject *ev = record((PyTypeObject *)types[T_EVENT], items, E_N);
        int bad = key == NULL || ev == NULL || PyList_Append(out, ev) < 0;
        if (!bad && PyDict_SetItem(started, key, at) < 0) {
            list_drop_last(out); /* (the event appended) */
            bad = 1;
        }
        Py_XDECREF(key), Py_XDECREF(at), Py_XDECREF(ev);
        return bad ? -1 : 1;
    }
    case RELEASE: { /* a pending stop when launched here and not yet timed: Python's to add */
        PyObject *slot = PyLong_FromLongLong(t->slot);
        if (slot == NULL) return -1;
        int launched = started_has(started, t->slot, t->task);
        PyObject *timed = launched == 1 ? PyDict_GetItemWithError(last_timed, slot) : NULL;
        Py_DECREF(slot);
        if (launched < 0 || PyErr_Occurred()) return -1;
        if (launched == 0) return 1;
        if (timed == NULL || !PyLong_CheckExact(timed)) return 0;
        int overflow = 0;
        long long timed_task = PyLong_AsLongLongAndOverflow(timed, &overflow);
        if (overflow || (timed_task == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        return timed_task == t->task ? 1 : 0;
    }
    case HEADER:
        memset(b, 0, sizeof *b), b->any = 1;
        b->v[B_SLOT] = t->slot, b->v[B_TASK] = t->task, b->has[B_SLOT] = b->has[B_TASK] = 1;
        return 1;
    default: /* OTHER */
        return 1;
    }
}

/* One line of feed's input as feed reads it: 1 and the fields filled when it is a LogLine (or
 * a Lines item) of a time and PID that fit, the time in range, and a common line; else 0. The
 * `time` and `pid` objects are borrowed, `time` NULL where the line is not made yet (`pid` then
 * the parser's own when the values match, or 0). */
typedef struct {
    Tok tok;
    long long time_us, pid;
    PyObject *time, *pid_obj;
} Read;

static int read_tuple(PyObject *line, Read *r) {
    if (!PyTuple_Check(line) || PyTuple_CheckExact(line) || PyTuple_GET_SIZE(line) != L_N)
        return 0;
    PyObject *msg = PyTuple_GET_ITEM(line, L_MESSAGE), *pid = PyTuple_GET_ITEM(line, L_PID);
    PyObject *time = PyTuple_GET_ITEM(line, L_TIME_US);
    if (!PyLong_CheckExact(time) || !PyLong_CheckExact(pid)) return 0;
    int time_over = 0, pid_over = 0;
    r->time_us = PyLong_AsLongLongAndOverflow(time, &time_over);
    r->pid = PyLong_AsLongLongAndOverflow(pid, &pid_over);
    if (PyErr_Occurred()) { /* (exact ints: never) */
        PyErr_Clear();
        return 0;
    }
    if (time_over || pid_over || r->time_us < MIN_TIME_US || r->time_us > MAX_TIME_US) return 0;
    r->time = time, r->pid_obj = pid;
    return read_token(msg, &r->tok);
}

static int read_item(const Item *it, Read *r) {
    const Found *d = &it->d; /* (an escaped JSON entry has no token: scan made its LogLine) */
    if (d->time_us < MIN_TIME_US || d->time_us > MAX_TIME_US) return 0;
    r->time_us = d->time_us, r->pid = d->pid, r->time = NULL, r->pid_obj = NULL;
    r->tok = d->tok;
    return d->has_tok;
}

/* feed(parser, lines, start, out, types, max_started) -> the index of the first line left to
 * Python; lines a tuple of LogLines or a Lines, types a FeedTypes. It raises only before it
 * changes anything: a line whose changes fail (out of memory) is undone and left to Python,
 * so the caller needs no copy of the parser's state to go back to (Parser.feed_all). */
static PyObject *feed(PyObject *self, PyObject *args) {
    PyObject *parser, *lines, *out, *types;
    Py_ssize_t start, max_started;
    if (!PyArg_ParseTuple(args, "OOnO!O!n:feed", &parser, &lines, &start, &PyList_Type, &out,
                          &PyTuple_Type, &types, &max_started))
        return NULL;
    int lazy = Py_TYPE(lines) == &LinesType;
    if (!lazy && !PyTuple_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "feed() takes a tuple of lines or a Lines");
        return NULL;
    }
    if (PyTuple_GET_SIZE(types) != T_N) {
        PyErr_SetString(PyExc_ValueError,
                        "feed() types: a FeedTypes (interval, started, empty, event, block, "
                        "no_block)");
        return NULL;
    }
    PyObject *ty[T_N];
    for (int k = 0; k < T_N; k++) ty[k] = PyTuple_GET_ITEM(types, k);
    if (!is_plain_tuple_type(ty[T_INTERVAL]) || !is_plain_tuple_type(ty[T_EVENT])) {
        PyErr_SetString(PyExc_TypeError, "feed() needs NamedTuple types for its records");
        return NULL;
    }
    PyObject *block_type = ty[T_BLOCK], *no_block = ty[T_NO_BLOCK];
    Lines *ls = lazy ? (Lines *)lines : NULL;
    Py_ssize_t n = lazy ? ls->n : PyTuple_GET_SIZE(lines), i = start;
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "feed() start out of range");
        return NULL;
    }
    PyObject *attr[P_N] = {NULL};
    for (int k = 0; k < P_N; k++)
        if ((attr[k] = PyObject_GetAttrString(parser, parser_reads[k])) == NULL) break;
    PyObject *node = attr[P_NODE], *pid = attr[P_PID], *started = attr[P_STARTED];
    PyObject *last_timed = attr[P_LAST_TIMED], *block = attr[P_BLOCK];
    PyObject *task_reasons = attr[P_TASK_REASONS];
    PyObject *zero = PyLong_FromLong(0);
    int ok = -1, changed = 0, pid_over = 0;
    long long pid_value = 0;
    Block b;
    if (attr[P_N - 1] == NULL || zero == NULL) goto done; /* (the reads stop at a failure) */
    if (!PyDict_CheckExact(started) || !PyDict_CheckExact(last_timed) ||
        !PyDict_CheckExact(task_reasons)) {
        ok = 1; /* not what Parser holds: leave it all to Python */
        goto done;
    }
    if (PyLong_CheckExact(pid)) pid_value = PyLong_AsLongLongAndOverflow(pid, &pid_over);
    if (!PyLong_CheckExact(pid) || pid_over || PyErr_Occurred()) {
        PyErr_Clear();
        pid_over = 1; /* a lazy line is then the Python loop's (a tuple's compares as ever) */
    }
    if ((ok = block_in(block, no_block, &b)) != 1) goto done;
    for (; i < n; i++) {
        /* a LogLine whose time and PID are ints that fit, the time in range, and a common
         * line; anything else is the Python loop's (which names a time out of range) */
        Read r;
        const Item *it = lazy ? &ls->items[i] : NULL;
        PyObject *obj = lazy ? it->obj : PyTuple_GET_ITEM(lines, i);
        if (!(obj != NULL ? read_tuple(obj, &r) : read_item(it, &r))) break;
        if (r.pid_obj == NULL) { /* a line not made yet: its PID by value */
            if (pid_over || (r.pid != pid_value && r.pid != 0)) break;
            r.pid_obj = r.pid == 0 ? zero : pid;
        } else if (r.pid_obj != pid) { /* another server (Python restarts), unless same or 0 */
            int same = PyObject_RichCompareBool(r.pid_obj, pid, Py_EQ);
            int is_zero = same == 1 ? 0 : PyObject_Not(r.pid_obj);
            if (same < 0 || is_zero < 0) {
                PyErr_Clear(); /* (the line is the Python loop's) */
                break;
            }
            if (!same && !is_zero) break;
        }
        Block before = b;
        int done = apply(&r.tok, r.time, r.time_us, r.pid_obj, node, &b, started, last_timed,
                         task_reasons, ty, max_started, out);
        if (done <= 0) { /* handed back, or failed having changed nothing: the Python loop's */
            b = before;
            if (done < 0) PyErr_Clear();
            break;
        }
        changed = 1;
    }
    if (changed && block_out(parser, &b, block_type, no_block) < 0) {
        /* (out of memory) the block of a request not yet timed is let go, its prompt and
         * generation figures with it; that takes no memory, and nothing is counted twice */
        PyErr_Clear();
        if (PyObject_SetAttr(parser, block_name, no_block) < 0) ok = -1;
    }
done:
    for (int k = 0; k < P_N; k++) Py_XDECREF(attr[k]);
    Py_XDECREF(zero);
    if (ok < 0) return NULL;
    return PyLong_FromSsize_t(ok == 0 ? start : i);
}

/* ---- check_layouts: the Python side's layouts against this code's ------------------------ */

/* layout k's names as a tuple of str (a new reference), or NULL with an error set */
static PyObject *layout_names(int k) {
    PyObject *t = PyTuple_New(layouts[k].n);
    for (int j = 0; t != NULL && j < layouts[k].n; j++) {
        PyObject *name = PyUnicode_FromString(layouts[k].names[j]);
        if (name == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, j, name);
    }
    return t;
}

/* 1 when `given` (any object) holds layout k's names in order (and no more, unless the layout
 * is a prefix), 0 when not, -1 on an error */
static int layout_fits(int k, PyObject *given) {
    if (!PyTuple_Check(given)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(given);
    if (layouts[k].prefix ? n < layouts[k].n : n != layouts[k].n) return 0;
    for (int j = 0; j < layouts[k].n; j++) {
        PyObject *name = PyTuple_GET_ITEM(given, j);
        if (!PyUnicode_Check(name)) return 0;
        int same = PyUnicode_CompareWithASCIIString(name, layouts[k].names[j]);
        if (same == -1 && PyErr_Occurred()) return -1;
        if (same != 0) return 0;
    }
    return 1;
}

/* check_layouts({name: names}) -> None; ValueError when a layout is missing, unknown here, or
 * other than this code was built for. */
static PyObject *check_layouts(PyObject *self, PyObject *given) {
    if (!PyDict_Check(given)) {
        PyErr_SetString(PyExc_TypeError, "check_layouts() takes a dict of layouts");
        return NULL;
    }
    for (int k = 0; k < N_LAYOUTS; k++) {
        PyObject *names = PyDict_GetItemString(given, layouts[k].name); /* (borrowed) */
        if (names == NULL) {
            PyErr_Format(PyExc_ValueError, "no %s layout given", layouts[k].name);
            return NULL;
        }
        int fits = layout_fits(k, names);
        if (fits < 0) return NULL;
        if (!fits) {
            PyObject *built = layout_names(k);
            if (built != NULL)
                PyErr_Format(PyExc_ValueError, "%s: built for %R%s, given %.200R", layouts[k].name,
                             built, layouts[k].prefix ? " (and any after)" : "", names);
            Py_XDECREF(built);
            return NULL;
        }
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(given, &pos, &key, &value)) {
        int known = 0;
        for (int k = 0; k < N_LAYOUTS && !known; k++)
            known = PyUnicode_Check(key) &&
                    PyUnicode_CompareWithASCIIString(key, layouts[k].name) == 0;
        if (!known) {
            PyErr_Format(PyExc_ValueError, "no layout %.100R here", key);
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, keywords, node, since_us, line_type, max_line) -> (lines, newlines, raw): the\n"
     "lines of data holding a keyword, in order, each line_type(node, time_us, cursor, pid,\n"
     "message) when it is a plain short-iso-precise line or a usual journal JSON entry of at\n"
     "most max_line bytes (left out when older than since_us), else its bytes; and how many\n"
     "newlines data holds, and how many of the lines are bytes."},
    {"read_ahead", read_ahead, METH_VARARGS,
     "read_ahead(fd, offset, buffer, tail, keywords, node, since_us, line_type, max_line,\n"
     "split=True) -> Reading: len(buffer) bytes of the regular file fd from offset read into\n"
     "buffer, and their whole lines scanned as scan does (in two halves when long, if split),\n"
     "on a kept thread (after checking that the bytes right before offset are tail); its\n"
     "result() answers. The caller leaves buffer alone until then."},
    {"feed", feed, METH_VARARGS,
     "feed(parser, lines, start, out, types, max_started) -> index: Parser.feed_all on\n"
     "lines[start:] for as long as they are common era C/D slot lines of the parser's server\n"
     "that add no pending stop, the records appended to out; the index of the first line\n"
     "it leaves to Python (len(lines) when none). It raises only before it changes anything."},
    {"join", join, METH_O,
     "join(parts) -> the LogLines of the parts (Lines or sequences of LogLines) in order: a\n"
     "Lines when one of them is a Lines, else a tuple."},
    {"tokenize", tokenize, METH_O,
     "tokenize(msg) -> parse.tokens.tokenize(msg) for the common era C and D slot lines, else None."},
    {"check_layouts", check_layouts, METH_O,
     "check_layouts(layouts) -> None: ValueError unless layouts ({name: field or attribute\n"
     "names}) are those this module was built for (exporter.compiled.switch hands them over)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "exporter.compiled._speedups",
    .m_doc = "Compiled fast paths for line scanning and decoding, tokenizing and parsing "
             "(see _speedups.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    init_json_stop();
    for (int k = 0; k < TOKEN_KINDS_N; k++)
        if ((kinds[k] = PyLong_FromLong(k)) == NULL) return NULL;
    if ((block_name = PyUnicode_InternFromString(parser_reads[P_BLOCK])) == NULL) return NULL;
    if (PyType_Ready(&LinesType) < 0 || PyType_Ready(&ReadingType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Lines", (PyObject *)&LinesType) < 0 ||
        PyModule_AddObjectRef(m, "Reading", (PyObject *)&ReadingType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
