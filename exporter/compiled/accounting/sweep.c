/* sweep: the pending intervals swept up to a watermark: concurrency, mix and busy time.
 *
 * A part of _accounting.c, which includes the parts in order (one translation unit); it
 * reads what the parts before it define. */

typedef struct {
    long long t;
    int32_t node;
    int32_t kind; /* its bit's index */
} Ev;

/* Stable sort by t. The starts and the ends of the pending intervals come nearly sorted (each
 * node's in the order its journal logged them: by end): insertion sort while that is cheap,
 * else LSD radix sort on the bytes that differ (from where insertion sort left it: it only
 * ever moves an event before greater times, so the order of equal times stays). -1 when out
 * of memory. */
static int sort_events(Ev *ev, Py_ssize_t n) {
    long long budget = 8 * (long long)n + 64; /* moves */
    Py_ssize_t i = 1;
    for (; i < n; i++) {
        Ev x = ev[i];
        Py_ssize_t j = i;
        for (; j > 0 && ev[j - 1].t > x.t && budget > 0; j--, budget--) ev[j] = ev[j - 1];
        ev[j] = x;
        if (budget == 0) break;
    }
    if (i >= n) return 0;
    Py_ssize_t(*count)[256] = calloc(8, sizeof *count);
    Ev *tmp = malloc(sizeof(Ev) * (size_t)n);
    if (count == NULL || tmp == NULL) {
        free(count), free(tmp);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t u = (uint64_t)ev[k].t ^ ((uint64_t)1 << 63);
        for (int b = 0; b < 8; b++) count[b][(u >> (8 * b)) & 0xff]++;
    }
    Ev *from = ev, *to = tmp;
    for (int b = 0; b < 8; b++) {
        Py_ssize_t *c = count[b], pos = 0;
        int trivial = 0;
        for (int d = 0; d < 256; d++)
            if (c[d] == n) trivial = 1;
        if (trivial) continue; /* every event has this byte */
        for (int d = 0; d < 256; d++) {
            Py_ssize_t k = c[d];
            c[d] = pos, pos += k;
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            uint64_t u = (uint64_t)from[k].t ^ ((uint64_t)1 << 63);
            to[c[(u >> (8 * b)) & 0xff]++] = from[k];
        }
        Ev *x = from;
        from = to, to = x;
    }
    if (from != ev) memcpy(ev, from, sizeof(Ev) * (size_t)n);
    free(count), free(tmp);
    return 0;
}

static PyObject *list_of(const long long *v, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, x);
    }
    return list;
}

#define MAX_KINDS 24 /* 1 << MAX_KINDS mixes: Accounting lists every one of them */

