/* add_all: the finished requests and launches of a batch, counted per node and kind.
 *
 * A part of _accounting.c, which includes the parts in order (one translation unit); it
 * reads what the parts before it define. */

/* the sums of one KindCounters, in the order of the names from A_REQUESTS (to A_GENERATION_US) */
enum {
    S_REQUESTS,
    S_REQUEST_US,
    S_TOKENS,
    S_PROMPT_TOKENS,
    S_GEN_TOKENS,
    S_PROMPT_US,
    S_GEN_US,
    N_SUMS
};

/* The histograms a timed request counts in (intake.interval and intake._phases): its duration,
 * always; its prompt evaluation and its generation, each when its timing block gave it (a
 * value None counts in no bucket). Each has its own bounds (a tuple of the Accounting), its
 * buckets (a list of the KindCounters: one count a bound, then +Inf) and the sum of the values
 * they took (an int of the KindCounters). */
enum { H_DURATION, H_PROMPT, H_GENERATION, N_HIST };
static const struct {
    int bounds;       /* the Accounting's bounds: a C_ index */
    int sum, buckets; /* the KindCounters' sum and buckets: A_ indexes */
    int field;        /* the Interval field it takes (I_N: the duration, end - start) */
} hists[N_HIST] = {
    [H_DURATION] = {C_BUCKETS_US, A_HISTOGRAM_US, A_BUCKETS, I_N},
    [H_PROMPT] = {C_PROMPT_BUCKETS_US, A_PROMPT_HISTOGRAM_US, A_PROMPT_BUCKETS, I_PROMPT_US},
    [H_GENERATION] = {C_GENERATION_BUCKETS_US, A_GENERATION_HISTOGRAM_US, A_GENERATION_BUCKETS,
                      I_GENERATION_US},
};

typedef struct {
    PyObject *kind;     /* the kind name, as `kind_of` gave it (strong) */
    PyObject *counters; /* its KindCounters of the node (strong) */
    PyObject *bit;      /* kind_bit[kind] (strong) */
    int bit_int;
    int index;          /* the kind's bit (its index in the sorted kinds), or -1 */
    long long sum[N_SUMS];
    long long hsum[N_HIST];     /* what each histogram's sum takes */
    long long *buckets[N_HIST]; /* what each of its buckets takes (one block, from buckets[0]) */
} KSlot;

#define MAX_CACHED_KINDS 64

typedef struct {
    PyObject *name;      /* the node, as the record held it (strong) */
    PyObject *ns;        /* nodes[name], its NodeState (strong) */
    PyObject *in_flight; /* ns.in_flight (strong) */
    PyObject *kinds;     /* ns.kinds (strong) */
    PyObject *index;     /* node_index[name] (strong) */
    int index_int;       /* it is an int (a pending tuple of it holds only ints) */
    long long late, last_end;
    int has_end, start_lines;
    KSlot *k;
    Py_ssize_t nk, capk;
    Py_ssize_t by_index[MAX_CACHED_KINDS]; /* 1 + the position in k of each kind's slot, or 0 */
} NSlot;

/* A launch (STARTED) not yet put in its node's in_flight: most requests end in the batch that
 * launches them, and a launch that its interval takes out again before the batch ends leaves
 * in_flight as it found it (its other keys in their order, each entry as it was). So the
 * launches wait here, in order; an interval that finds its key here takes it out (and pops it
 * from in_flight too, which may hold it from before); and the rest go into in_flight in their
 * order before anything else may look (at every return to Python): updating a key in_flight
 * already holds keeps its place there, as `in_flight[key] = time` does. */
typedef struct {
    Py_ssize_t node; /* the node's slot: Sums.n[node] */
    long long slot, task;
    PyObject *key[2]; /* slot, task (strong) */
    PyObject *time;   /* (strong) */
} Launch;

#define MAX_LAUNCHES 64 /* waiting at once (then all go into in_flight) */

typedef struct {
    NSlot *n;
    Py_ssize_t nn, capn;
    Py_ssize_t n_buckets[N_HIST], all_buckets; /* each histogram's len(bounds) + 1; their sum */
    Launch launch[MAX_LAUNCHES];
    int nl;
} Sums;

static void launch_drop(Launch *l) {
    Py_DECREF(l->key[0]), Py_DECREF(l->key[1]), Py_DECREF(l->time);
}

