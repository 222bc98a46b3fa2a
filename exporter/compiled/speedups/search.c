/* search: a chunk part's keyword lines found (Wu-Manber) and decoded, without the GIL.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

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
