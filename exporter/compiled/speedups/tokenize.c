/* tokenize: the common era C/D slot lines read into tokens.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

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