/* Every waiting launch into its in_flight, in order. -1 on an error (a MemoryError). */
static int launches_flush(Sums *s) {
    int r = 0;
    for (int j = 0; j < s->nl; j++) {
        Launch *l = &s->launch[j];
        PyObject *key = int_tuple(2, l->key, 1);
        if (key == NULL || PyDict_SetItem(s->n[l->node].in_flight, key, l->time) < 0) r = -1;
        Py_XDECREF(key);
        launch_drop(l);
    }
    s->nl = 0;
    return r;
}

static void sums_free(Sums *s) {
    for (int j = 0; j < s->nl; j++) launch_drop(&s->launch[j]); /* (flushed before: none) */
    s->nl = 0;
    for (Py_ssize_t i = 0; i < s->nn; i++) {
        NSlot *n = &s->n[i];
        for (Py_ssize_t j = 0; j < n->nk; j++) {
            KSlot *k = &n->k[j];
            Py_DECREF(k->kind), Py_DECREF(k->counters), Py_DECREF(k->bit);
            free(k->buckets[0]);
        }
        free(n->k);
        Py_DECREF(n->name), Py_DECREF(n->ns), Py_DECREF(n->in_flight), Py_DECREF(n->kinds);
        Py_DECREF(n->index);
    }
    free(s->n);
    s->n = NULL, s->nn = s->capn = 0;
}

/* counters.<name>[b] += add[b] for each of the n buckets that took a value; -1 on an error (a
 * MemoryError, or a RuntimeError when the list is no longer one of n) */
static int buckets_flush(PyObject *counters, PyObject *name, const long long *add, Py_ssize_t n) {
    Py_ssize_t b = 0;
    while (b < n && add[b] == 0) b++;
    if (b == n) return 0; /* (a histogram that took nothing: the Python code leaves it alone) */
    PyObject *buckets = PyObject_GetAttr(counters, name);
    if (buckets == NULL) return -1;
    int r = 0;
    if (!PyList_CheckExact(buckets) || PyList_GET_SIZE(buckets) != n) {
        PyErr_Format(PyExc_RuntimeError, "the %U changed while add_all ran", name);
        r = -1;
    } else {
        for (; b < n; b++) {
            if (add[b] == 0) continue;
            PyObject *d = PyLong_FromLongLong(add[b]);
            PyObject *old = PyList_GET_ITEM(buckets, b);
            PyObject *sum = d == NULL ? NULL : PyNumber_InPlaceAdd(old, d);
            Py_XDECREF(d);
            if (sum == NULL)
                r = -1;
            else
                PyList_SetItem(buckets, b, sum); /* (steals sum, drops old) */
        }
    }
    Py_DECREF(buckets);
    return r;
}

/* Add every sum to the Python objects, as the Python loop would have, record by record (ints
 * add up the same either way). -1 on an error (a MemoryError). */
static int sums_flush(Sums *s) {
    int r = launches_flush(s);
    for (Py_ssize_t i = 0; i < s->nn; i++) {
        NSlot *n = &s->n[i];
        for (Py_ssize_t j = 0; j < n->nk; j++) {
            KSlot *k = &n->k[j];
            if (k->sum[S_REQUESTS] == 0) continue; /* every interval counts one */
            for (int f = 0; f < N_SUMS; f++)
                if (k->sum[f] && attr_add(k->counters, names[A_REQUESTS + f], k->sum[f]) < 0)
                    r = -1;
            for (int h = 0; h < N_HIST; h++) {
                if (k->hsum[h] && attr_add(k->counters, names[hists[h].sum], k->hsum[h]) < 0)
                    r = -1;
                if (buckets_flush(k->counters, names[hists[h].buckets], k->buckets[h],
                                  s->n_buckets[h]) < 0)
                    r = -1;
            }
            memset(k->sum, 0, sizeof k->sum);
            memset(k->hsum, 0, sizeof k->hsum);
            memset(k->buckets[0], 0, sizeof(long long) * (size_t)s->all_buckets);
        }
        if (n->late && attr_add(n->ns, names[A_LATE], n->late) < 0) r = -1;
        n->late = 0;
        if (n->has_end) {
            PyObject *old = PyObject_GetAttr(n->ns, names[A_LAST_END]);
            PyObject *end = PyLong_FromLongLong(n->last_end);
            int later = old == NULL || end == NULL ? -1
                        : old == Py_None           ? 1
                                                   : PyObject_RichCompareBool(end, old, Py_GT);
            if (later < 0 || (later && PyObject_SetAttr(n->ns, names[A_LAST_END], end) < 0))
                r = -1;
            Py_XDECREF(old), Py_XDECREF(end);
            n->has_end = 0;
        }
        if (n->start_lines && PyObject_SetAttr(n->ns, names[A_START_LINES], Py_True) < 0) r = -1;
        n->start_lines = 0;
    }
    return r;
}

