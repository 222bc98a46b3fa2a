/* Compiled fast paths for the hot loops of following a dump: finding and decoding the lines
 * that may matter (sources/file.py), tokenizing the common llama.cpp lines and running the
 * parser's state machine over them (parse.py).
 *
 * Each function has a pure-Python reference that stays the specification:
 *   scan(data, ...)       ~ [decode(raw) or raw for raw in sources.file.relevant_lines(data)]
 *   tokenize(msg)         ~ parse.tokenize(msg)
 *   feed(parser, ...)     ~ parser._feed(lines, out): the Python loop of Parser.feed_all
 * The C side handles only the shapes it recognises exactly and hands everything else back
 * (raw bytes, None, or the index of the line to leave to Python) for the Python code to
 * decide, so it is never the only judge of a line. tests/test_speedups.py holds the two sides
 * to the same answers (and, for feed, the same parser state after).
 */
#define _GNU_SOURCE /* memmem, memrchr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DURATION_US (7LL * 86400LL * 1000000LL) /* parse.MAX_DURATION_US */
#define MAX_TOKENS 1000000000LL                       /* parse.MAX_TOKENS */

/* ---- scan: keyword lines of a chunk, short-iso-precise ones decoded ------------------------ */

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

/* What decode_short found: the line's time, pid and where its message starts and ends. */
typedef struct {
    long long time_us, pid;
    Py_ssize_t msg, end;
} Short;

/* `2026-09-22T07:31:04.127792+0000 host ident[1234]: message` -> 1 and `out` filled; 0 when the
 * line is not exactly that shape (the caller keeps it raw for LineDecoder, which decodes it or
 * names the error). */
static int decode_short(const char *s, Py_ssize_t n, Short *out) {
    long long Y, M, D, h, mi, sec, frac = 0, pid = 0, off = 0;
    Py_ssize_t i = 19;
    if (n < 21 || !digits(s, 4, &Y) || s[4] != '-' || !digits(s + 5, 2, &M) || s[7] != '-' ||
        !digits(s + 8, 2, &D) || s[10] != 'T' || !digits(s + 11, 2, &h) || s[13] != ':' ||
        !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &sec))
        return 0;
    if (Y < 1970 || M < 1 || M > 12 || D < 1 || D > days_in_month(Y, M) || h > 23 || mi > 59 ||
        sec > 60)
        return 0;
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
        if (i == p || i - p > 18 || i >= n || s[i] != ']') return 0;
        digits(s + p, (int)(i - p), &pid);
        i++;
    }
    if (i >= n || s[i] != ':') return 0;
    i++;
    if (i < n && s[i] == ' ') i++;
    Py_ssize_t end = n;
    if (end > i && s[end - 1] == '\r') end--;
    out->time_us = (days_from_civil(Y, M, D) * 86400 + h * 3600 + mi * 60 + sec - off) * 1000000 + frac;
    out->pid = pid, out->msg = i, out->end = end;
    return 1;
}

/* A LogLine(node, time_us, "", pid, message): `line_type` is a tuple subclass of 5 fields (a
 * NamedTuple, whose __new__ does no more than this). */
static PyObject *log_line(PyTypeObject *line_type, PyObject *node, PyObject *empty,
                          PyObject **last_pid, const char *s, const Short *d) {
    PyObject *line = line_type->tp_alloc(line_type, 5);
    if (line == NULL) return NULL;
    PyObject *t = PyLong_FromLongLong(d->time_us), *pid;
    if (*last_pid != NULL && PyLong_AsLongLong(*last_pid) == d->pid) { /* one server's PID */
        pid = *last_pid;
        Py_INCREF(pid);
    } else if ((pid = PyLong_FromLongLong(d->pid)) != NULL) {
        Py_XDECREF(*last_pid);
        *last_pid = pid;
        Py_INCREF(pid);
    }
    PyObject *msg = PyUnicode_DecodeUTF8(s + d->msg, d->end - d->msg, "replace");
    if (t == NULL || pid == NULL || msg == NULL) {
        Py_XDECREF(t), Py_XDECREF(pid), Py_XDECREF(msg), Py_DECREF(line);
        return NULL;
    }
    Py_INCREF(node), Py_INCREF(empty);
    PyTuple_SET_ITEM(line, 0, node), PyTuple_SET_ITEM(line, 1, t);
    PyTuple_SET_ITEM(line, 2, empty), PyTuple_SET_ITEM(line, 3, pid);
    PyTuple_SET_ITEM(line, 4, msg);
    return line;
}

