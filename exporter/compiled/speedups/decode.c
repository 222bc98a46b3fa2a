/* decode: the usual line shapes (short-iso-precise, journal JSON) read into a Found.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

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