/* The node's slot: found by the record's node (the same str object, nearly always), else
 * looked up; NULL with *err 0 when the node is not one the C side can keep (hand back), with
 * *err 1 on an error. */
static NSlot *node_slot(Sums *s, PyObject *name, PyObject *nodes, PyObject *node_index,
                        int *err) {
    *err = 0;
    for (Py_ssize_t i = 0; i < s->nn; i++)
        if (s->n[i].name == name) return &s->n[i];
    if (!PyUnicode_CheckExact(name)) return NULL;
    PyObject *ns = PyDict_GetItemWithError(nodes, name); /* (borrowed) */
    if (ns == NULL) {
        if (PyErr_Occurred()) *err = 1;
        return NULL;
    }
    for (Py_ssize_t i = 0; i < s->nn; i++)
        if (s->n[i].ns == ns) return &s->n[i];
    PyObject *index = PyDict_GetItemWithError(node_index, name);
    if (index == NULL) {
        if (PyErr_Occurred()) *err = 1;
        return NULL;
    }
    /* what NodeState holds: the dicts, and ints (last_end_us: or None) */
    int late = attr_is_int(ns, names[A_LATE], 0);
    int last = late == 1 ? attr_is_int(ns, names[A_LAST_END], 1) : late;
    if (late < 0 || last < 0 || !late || !last) {
        PyErr_Clear(); /* (no such attribute: Python names the error) */
        return NULL;
    }
    PyObject *in_flight = PyObject_GetAttr(ns, names[A_IN_FLIGHT]);
    PyObject *kinds = PyObject_GetAttr(ns, names[A_KINDS]);
    if (in_flight == NULL || kinds == NULL || !PyDict_CheckExact(in_flight) ||
        !PyDict_CheckExact(kinds)) {
        PyErr_Clear();
        Py_XDECREF(in_flight), Py_XDECREF(kinds);
        return NULL;
    }
    if (s->nn == s->capn) {
        Py_ssize_t cap = s->capn ? 2 * s->capn : 4;
        NSlot *more = realloc(s->n, sizeof(NSlot) * cap);
        if (more == NULL) {
            Py_DECREF(in_flight), Py_DECREF(kinds);
            PyErr_NoMemory();
            *err = 1;
            return NULL;
        }
        s->n = more, s->capn = cap;
    }
    NSlot *n = &s->n[s->nn++];
    memset(n, 0, sizeof *n);
    Py_INCREF(name), Py_INCREF(ns), Py_INCREF(index);
    n->name = name, n->ns = ns, n->in_flight = in_flight, n->kinds = kinds, n->index = index;
    n->index_int = PyLong_CheckExact(index);
    return n;
}

typedef struct {
    PyObject *nodes, *node_index, *kind_of, *kind_bit, *origin, *watermark, *pending;
    PyObject *key;    /* a 2-tuple to look (slot, task) up with, or NULL (make one each time) */
    PyObject *sorted; /* the kind names, sorted: bit i is kind sorted[i] */
    unsigned char *cache; /* kind_cache: 1 + the bit index of kind_of[tokens], or 0 */
    Py_ssize_t cache_len;
    long long origin_us, watermark_us;
    const long long *bounds[N_HIST]; /* each histogram's bounds (as ints) */
    Py_ssize_t n_bounds[N_HIST];
    int in_order[N_HIST]; /* each histogram's bounds never go down (as a config's rise) */
} Ctx;

/* 1 when the KindCounters' counter names[a] is an int (exactly), else 0 (no error set) */
static int counter_is_int(PyObject *counters, int a) {
    int ok = attr_is_int(counters, names[a], 0);
    if (ok < 0) PyErr_Clear(); /* (no such attribute: Python names the error) */
    return ok > 0;
}