/* Newlines in a buffer: a loop the compiler vectorizes. */
__attribute__((optimize("O3"))) static Py_ssize_t count_newlines(const char *s, Py_ssize_t n) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) count += s[i] == '\n';
    return count;
}

/* The start of every line holding a keyword, in order, in one pass over the buffer: a
 * Wu-Manber search (Horspool's skip over all keywords at once, on two-byte blocks), which
 * looks at a small fraction of the bytes where a memmem per keyword would read them all once
 * per keyword. Returns the number of starts written, or -1 on a memory error. Needs no GIL. */
static Py_ssize_t keyword_starts(const char *s, Py_ssize_t n, const char *const *kws,
                                 const Py_ssize_t *lens, int nkw, Py_ssize_t m,
                                 Py_ssize_t **starts_out) {
    Py_ssize_t cap = 1024, count = 0;
    unsigned char *shift = PyMem_RawMalloc(65536);
    Py_ssize_t *starts = PyMem_RawMalloc(cap * sizeof(Py_ssize_t));
    if (shift == NULL || starts == NULL) goto nomem;
    unsigned char most = m - 1 > 255 ? 255 : (unsigned char)(m - 1);
    memset(shift, most, 65536);
    for (int k = 0; k < nkw; k++)
        for (Py_ssize_t j = 1; j < m; j++) {
            unsigned h = (unsigned char)kws[k][j - 1] << 8 | (unsigned char)kws[k][j];
            if (m - 1 - j < shift[h]) shift[h] = (unsigned char)(m - 1 - j);
        }
    Py_ssize_t pos = m - 1;
    while (pos < n) {
        unsigned char d = shift[(unsigned char)s[pos - 1] << 8 | (unsigned char)s[pos]];
        if (d) {
            pos += d;
            continue;
        }
        Py_ssize_t w = pos - m + 1;
        int hit = 0;
        for (int k = 0; k < nkw && !hit; k++)
            hit = w + lens[k] <= n && memcmp(s + w, kws[k], (size_t)lens[k]) == 0;
        if (!hit) {
            pos++;
            continue;
        }
        const char *nl = memrchr(s, '\n', (size_t)w);
        if (count == cap) {
            Py_ssize_t *more = PyMem_RawRealloc(starts, 2 * cap * sizeof(Py_ssize_t));
            if (more == NULL) goto nomem;
            starts = more, cap *= 2;
        }
        starts[count++] = nl == NULL ? 0 : nl - s + 1;
        const char *eol = memchr(s + w, '\n', (size_t)(n - w));
        if (eol == NULL) break;
        pos = eol - s + 1 + m - 1; /* the next line's first window */
    }
    PyMem_RawFree(shift);
    *starts_out = starts;
    return count;
nomem:
    PyMem_RawFree(shift);
    PyMem_RawFree(starts);
    return -1;
}