/* sweep(pending, lo, hi, n_nodes, n_kinds) -> (keep, conc, mix, busy, slot_busy) | None */
static PyObject *sweep(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "sweep(pending: list, lo, hi, n_nodes, n_kinds)");
        return NULL;
    }
    PyObject *pending = args[0], *hi_o = args[2];
    Py_ssize_t n_nodes = PyLong_AsSsize_t(args[3]);
    if (n_nodes == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n_kinds = PyLong_AsSsize_t(args[4]);
    if (n_kinds == -1 && PyErr_Occurred()) return NULL;
    long long lo, hi;
    if (!as_i64(args[1], &lo) || !as_i64(hi_o, &hi) || n_nodes < 0 || n_nodes > INT32_MAX ||
        n_kinds < 0 || n_kinds > MAX_KINDS)
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(pending), n_masks = (Py_ssize_t)1 << n_kinds;
    Ev *ev = malloc(sizeof(Ev) * (size_t)(2 * n + 1)); /* the ends, then (from ev + n) starts */
    long long *acc = calloc((size_t)(3 * n_nodes + n_kinds + n_nodes + 1 + n_masks + n_nodes + 1),
                            sizeof(long long));
    PyObject *keep = PyList_New(0), *out = NULL;
    if (ev == NULL || acc == NULL || keep == NULL) {
        if (keep != NULL) PyErr_NoMemory();
        goto done;
    }
    long long *node_count = acc, *node_since = acc + n_nodes, *node_busy = acc + 2 * n_nodes;
    long long *kind_count = acc + 3 * n_nodes, *conc = kind_count + n_kinds;
    long long *mix = conc + n_nodes + 1, *slot_busy = mix + n_masks, d;
    /* the intervals: each one's start and end in this window */
    Py_ssize_t n_ends = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyList_GET_ITEM(pending, i);
        long long s, e, node, bit;
        if (i + 16 < n) __builtin_prefetch(PyList_GET_ITEM(pending, i + 16));
        if (i + 8 < n) { /* (the start and end: ints of the records, anywhere) */
            PyObject *ahead = PyList_GET_ITEM(pending, i + 8);
            if (PyTuple_CheckExact(ahead) && PyTuple_GET_SIZE(ahead) == P_N)
                __builtin_prefetch(PyTuple_GET_ITEM(ahead, P_START)),
                    __builtin_prefetch(PyTuple_GET_ITEM(ahead, P_END));
        }
        if (!PyTuple_CheckExact(p) || PyTuple_GET_SIZE(p) != P_N ||
            !as_i64(PyTuple_GET_ITEM(p, P_START), &s) || !as_i64(PyTuple_GET_ITEM(p, P_END), &e) ||
            !as_i64(PyTuple_GET_ITEM(p, P_NODE), &node) ||
            !as_i64(PyTuple_GET_ITEM(p, P_BIT), &bit) ||
            node < 0 || node >= n_nodes || bit < 0 || bit >= ((long long)1 << n_kinds) ||
            (bit & (bit - 1)))
            goto fallback;
        if (s < hi) {
            /* (bit 0: an occupancy of no kind, busy but in no mix) */
            Ev x = {.t = e < hi ? e : hi, .node = (int32_t)node,
                    .kind = bit ? __builtin_ctzll((unsigned long long)bit) : -1};
            if (__builtin_sub_overflow(x.t, s, &d) || d < 0 ||
                !add_ok(slot_busy[node], d, &slot_busy[node]))
                goto fallback;
            ev[n_ends] = x;
            x.t = s;
            ev[n + n_ends++] = x;
        }
        if (e > hi) {
            PyObject *kept = p;
            if (s < hi)
                kept = PyTuple_Pack(P_N, hi_o, PyTuple_GET_ITEM(p, P_END),
                                    PyTuple_GET_ITEM(p, P_NODE), PyTuple_GET_ITEM(p, P_BIT));
            else
                Py_INCREF(p);
            if (kept == NULL || PyList_Append(keep, kept) < 0) {
                Py_XDECREF(kept);
                goto done;
            }
            Py_DECREF(kept);
        }
    }
    Ev *ends = ev, *starts = ev + n;
    if (sort_events(ends, n_ends) < 0 || sort_events(starts, n_ends) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* the events in the order Python's tuples sort in: by time, an end before a start (and
     * among ends or starts at one time, any order: nothing between them depends on it, as
     * long as no count goes below 0) */
    int busy_nodes = 0;
    long long mask = 0, t_prev = lo;
    for (Py_ssize_t i_end = 0, i_start = 0; i_end < n_ends;) {
        int is_end = i_start == n_ends || ends[i_end].t <= starts[i_start].t;
        Ev x = is_end ? ends[i_end++] : starts[i_start++];
        if (x.t != t_prev) {
            if (__builtin_sub_overflow(x.t, t_prev, &d) ||
                !add_ok(conc[busy_nodes], d, &conc[busy_nodes]) ||
                !add_ok(mix[mask], d, &mix[mask]))
                goto fallback;
            t_prev = x.t;
        }
        long long bit = x.kind >= 0 ? (long long)1 << x.kind : 0;
        if (!is_end) {
            if (node_count[x.node]++ == 0) busy_nodes++, node_since[x.node] = x.t;
            if (bit && kind_count[x.kind]++ == 0) mask |= bit;
        } else {
            /* a count below 0 (an interval that ends before it starts): Python's to sweep */
            if (--node_count[x.node] < 0 || (bit && --kind_count[x.kind] < 0)) goto fallback;
            if (node_count[x.node] == 0) {
                busy_nodes--;
                if (__builtin_sub_overflow(x.t, node_since[x.node], &d) ||
                    !add_ok(node_busy[x.node], d, &node_busy[x.node]))
                    goto fallback;
            }
            if (bit && kind_count[x.kind] == 0) mask &= ~bit;
        }
    }
    if (__builtin_sub_overflow(hi, t_prev, &d) || !add_ok(conc[0], d, &conc[0]) ||
        !add_ok(mix[0], d, &mix[0]))
        goto fallback;
    {
        PyObject *c = list_of(conc, n_nodes + 1), *x = list_of(mix, n_masks);
        PyObject *b = list_of(node_busy, n_nodes), *sb = list_of(slot_busy, n_nodes);
        if (c != NULL && x != NULL && b != NULL && sb != NULL)
            out = PyTuple_Pack(5, keep, c, x, b, sb);
        Py_XDECREF(c), Py_XDECREF(x), Py_XDECREF(b), Py_XDECREF(sb);
    }
    goto done;
fallback:
    out = Py_None;
    Py_INCREF(out);
done:
    free(ev), free(acc);
    Py_XDECREF(keep);
    return out;
}