/* The slot of the node's counters of `kind` (a str); NULL as node_slot. */
static KSlot *kind_slot(Sums *s, NSlot *n, PyObject *kind, const Ctx *c, int *err) {
    PyObject *kind_bit = c->kind_bit;
    *err = 0;
    for (Py_ssize_t j = 0; j < n->nk; j++)
        if (n->k[j].kind == kind) return &n->k[j];
    PyObject *counters = PyDict_GetItemWithError(n->kinds, kind);
    PyObject *bit = counters == NULL ? NULL : PyDict_GetItemWithError(kind_bit, kind);
    if (bit == NULL) {
        if (PyErr_Occurred()) *err = 1;
        return NULL;
    }
    for (Py_ssize_t j = 0; j < n->nk; j++) /* (another str of the same kind) */
        if (n->k[j].counters == counters && n->k[j].bit == bit) return &n->k[j];
    /* what KindCounters holds: ints, and for each histogram an int and a list of ints of one
     * per bucket */
    for (int a = A_REQUESTS; a <= A_GENERATION_US; a++)
        if (!counter_is_int(counters, a)) return NULL;
    for (int h = 0; h < N_HIST; h++) {
        if (!counter_is_int(counters, hists[h].sum)) return NULL;
        PyObject *buckets = PyObject_GetAttr(counters, names[hists[h].buckets]);
        if (buckets == NULL) {
            PyErr_Clear();
            return NULL;
        }
        int ok = PyList_CheckExact(buckets) && PyList_GET_SIZE(buckets) == s->n_buckets[h];
        for (Py_ssize_t b = 0; ok && b < s->n_buckets[h]; b++)
            ok = PyLong_CheckExact(PyList_GET_ITEM(buckets, b));
        Py_DECREF(buckets);
        if (!ok) return NULL;
    }
    if (n->nk == n->capk) {
        Py_ssize_t cap = n->capk ? 2 * n->capk : 4;
        KSlot *more = realloc(n->k, sizeof(KSlot) * cap);
        if (more == NULL) {
            PyErr_NoMemory();
            *err = 1;
            return NULL;
        }
        n->k = more, n->capk = cap;
    }
    long long *bucket_sums = calloc((size_t)s->all_buckets, sizeof(long long));
    if (bucket_sums == NULL) {
        PyErr_NoMemory();
        *err = 1;
        return NULL;
    }
    KSlot *k = &n->k[n->nk++];
    memset(k, 0, sizeof *k);
    Py_INCREF(kind), Py_INCREF(counters), Py_INCREF(bit);
    k->kind = kind, k->counters = counters, k->bit = bit;
    for (int h = 0; h < N_HIST; h++) /* (each histogram's buckets after the one before's) */
        k->buckets[h] = h ? k->buckets[h - 1] + s->n_buckets[h - 1] : bucket_sums;
    k->bit_int = PyLong_CheckExact(bit);
    /* the kind's index, when its bit and the sorted names agree on it (they do: both come from
     * Accounting.__init__), for the kind cache */
    k->index = -1;
    long long b;
    Py_ssize_t n_sorted = PyTuple_GET_SIZE(c->sorted);
    if (as_i64(bit, &b) && b > 0 && (b & (b - 1)) == 0 && n_sorted <= MAX_CACHED_KINDS) {
        int idx = __builtin_ctzll((unsigned long long)b);
        PyObject *name = idx < n_sorted ? PyTuple_GET_ITEM(c->sorted, idx) : NULL;
        if (name != NULL && PyUnicode_CheckExact(name) &&
            (name == kind || PyUnicode_Compare(name, kind) == 0)) {
            k->index = idx;
            n->by_index[idx] = n->nk;
        }
    }
    if (PyErr_Occurred()) PyErr_Clear(); /* (PyUnicode_Compare of two str: never) */
    return k;
}