/* A tuple subclass laid out as a tuple (a NamedTuple), which tp_alloc can make directly. */
static int is_plain_tuple_type(PyObject *t) {
    if (!PyType_Check(t)) return 0;
    PyTypeObject *type = (PyTypeObject *)t;
    return PyType_IsSubtype(type, &PyTuple_Type) &&
           type->tp_basicsize == PyTuple_Type.tp_basicsize &&
           type->tp_itemsize == PyTuple_Type.tp_itemsize;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *keywords, *node, *out = NULL, *lines = NULL, *empty = NULL, *last_pid = NULL;
    PyTypeObject *line_type;
    long long since_us;
    Py_ssize_t *starts = NULL;
    Short *found = NULL; /* per line: decoded (end >= 0) or to hand back raw (end < 0) */
    const char *kws[64];
    Py_ssize_t lens[64], m = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "y*O!ULO!:scan", &data, &PyTuple_Type, &keywords, &node,
                          &since_us, &PyType_Type, &line_type))
        return NULL;
    if (!is_plain_tuple_type((PyObject *)line_type)) {
        PyErr_SetString(PyExc_TypeError, "scan() needs a NamedTuple type for its lines");
        goto fail;
    }
    int nkw = (int)PyTuple_GET_SIZE(keywords);
    if (nkw < 1 || nkw > 64) {
        PyErr_SetString(PyExc_ValueError, "scan() takes 1 to 64 keywords");
        goto fail;
    }
    for (int k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(keywords, k);
        if (!PyBytes_Check(kw) || PyBytes_GET_SIZE(kw) < 2 ||
            memchr(PyBytes_AS_STRING(kw), '\n', (size_t)PyBytes_GET_SIZE(kw))) {
            PyErr_SetString(PyExc_ValueError, "keywords must be bytes of 2 or more, no newline");
            goto fail;
        }
        kws[k] = PyBytes_AS_STRING(kw), lens[k] = PyBytes_GET_SIZE(kw);
        if (lens[k] < m) m = lens[k];
    }
    const char *buf = data.buf;
    Py_ssize_t n = data.len;
    Py_ssize_t count, newlines;
    Py_BEGIN_ALLOW_THREADS /* the bytes object cannot change: search and decode in parallel */
    count = keyword_starts(buf, n, kws, lens, nkw, m, &starts);
    newlines = count_newlines(buf, n);
    if (count > 0 && (found = PyMem_RawMalloc((size_t)count * sizeof(Short))) == NULL)
        count = -1;
    for (Py_ssize_t j = 0; j < count; j++) {
        const char *line = buf + starts[j];
        const char *eol = memchr(line, '\n', (size_t)(n - starts[j]));
        Py_ssize_t len = eol == NULL ? n - starts[j] : eol - line;
        if (!(is_digit(line[0]) && decode_short(line, len, &found[j])))
            found[j].end = -1 - len; /* raw: the line's length, encoded */
    }
    Py_END_ALLOW_THREADS
    if (count < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t raw = 0;
    lines = PyList_New(0);
    empty = PyUnicode_New(0, 0);
    if (lines == NULL || empty == NULL) goto fail;
    for (Py_ssize_t j = 0; j < count; j++) {
        const char *line = buf + starts[j];
        const Short *d = &found[j];
        PyObject *item;
        if (d->end >= 0) {
            if (d->time_us < since_us) continue;
            item = log_line(line_type, node, empty, &last_pid, line, d);
        } else {
            item = PyBytes_FromStringAndSize(line, -1 - d->end);
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
    Py_XDECREF(empty);
    Py_XDECREF(last_pid);
    PyMem_RawFree(found);
    PyMem_RawFree(starts);
    PyBuffer_Release(&data);
    return out;
}

/* ---- tokenize: era C/D slot lines --------------------------------------------------------- */

enum { OTHER, HEADER, PROMPT, EVAL, TOTAL, LAUNCH, RELEASE };

typedef struct {
    const char *s;
    Py_ssize_t n, i;
} Cursor;

static int lit(Cursor *c, const char *text) {
    size_t k = strlen(text);
    if ((size_t)(c->n - c->i) < k || memcmp(c->s + c->i, text, k) != 0) return 0;
    c->i += (Py_ssize_t)k;
    return 1;
}

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

/* `6739.60` -> microseconds, as parse.ms_to_us; 0 when not that shape or out of range */
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

/* `what` within the short s[0:n]: memchr for its first byte, then compare (no setup cost) */
static int contains(const char *s, Py_ssize_t n, const char *what) {
    size_t k = strlen(what);
    const char *end = s + n, *p = s;
    while ((size_t)(end - p) >= k && (p = memchr(p, what[0], (size_t)(end - p) - k + 1))) {
        if (memcmp(p, what, k) == 0) return 1;
        p++;
    }
    return 0;
}

static PyObject *kinds[RELEASE + 1]; /* the kind numbers as ints, made once */

static PyObject *token(int kind, long long slot, long long task, long long us, long long count) {
    PyObject *t = PyTuple_New(5);
    if (t == NULL) return NULL;
    Py_INCREF(kinds[kind]);
    PyTuple_SET_ITEM(t, 0, kinds[kind]);
    long long values[4] = {slot, task, us, count};
    int numbers = kind == OTHER ? 0 : (kind == PROMPT || kind == EVAL || kind == TOTAL) ? 4 : 2;
    for (int j = 0; j < 4; j++) {
        PyObject *v = j < numbers ? PyLong_FromLongLong(values[j]) : Py_NewRef(Py_None);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, j + 1, v);
    }
    return t;
}

/* What one common line says: a parse.Token with every number present (0 where the Token
 * holds None: OTHER's four, the slot lines' us and count). */
typedef struct {
    int kind;
    long long slot, task, us, count;
} Tok;

/* 1 and `t` filled when `msg` is a common era C/D slot line read exactly as parse.tokenize
 * reads it; 0 to hand it back to the reference. */
static int read_token(PyObject *msg, Tok *t) {
    if (!PyUnicode_IS_ASCII(msg)) return 0;
    Cursor c = {(const char *)PyUnicode_1BYTE_DATA(msg), PyUnicode_GET_LENGTH(msg), 0};
    /* an optional log prefix of digits, dots, spaces and level letters (`50.10.605.993 I `) */
    while (c.i < c.n && (is_digit(c.s[c.i]) || c.s[c.i] == '.' || c.s[c.i] == ' ' ||
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
    for (Py_ssize_t k = 0; k < rest_n; k++)
        if ((unsigned char)rest[k] < 0x20 || rest[k] == 0x7f) return 0; /* odd whitespace */
    spaces(&c);
    if (name == HEADER) {
        if (c.i == c.n) return t->kind = HEADER, 1;
        int kind = lit(&c, "prompt eval time") ? PROMPT
                   : lit(&c, "eval time")      ? EVAL
                   : lit(&c, "total time")     ? TOTAL
                                               : OTHER;
        if (kind == OTHER) {
            if (contains(rest, rest_n, "time") || contains(rest, rest_n, "launch_slot_") ||
                contains(rest, rest_n, "release"))
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
        if (contains(rest, rest_n, "processing task")) return t->kind = LAUNCH, 1;
        if (contains(rest, rest_n, "stop processing")) return 0;
        return t->kind = OTHER, 1;
    }
    /* `release`: a stop line when it says so; anything else is for the reference to judge */
    if (contains(rest, rest_n, "launch_slot_") || !contains(rest, rest_n, "stop processing"))
        return 0;
    return t->kind = RELEASE, 1;
}

static PyObject *tokenize(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "tokenize() takes a str");
        return NULL;
    }
    Tok t;
    if (!read_token(arg, &t)) Py_RETURN_NONE;
    return token(t.kind, t.slot, t.task, t.us, t.count);
}

/* ---- feed: Parser.feed_all's state machine for runs of common lines ------------------------ */

/* Parser.block as C values: `any` 0 for _NO_BLOCK; each field with its `has` bit (None: 0). */
enum { B_SLOT, B_TASK, B_PROMPT_US, B_PROMPT_TOKENS, B_GENERATION_US, B_GENERATED_TOKENS };
static const char *const block_fields[6] = {
    "slot", "task", "prompt_us", "prompt_tokens", "generation_us", "generated_tokens"};
typedef struct {
    int any, has[6];
    long long v[6];
} Block;

/* The parser's block into `b`: 1, or 0 when a field is no int that fits (feed hands back). */
static int block_in(PyObject *block, PyObject *no_block, Block *b) {
    memset(b, 0, sizeof *b);
    if (block == no_block) return 1;
    b->any = 1;
    for (int f = 0; f < 6; f++) {
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

/* `b` back into the parser: _NO_BLOCK, or a new _Block(slot, task, ...). 0, or -1 on error. */
static int block_out(PyObject *parser, const Block *b, PyObject *block_type, PyObject *no_block) {
    PyObject *block;
    if (!b->any) {
        block = Py_NewRef(no_block);
    } else {
        PyObject *args = PyTuple_New(6);
        if (args == NULL) return -1;
        for (int f = 0; f < 6; f++) {
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
    int bad = PyObject_SetAttrString(parser, "block", block);
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

/* One common line's token applied as Parser.feed_all applies it: 1 done, 0 hand back (the line
 * would add a pending stop, which Python decides), -1 on error. */
static int apply(const Tok *t, PyObject *line, PyObject *node, Block *b, PyObject *started,
                 PyObject *last_timed, PyObject *const *types, Py_ssize_t max_started,
                 PyObject *out) {
    PyObject *time = PyTuple_GET_ITEM(line, 1), *pid = PyTuple_GET_ITEM(line, 3);
    int matches = (!b->has[B_TASK] || b->v[B_TASK] == t->task) &&
                  (!b->has[B_SLOT] || b->v[B_SLOT] == t->slot);
    switch (t->kind) {
    case PROMPT:
    case EVAL: {
        if (!b->any || !matches) memset(b, 0, sizeof *b), b->any = 1;
        b->v[B_SLOT] = t->slot, b->v[B_TASK] = t->task, b->has[B_SLOT] = b->has[B_TASK] = 1;
        int f = t->kind == PROMPT ? B_PROMPT_US : B_GENERATION_US;
        b->v[f] = t->us, b->v[f + 1] = t->count, b->has[f] = b->has[f + 1] = 1;
        return 1;
    }
    case TOTAL: {
        Block used = *b;
        if (!b->any || !matches) memset(&used, 0, sizeof used);
        memset(b, 0, sizeof *b);
        PyObject *key = pair(t->slot, t->task);
        if (key == NULL) return -1;
        int launched = PyDict_Contains(started, key); /* started.pop(key, None) */
        int bad = launched == 1 ? PyDict_DelItem(started, key) : launched;
        Py_DECREF(key);
        if (bad < 0) return -1;
        PyObject *slot = PyLong_FromLongLong(t->slot), *task = PyLong_FromLongLong(t->task);
        if (slot == NULL || task == NULL || PyDict_SetItem(last_timed, slot, task) < 0) {
            Py_XDECREF(slot), Py_XDECREF(task);
            return -1;
        }
        long long end = PyLong_AsLongLong(time);
        if (end == -1 && PyErr_Occurred()) {
            Py_DECREF(slot), Py_DECREF(task);
            return -1;
        }
        PyObject *items[11] = {
            Py_NewRef(node),
            PyLong_FromLongLong(end - t->us),
            Py_NewRef(time),
            PyLong_FromLongLong(t->count),
            opt_int(used.has[B_PROMPT_TOKENS], used.v[B_PROMPT_TOKENS]),
            opt_int(used.has[B_GENERATED_TOKENS], used.v[B_GENERATED_TOKENS]),
            opt_int(used.has[B_PROMPT_US], used.v[B_PROMPT_US]),
            opt_int(used.has[B_GENERATION_US], used.v[B_GENERATION_US]),
            slot,
            task,
            Py_NewRef(pid),
        };
        PyObject *iv = record((PyTypeObject *)types[0], items, 11);
        if (iv == NULL) return -1;
        bad = PyList_Append(out, iv);
        Py_DECREF(iv);
        return bad ? -1 : 1;
    }
    case LAUNCH: {
        PyObject *key = pair(t->slot, t->task);
        if (key == NULL) return -1;
        int bad = PyDict_SetItem(started, key, time);
        Py_DECREF(key);
        if (bad) return -1;
        if (PyDict_GET_SIZE(started) > max_started) { /* forget the oldest launch */
            Py_ssize_t at = 0;
            PyObject *oldest, *value;
            if (PyDict_Next(started, &at, &oldest, &value)) {
                Py_INCREF(oldest);
                bad = PyDict_DelItem(started, oldest);
                Py_DECREF(oldest);
                if (bad) return -1;
            }
        }
        PyObject *items[7] = {
            Py_NewRef(node), Py_NewRef(time), Py_NewRef(types[1]), Py_NewRef(pid),
            PyLong_FromLongLong(t->slot), PyLong_FromLongLong(t->task), Py_NewRef(types[2]),
        };
        PyObject *ev = record((PyTypeObject *)types[3], items, 7);
        if (ev == NULL) return -1;
        bad = PyList_Append(out, ev);
        Py_DECREF(ev);
        return bad ? -1 : 1;
    }
    case RELEASE: { /* a pending stop when launched here and not yet timed: Python's to add */
        PyObject *key = pair(t->slot, t->task), *slot = PyLong_FromLongLong(t->slot);
        if (key == NULL || slot == NULL) {
            Py_XDECREF(key), Py_XDECREF(slot);
            return -1;
        }
        int launched = PyDict_Contains(started, key);
        PyObject *timed = launched == 1 ? PyDict_GetItemWithError(last_timed, slot) : NULL;
        Py_DECREF(key), Py_DECREF(slot);
        if (launched < 0 || PyErr_Occurred()) return -1;
        if (launched == 0) return 1;
        if (timed == NULL) return 0;
        long long timed_task = PyLong_AsLongLong(timed);
        if (timed_task == -1 && PyErr_Occurred()) {
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

/* feed(parser, lines, start, out, types) -> the index of the first line left to Python. */
static PyObject *feed(PyObject *self, PyObject *args) {
    PyObject *parser, *lines, *out, *types;
    Py_ssize_t start, max_started;
    if (!PyArg_ParseTuple(args, "OO!nO!O!n:feed", &parser, &PyTuple_Type, &lines, &start,
                          &PyList_Type, &out, &PyTuple_Type, &types, &max_started))
        return NULL;
    if (PyTuple_GET_SIZE(types) != 6) {
        PyErr_SetString(PyExc_ValueError,
                        "feed() types: (Interval, STARTED, '', Event, _Block, _NO_BLOCK)");
        return NULL;
    }
    PyObject *ty[6];
    for (int k = 0; k < 6; k++) ty[k] = PyTuple_GET_ITEM(types, k);
    for (int k = 0; k < 4; k += 3)
        if (!is_plain_tuple_type(ty[k])) {
            PyErr_SetString(PyExc_TypeError, "feed() needs NamedTuple types for its records");
            return NULL;
        }
    PyObject *block_type = ty[4], *no_block = ty[5];
    Py_ssize_t n = PyTuple_GET_SIZE(lines), i = start;
    PyObject *node = PyObject_GetAttrString(parser, "node");
    PyObject *pid = PyObject_GetAttrString(parser, "pid");
    PyObject *started = PyObject_GetAttrString(parser, "started");
    PyObject *last_timed = PyObject_GetAttrString(parser, "last_timed");
    PyObject *block = PyObject_GetAttrString(parser, "block");
    int ok = -1, changed = 0;
    Block b;
    if (node == NULL || pid == NULL || started == NULL || last_timed == NULL || block == NULL)
        goto done;
    if (!PyDict_CheckExact(started) || !PyDict_CheckExact(last_timed)) {
        ok = 1; /* not what Parser holds: leave it all to Python */
        goto done;
    }
    if ((ok = block_in(block, no_block, &b)) != 1) goto done;
    for (; i < n; i++) {
        PyObject *line = PyTuple_GET_ITEM(lines, i);
        if (!PyTuple_Check(line) || PyTuple_GET_SIZE(line) != 5) break;
        PyObject *msg = PyTuple_GET_ITEM(line, 4), *line_pid = PyTuple_GET_ITEM(line, 3);
        Tok t;
        if (!PyUnicode_Check(msg) || !read_token(msg, &t)) break;
        if (line_pid != pid) { /* another server (Python restarts), unless the same or 0 */
            int same = PyObject_RichCompareBool(line_pid, pid, Py_EQ);
            int zero = same == 1 ? 0 : PyObject_Not(line_pid);
            if (same < 0 || zero < 0) {
                ok = -1;
                break;
            }
            if (!same && !zero) break;
        }
        Block before = b;
        int done = apply(&t, line, node, &b, started, last_timed, ty, max_started, out);
        if (done <= 0) {
            b = before;
            if (done < 0) ok = -1;
            break;
        }
        changed = 1;
    }
    if (changed && block_out(parser, &b, block_type, no_block) < 0) ok = -1;
done:
    Py_XDECREF(node), Py_XDECREF(pid), Py_XDECREF(started), Py_XDECREF(last_timed);
    Py_XDECREF(block);
    if (ok < 0) return NULL;
    return PyLong_FromSsize_t(ok == 0 ? start : i);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, keywords, node, since_us, line_type) -> (lines, newlines, raw): the lines of data\n"
     "holding a keyword, in order, each line_type(node, time_us, '', pid, message) when it is\n"
     "a plain short-iso-precise line (left out when older than since_us), else its bytes; and\n"
     "how many newlines data holds, and how many of the lines are bytes."},
    {"feed", feed, METH_VARARGS,
     "feed(parser, lines, start, out, types, max_started) -> index: Parser.feed_all on\n"
     "lines[start:] for as long as they are common era C/D slot lines of the parser's server\n"
     "that add no pending stop, the records appended to out; the index of the first line\n"
     "it leaves to Python (len(lines) when none)."},
    {"tokenize", tokenize, METH_O,
     "tokenize(msg) -> parse.tokenize(msg) for the common era C and D slot lines, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "exporter._speedups",
    .m_doc = "Compiled fast paths for dump scanning and line tokenizing (see _speedups.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    for (int k = OTHER; k <= RELEASE; k++)
        if ((kinds[k] = PyLong_FromLong(k)) == NULL) return NULL;
    return PyModule_Create(&module);
}