/* bisect.bisect_left, step for step (so even unsorted bounds give what it gives) */
static Py_ssize_t bisect_left(const long long *a, Py_ssize_t n, long long x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (Py_ssize_t)(((size_t)lo + (size_t)hi) >> 1); /* (lo, hi >= 0) */
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* bisect.bisect_left of sorted bounds (how many are below x): as many steps whatever x is,
 * each without a branch (a value's bucket is no branch the processor could predict) */
static Py_ssize_t sorted_bisect_left(const long long *a, Py_ssize_t n, long long x) {
    const long long *base = a;
    while (n > 1) {
        Py_ssize_t half = n >> 1;
        base += half * (base[half - 1] < x); /* (arithmetic: a conditional here is a branch) */
        n -= half;
    }
    return (base - a) + (n == 1 && *base < x);
}

/* (slot, task) of a record, for in_flight: 1 when both are ints that fit, 0 when either is
 * None, -1 when the record is not one to take (something else) */
static int slot_task(PyObject *slot, PyObject *task, long long *slot_v, long long *task_v) {
    if (slot == Py_None || task == Py_None) return 0;
    return as_i64(slot, slot_v) && as_i64(task, task_v) ? 1 : -1;
}


/* Accounting._interval(iv, True): 1 done, 0 hand back (nothing changed), -1 error */
static int take_interval(Sums *s, const Ctx *c, PyObject *iv) {
    PyObject **f = &PyTuple_GET_ITEM(iv, 0);
    PyObject *start_o = f[I_START_US], *end_o = f[I_END_US], *tokens_o = f[I_TOKENS];
    long long start, end, v[N_COUNTS];
    if (!as_i64(start_o, &start) || !as_i64(end_o, &end)) return 0;
    for (int i = 0; i < N_COUNTS; i++)
        if (!opt_i64(f[I_TOKENS + i], &v[i])) return 0;
    long long slot, task;
    int has_key = slot_task(f[I_SLOT], f[I_TASK], &slot, &task);
    if (has_key < 0) return 0;
    int err;
    NSlot *n = node_slot(s, f[I_NODE], c->nodes, c->node_index, &err);
    if (n == NULL) return err ? -1 : 0;
    /* kind_of[tokens]: what the cache remembers of it (an entry of kind_of never changes),
     * else the dict */
    KSlot *k;
    long long tokens = v[0];
    int cacheable = tokens_o != Py_None && tokens >= 0 && tokens < c->cache_len;
    int idx = cacheable ? c->cache[tokens] - 1 : -1;
    if (idx >= PyTuple_GET_SIZE(c->sorted)) idx = -1; /* (never: the cache holds only bits) */
    if (idx >= 0 && n->by_index[idx]) {
        k = &n->k[n->by_index[idx] - 1];
    } else if (idx >= 0) {
        if ((k = kind_slot(s, n, PyTuple_GET_ITEM(c->sorted, idx), c, &err)) == NULL)
            return err ? -1 : 0;
    } else {
        PyObject *kind = PyDict_GetItemWithError(c->kind_of, tokens_o);
        if (kind == NULL) return PyErr_Occurred() ? -1 : 0; /* not seen before: Python's */
        if (!PyUnicode_CheckExact(kind)) return 0;
        if ((k = kind_slot(s, n, kind, c, &err)) == NULL) return err ? -1 : 0;
        if (cacheable && k->index >= 0) c->cache[tokens] = (unsigned char)(k->index + 1);
    }
    /* every sum first: a record whose sums would overflow is Python's, untouched */
    long long duration, sum;
    if (__builtin_sub_overflow(end, start, &duration)) return 0;
    if (!add_ok(k->sum[S_REQUESTS], 1, &sum) || !add_ok(k->sum[S_REQUEST_US], duration, &sum))
        return 0;
    for (int i = 0; i < N_COUNTS; i++)
        if (!add_ok(k->sum[S_TOKENS + i], v[i], &sum)) return 0;
    /* each histogram's value: the duration, the prompt's and the generation's (where given) */
    long long x[N_HIST];
    int has[N_HIST];
#pragma GCC unroll 3 /* (N_HIST: each histogram's field known while compiling) */
    for (int h = 0; h < N_HIST; h++) {
        int field = hists[h].field;
        has[h] = field == I_N || f[field] != Py_None;
        x[h] = field == I_N ? duration : v[field - I_TOKENS];
        if (has[h] && !add_ok(k->hsum[h], x[h], &sum)) return 0;
    }
    /* the timeline: from the origin, and from the watermark if it began behind it (late) */
    PyObject *from = start > c->origin_us ? start_o : c->origin;
    long long from_us = start > c->origin_us ? start : c->origin_us;
    int late = from_us < c->watermark_us;
    if (late) from = c->watermark, from_us = c->watermark_us;
    if (late && n->late == LLONG_MAX) return 0;
    if (has_key) { /* in_flight.pop((slot, task), None): its launch waiting, if it is */
        Py_ssize_t node = n - s->n;
        for (int j = 0; j < s->nl; j++) {
            Launch *l = &s->launch[j];
            if (l->node == node && l->slot == slot && l->task == task) {
                launch_drop(l);
                memmove(l, l + 1, sizeof(Launch) * (size_t)(s->nl - j - 1));
                s->nl--;
                break;
            }
        }
    }
    if (has_key && PyDict_GET_SIZE(n->in_flight)) { /* (and in_flight may hold it from before) */
        PyObject *key = c->key;
        if (key != NULL) { /* (only this function holds it: its items may change) */
            PyObject *old_slot = PyTuple_GET_ITEM(key, 0), *old_task = PyTuple_GET_ITEM(key, 1);
            Py_INCREF(f[I_SLOT]), Py_INCREF(f[I_TASK]);
            PyTuple_SET_ITEM(key, 0, f[I_SLOT]), PyTuple_SET_ITEM(key, 1, f[I_TASK]);
            Py_DECREF(old_slot), Py_DECREF(old_task);
            Py_INCREF(key);
        } else if ((key = int_tuple(2, &f[I_SLOT], 1)) == NULL) { /* (slot, task: adjacent) */
            return -1;
        }
        int r = dict_discard(n->in_flight, key);
        Py_DECREF(key);
        if (r < 0) return -1;
    }
    k->sum[S_REQUESTS] += 1, k->sum[S_REQUEST_US] += duration;
    for (int j = 0; j < N_COUNTS; j++) k->sum[S_TOKENS + j] += v[j];
#pragma GCC unroll 3
    for (int h = 0; h < N_HIST; h++)
        if (has[h]) {
            const long long *bounds = c->bounds[h];
            Py_ssize_t n_bounds = c->n_bounds[h];
            k->hsum[h] += x[h];
            k->buckets[h][c->in_order[h] ? sorted_bisect_left(bounds, n_bounds, x[h])
                                         : bisect_left(bounds, n_bounds, x[h])] += 1;
        }
    if (!n->has_end || end > n->last_end) n->last_end = end, n->has_end = 1;
    n->late += late;
    if (end > from_us) {
        PyObject *items[P_N] = {[P_START] = from, [P_END] = end_o, [P_NODE] = n->index,
                                      [P_BIT] = k->bit};
        PyObject *p = int_tuple(P_N, items, n->index_int && k->bit_int);
        if (p == NULL) return -1;
        int r = PyList_Append(c->pending, p);
        Py_DECREF(p);
        if (r < 0) return -1;
    }
    return 1;
}

static int empty_str(PyObject *o) { return PyUnicode_CheckExact(o) && PyUnicode_GET_LENGTH(o) == 0; }

/* Accounting._event(ev) of a STARTED event: 1 done, 0 hand back, -1 error */
static int take_started(Sums *s, const Ctx *c, PyObject *ev) {
    PyObject **f = &PyTuple_GET_ITEM(ev, 0);
    long long slot, task;
    int has_key = slot_task(f[E_SLOT], f[E_TASK], &slot, &task);
    if (has_key < 0) return 0;
    int err;
    NSlot *n = node_slot(s, f[E_NODE], c->nodes, c->node_index, &err);
    if (n == NULL) return err ? -1 : 0;
    if (!has_key) return 1;
    n->start_lines = 1;
    /* in_flight[slot, task] = time: waits with the launches (see Launch) */
    Py_ssize_t node = n - s->n;
    for (int j = 0; j < s->nl; j++) {
        Launch *l = &s->launch[j];
        if (l->node == node && l->slot == slot && l->task == task) { /* (its place stays) */
            Py_INCREF(f[E_TIME_US]);
            Py_SETREF(l->time, f[E_TIME_US]);
            return 1;
        }
    }
    if (s->nl == MAX_LAUNCHES && launches_flush(s) < 0) return -1;
    Launch *l = &s->launch[s->nl++];
    l->node = node, l->slot = slot, l->task = task;
    l->key[0] = f[E_SLOT], l->key[1] = f[E_TASK], l->time = f[E_TIME_US];
    Py_INCREF(f[E_SLOT]), Py_INCREF(f[E_TASK]), Py_INCREF(f[E_TIME_US]);
    return 1;
}

#define AHEAD 6 /* records */

/* add_all on the accounting's objects `a` (by C_ index), its records of `types` */
static PyObject *take_all(PyObject *recs, PyObject *start_o, PyObject *const *a,
                          PyObject *types) {
    Ctx c = {.nodes = a[C_NODES], .node_index = a[C_NODE_INDEX], .kind_of = a[C_KIND_OF],
             .kind_bit = a[C_KIND_BIT], .origin = a[C_ORIGIN_US], .watermark = a[C_WATERMARK_US],
             .pending = a[C_PENDING], .sorted = a[C_SORTED_KINDS]};
    PyObject *cache = a[C_KIND_CACHE];
    PyObject *interval_type = PyTuple_GET_ITEM(types, T_INTERVAL);
    PyObject *event_type = PyTuple_GET_ITEM(types, T_EVENT);
    PyObject *started = PyTuple_GET_ITEM(types, T_STARTED);
    Py_ssize_t start = PyLong_AsSsize_t(start_o);
    if (start == -1 && PyErr_Occurred()) return NULL;
    int tuples = 1; /* (each histogram's bounds) */
    for (int h = 0; h < N_HIST; h++) tuples = tuples && PyTuple_Check(a[hists[h].bounds]);
    if ((!PyList_CheckExact(recs) && !PyTuple_CheckExact(recs)) || !PyDict_CheckExact(c.nodes) ||
        !PyDict_CheckExact(c.node_index) || !PyDict_CheckExact(c.kind_of) ||
        !PyDict_CheckExact(c.kind_bit) || !tuples ||
        !PyList_CheckExact(c.pending) || !PyTuple_CheckExact(c.sorted) ||
        !PyByteArray_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "add_all(): an argument of the wrong type");
        return NULL;
    }
    /* (a kind that is not one of the sorted kinds is never cached: every byte stays a kind) */
    c.cache = (unsigned char *)PyByteArray_AS_STRING(cache);
    c.cache_len = PyTuple_GET_SIZE(c.sorted) <= MAX_CACHED_KINDS ? PyByteArray_GET_SIZE(cache) : 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(c.sorted); j++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(c.sorted, j))) c.cache_len = 0;
    Py_ssize_t n_recs = PySequence_Fast_GET_SIZE(recs);
    if (start < 0 || start >= n_recs) return PyLong_FromSsize_t(start < 0 ? 0 : start);
    Py_ssize_t n_bounds = 0;
    for (int h = 0; h < N_HIST; h++) n_bounds += PyTuple_GET_SIZE(a[hists[h].bounds]);
    long long bounds_small[64], *bounds = bounds_small; /* (every histogram's, one after another) */
    if (n_bounds > 64 && (bounds = malloc(sizeof(long long) * (size_t)n_bounds)) == NULL)
        return PyErr_NoMemory();
    int usable = as_i64(c.origin, &c.origin_us) && as_i64(c.watermark, &c.watermark_us);
    Sums s = {.all_buckets = 0};
    long long *at = bounds;
    for (int h = 0; h < N_HIST; h++) {
        PyObject *bounds_o = a[hists[h].bounds];
        Py_ssize_t n = PyTuple_GET_SIZE(bounds_o);
        for (Py_ssize_t b = 0; usable && b < n; b++)
            usable = as_i64(PyTuple_GET_ITEM(bounds_o, b), &at[b]);
        c.bounds[h] = at, c.n_bounds[h] = n, c.in_order[h] = 1;
        for (Py_ssize_t b = 1; usable && b < n; b++)
            if (at[b - 1] > at[b]) c.in_order[h] = 0;
        s.n_buckets[h] = n + 1, s.all_buckets += n + 1;
        at += n;
    }
#if PY_VERSION_HEX < 0x030E0000 /* (from 3.14 a tuple caches its hash: no reuse) */
    PyObject *zeros[2] = {Py_None, Py_None};
    if ((c.key = int_tuple(2, zeros, 1)) == NULL) {
        if (bounds != bounds_small) free(bounds);
        return NULL;
    }
#else
    c.key = NULL;
#endif
    Py_ssize_t i = start;
    int r = 1;
    Py_INCREF(recs);
    for (; usable && i < PySequence_Fast_GET_SIZE(recs); i++) {
        Py_ssize_t n_now = PySequence_Fast_GET_SIZE(recs);
        PyObject **items = PySequence_Fast_ITEMS(recs), *rec = items[i];
        /* (memory, not work, is what this loop waits for: the records and then their ints,
         * made a while ago, are fetched ahead) */
        if (i + 2 * AHEAD < n_now) { /* (an Interval's items span two or three lines) */
            char *ahead = (char *)items[i + 2 * AHEAD];
            __builtin_prefetch(ahead), __builtin_prefetch(ahead + 64);
            __builtin_prefetch(ahead + offsetof(PyTupleObject, ob_item) + I_PID * sizeof(PyObject *));
        }
        if (i + AHEAD < n_now) {
            PyObject *next = items[i + AHEAD];
            if (Py_TYPE(next) == (PyTypeObject *)interval_type &&
                PyTuple_GET_SIZE(next) == I_N)
                for (int f = I_START_US; f <= I_TASK; f++)
                    __builtin_prefetch(PyTuple_GET_ITEM(next, f));
            else if (Py_TYPE(next) == (PyTypeObject *)event_type && PyTuple_GET_SIZE(next) == E_N)
                for (int f = E_TIME_US; f <= E_TASK; f += f == E_TIME_US ? E_SLOT - E_TIME_US : 1)
                    __builtin_prefetch(PyTuple_GET_ITEM(next, f));
        }
        PyTypeObject *type = Py_TYPE(rec);
        Py_INCREF(rec);
        /* a timed request of no model instance, a launch of none: the rest is Python's */
        if (type == (PyTypeObject *)interval_type && PyTuple_GET_SIZE(rec) == I_N &&
            empty_str(PyTuple_GET_ITEM(rec, I_REASON)) && empty_str(PyTuple_GET_ITEM(rec, I_MODEL)))
            r = take_interval(&s, &c, rec);
        else if (type == (PyTypeObject *)event_type && PyTuple_GET_SIZE(rec) == E_N &&
                 PyTuple_GET_ITEM(rec, E_KIND) == started &&
                 empty_str(PyTuple_GET_ITEM(rec, E_MODEL)))
            r = take_started(&s, &c, rec);
        else
            r = 0;
        Py_DECREF(rec);
        if (r <= 0) break;
    }
    Py_DECREF(recs);
    if (r < 0) {
        /* (an error, a MemoryError: what came before stays counted, as in Python) */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        sums_flush(&s);
        PyErr_Restore(type, value, tb);
    } else if (sums_flush(&s) < 0) {
        r = -1;
    }
    sums_free(&s);
    Py_XDECREF(c.key);
    if (bounds != bounds_small) free(bounds);
    if (r < 0) return NULL;
    return PyLong_FromSsize_t(i);
}

/* add_all(recs, start, accounting, types) -> index */
static PyObject *add_all(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "add_all(recs, start, accounting, types)");
        return NULL;
    }
    PyObject *types = args[3];
    int typed = PyTuple_Check(types) && PyTuple_GET_SIZE(types) == T_N;
    for (int j = T_INTERVAL; typed && j <= T_EVENT; j++) { /* (NamedTuple types) */
        PyObject *t = PyTuple_GET_ITEM(types, j);
        typed = PyType_Check(t) && PyType_IsSubtype((PyTypeObject *)t, &PyTuple_Type);
    }
    if (!typed) {
        PyErr_SetString(PyExc_TypeError, "add_all() needs (Interval, Event, STARTED) types");
        return NULL;
    }
    PyObject *a[C_N] = {NULL};
    PyObject *out = NULL;
    for (int j = 0; j < C_N; j++)
        if ((a[j] = PyObject_GetAttr(args[2], accounting_names[j])) == NULL) goto done;
    out = take_all(args[0], args[1], a, types);
done:
    for (int j = 0; j < C_N; j++) Py_XDECREF(a[j]);
    return out;
}
