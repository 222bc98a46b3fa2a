/* Compiled fast paths of the accounting (exporter/accounting/): the two records every request
 * brings, and the sweep that makes the timeline final up to a watermark.
 *
 * Each function has a pure-Python reference that stays the specification:
 *   add_all(recs, start, acc, types) ~ acc.add_all_reference(recs[start:]) (intake.py):
 *                                 the finished requests (Interval) and launches (STARTED
 *                                 Events), counted
 *   sweep(pending, lo, hi, ...) ~ accounting/sweep.py's sweep: the pending intervals kept, and
 *                                 what the sweep adds to the timeline figures
 *   keep_recent(rings, recs, interval, lost, since) ~ lanes.Recent.add_all_reference: each
 *                                 node's ring of recent intervals, for the status page
 *   window_run(recs, start, ...) ~ report.window.window_run_reference: how far a batch's
 *                                 records are in a report's window (the durations of the
 *                                 timed ones noted)
 * It reads the records' fields by position and the accounting's objects by attribute name:
 * check_layouts(layouts), which exporter.compiled.switch calls at import, refuses Python layouts
 * (accounting/contract.py, base/records.py) that differ from the ones below, and the switch
 * then runs the Python references instead.
 * The C side handles only what it can do exactly with 64-bit integers and hands everything
 * else back: add_all returns the index of the first record it leaves to Python (a record of
 * another type or event kind, a node or token count the accounting does not know yet, a value
 * that is not an int or does not fit in 64 bits, a sum that would overflow, counters that are
 * not what Accounting keeps), having applied every record before it; sweep returns None for
 * Python to sweep instead (a pending interval that is not what Accounting keeps, an interval
 * that ends before it starts, a sum that would overflow) and changes nothing itself. No input
 * raises; only bad argument types do. tests/unit/compiled/test_accounting.py holds both sides
 * to the same state after.
 *
 * add_all sums each request's counters per (node, kind) in C while it runs, and adds the sums
 * to the Python objects (KindCounters, NodeState) before it returns; the launches it reads wait
 * in C too, and those whose interval comes in the same call never enter in_flight (see Launch):
 * between two calls, every Python object holds what the Python loop would have left in it. It
 * remembers the kind of each token count it looked up in `kind_of` in `kind_cache` (a
 * bytearray Accounting keeps for it), which holds because an entry of kind_of never changes
 * (the rules decide a count's kind once and for all; the dict may be emptied). Both functions
 * are bound by memory more than by work: they fetch the records and ints ahead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ----------------------------------------------------------------------- */

/* 1 and *out set when `o` is an int (exactly) that fits in 64 bits, else 0 (no error set) */
static int as_i64(PyObject *o, long long *out) {
    if (!PyLong_CheckExact(o)) return 0;
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    /* (up to two digits, 60 bits, read in place: every time and count of a request) */
    const digit *d = ((PyLongObject *)o)->ob_digit;
    switch (Py_SIZE(o)) {
    case 0: *out = 0; return 1;
    case 1: *out = (long long)d[0]; return 1;
    case -1: *out = -(long long)d[0]; return 1;
    case 2: *out = (long long)d[0] | (long long)d[1] << PyLong_SHIFT; return 1;
    case -2: *out = -((long long)d[0] | (long long)d[1] << PyLong_SHIFT); return 1;
    default: break;
    }
#endif
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 0;
    if (v == -1 && PyErr_Occurred()) { /* (exact ints: never) */
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* None -> 1 and *out 0; else as_i64 */
static int opt_i64(PyObject *o, long long *out) {
    if (o == Py_None) {
        *out = 0;
        return 1;
    }
    return as_i64(o, out);
}

/* in_flight.pop(key, None): 1 when it held the key, 0 when not, -1 on an error */
static int dict_discard(PyObject *d, PyObject *key) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_Pop(d, key, NULL);
#else
    PyObject *v = _PyDict_Pop(d, key, Py_None);
    if (v == NULL) return -1;
    int had = v != Py_None;
    Py_DECREF(v);
    return had;
#endif
}

/* A tuple of the given ints (exact ints, or the collector must see it), untracked by the
 * cyclic garbage collector as CPython itself untracks such a tuple when it first meets it: a
 * hundred thousand pending intervals are not walked by every young collection. */
static PyObject *int_tuple(Py_ssize_t n, PyObject **items, int all_ints) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    if (all_ints) PyObject_GC_UnTrack(t);
    return t;
}

static int add_ok(long long a, long long b, long long *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* obj.name += delta, as Python's `+=` does */
static int attr_add(PyObject *obj, PyObject *name, long long delta) {
    PyObject *old = PyObject_GetAttr(obj, name);
    if (old == NULL) return -1;
    PyObject *d = PyLong_FromLongLong(delta);
    if (d == NULL) {
        Py_DECREF(old);
        return -1;
    }
    PyObject *sum = PyNumber_InPlaceAdd(old, d);
    Py_DECREF(old), Py_DECREF(d);
    if (sum == NULL) return -1;
    int r = PyObject_SetAttr(obj, name, sum);
    Py_DECREF(sum);
    return r;
}

/* 1 when obj.name is an int (exactly), 0 when not, -1 when there is no such attribute */
static int attr_is_int(PyObject *obj, PyObject *name, int none_too) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int ok = PyLong_CheckExact(v) || (none_too && v == Py_None);
    Py_DECREF(v);
    return ok;
}

/* ---- layouts: the positions and names shared with the Python code (see check_layouts) ---- */

/* records.Interval and Event: each field's position */
enum {
    I_NODE, I_START_US, I_END_US, I_TOKENS, I_PROMPT_TOKENS, I_GENERATED_TOKENS, I_PROMPT_US,
    I_GENERATION_US, I_SLOT, I_TASK, I_PID, I_REASON, I_MODEL, I_N
};
#define N_COUNTS (I_GENERATION_US - I_TOKENS + 1) /* tokens .. generation_us: counted as given */
enum { E_NODE, E_TIME_US, E_KIND, E_PID, E_SLOT, E_TASK, E_DETAIL, E_MODEL, E_VALUE, E_N };
/* accounting.contract.RecordTypes: what add_all takes records of */
enum { T_INTERVAL, T_EVENT, T_STARTED, T_N };
/* accounting.contract.ACCOUNTING_READS: the Accounting attributes add_all reads */
enum {
    C_NODES, C_NODE_INDEX, C_KIND_OF, C_KIND_BIT, C_BUCKETS_US, C_PROMPT_BUCKETS_US,
    C_GENERATION_BUCKETS_US, C_ORIGIN_US, C_WATERMARK_US, C_PENDING, C_SORTED_KINDS,
    C_KIND_CACHE, C_N
};
/* a pending interval's items (Accounting.pending, accounting/sweep.py's Pending) */
enum { P_START, P_END, P_NODE, P_BIT, P_N };

static const char *const interval_fields[I_N] = {
    "node", "start_us", "end_us", "tokens", "prompt_tokens", "generated_tokens", "prompt_us",
    "generation_us", "slot", "task", "pid", "reason", "model"};
static const char *const event_fields[E_N] = {"node", "time_us", "kind", "pid",
                                              "slot", "task", "detail", "model", "value"};
static const char *const record_types[T_N] = {"interval", "event", "started"};
static const char *const accounting_reads[C_N] = {
    "nodes",     "node_index",   "kind_of", "kind_bit",     "buckets_us",
    "prompt_buckets_us",         "generation_buckets_us",   "origin_us",
    "watermark_us", "pending",   "sorted_kinds",            "kind_cache"};
static PyObject *accounting_names[C_N]; /* (interned) */

/* accounting.contract.NODE_READS, then KIND_READS: a NodeState's attributes add_all reads or
 * adds to, then a KindCounters' (interned) */
enum {
    A_IN_FLIGHT,
    A_KINDS,
    A_LATE,
    A_LAST_END,
    A_START_LINES,
    A_REQUESTS,
    A_REQUEST_US,
    A_TOKENS,
    A_PROMPT_TOKENS,
    A_GENERATED_TOKENS,
    A_PROMPT_US,
    A_GENERATION_US,
    A_HISTOGRAM_US,
    A_BUCKETS,
    A_PROMPT_HISTOGRAM_US,
    A_PROMPT_BUCKETS,
    A_GENERATION_HISTOGRAM_US,
    A_GENERATION_BUCKETS,
    N_NAMES
};
static const char *const NAMES[N_NAMES] = {
    "in_flight",  "kinds",         "late",      "last_end_us",  "start_lines",
    "requests",   "request_us",    "tokens",    "prompt_tokens", "generated_tokens",
    "prompt_us",  "generation_us", "histogram_us", "buckets",
    "prompt_histogram_us", "prompt_buckets", "generation_histogram_us", "generation_buckets",
};
static PyObject *names[N_NAMES];
#define N_NODE_NAMES A_REQUESTS /* the NodeState's come first */

/* Each layout by the name the switch gives it */
static const struct {
    const char *name;
    const char *const *names;
    int n;
} layouts[] = {
    {"Interval", interval_fields, I_N},
    {"Event", event_fields, E_N},
    {"RecordTypes", record_types, T_N},
    {"Accounting", accounting_reads, C_N},
    {"NodeState", NAMES, N_NODE_NAMES},
    {"KindCounters", NAMES + N_NODE_NAMES, N_NAMES - N_NODE_NAMES},
};
#define N_LAYOUTS ((int)(sizeof layouts / sizeof layouts[0]))

/* ---- add_all ----------------------------------------------------------------------------- */

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

/* 1 when `given` (any object) holds layout k's names in order and no more, 0 when not, -1 on
 * an error */
static int layout_fits(int k, PyObject *given) {
    if (!PyTuple_Check(given) || PyTuple_GET_SIZE(given) != layouts[k].n) return 0;
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
                PyErr_Format(PyExc_ValueError, "%s: built for %R, given %.200R", layouts[k].name,
                             built, names);
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

/* ---- sweep -------------------------------------------------------------------------------- */

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

/* ---- the module --------------------------------------------------------------------------- */

/* ---- keep_recent: each node's ring of recent intervals ----------------------------------- */

/* keep_recent(rings, recs, interval_type, lost, since) -> None: append to rings[rec.node] (a
 * deque with a maxlen, or anything with an `append`) every record of `recs` (a list or tuple)
 * whose type is exactly interval_type, whose reason is not `lost` and, unless `since` is None,
 * whose end is `since` or later, in order; a node without a ring is skipped. The bound `append`
 * of the last node's ring is kept while the node is the same. */
static PyObject *keep_recent(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyDict_Check(args[0]) ||
        !(PyList_Check(args[1]) || PyTuple_Check(args[1])) || !PyType_Check(args[2]) ||
        !PyUnicode_Check(args[3]) || !(args[4] == Py_None || PyLong_Check(args[4]))) {
        PyErr_SetString(PyExc_TypeError, "keep_recent(rings: dict, recs: list | tuple, "
                                         "interval_type, lost: str, since: int | None)");
        return NULL;
    }
    PyObject *rings = args[0], *recs = args[1], *lost = args[3], *since = args[4];
    PyTypeObject *interval_type = (PyTypeObject *)args[2];
    PyObject *last_node = NULL, *append = NULL, *result = NULL;
    long long since_us = 0;
    int since_i64 = since != Py_None && as_i64(since, &since_us);
    PyObject *seq = Py_NewRef(recs); /* (a list may change under the calls below) */
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seq); j++) {
        PyObject *rec = PySequence_Fast_GET_ITEM(seq, j);
        if (Py_TYPE(rec) != interval_type || PyTuple_GET_SIZE(rec) != I_N) continue;
        PyObject *reason = PyTuple_GET_ITEM(rec, I_REASON);
        if (reason == lost) continue;
        if (PyUnicode_Check(reason) && PyUnicode_GET_LENGTH(reason) > 0) {
            int same = PyUnicode_Compare(reason, lost);
            if (same == -1 && PyErr_Occurred()) goto done;
            if (same == 0) continue;
        }
        if (since != Py_None) { /* (ended before the pages' window: never shown) */
            PyObject *end = PyTuple_GET_ITEM(rec, I_END_US);
            long long end_us;
            int shown = since_i64 && as_i64(end, &end_us)
                            ? end_us >= since_us
                            : PyObject_RichCompareBool(end, since, Py_GE);
            if (shown < 0) goto done;
            if (!shown) continue;
        }
        PyObject *node = PyTuple_GET_ITEM(rec, I_NODE);
        if (node != last_node) {
            Py_CLEAR(append);
            Py_XSETREF(last_node, Py_NewRef(node));
            PyObject *ring = PyDict_GetItemWithError(rings, node); /* (borrowed) */
            if (ring == NULL) {
                if (PyErr_Occurred()) goto done;
                continue;
            }
            if ((append = PyObject_GetAttrString(ring, "append")) == NULL) goto done;
        }
        if (append == NULL) continue; /* (a node without a ring) */
        PyObject *r = PyObject_CallOneArg(append, rec);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(append);
    Py_XDECREF(last_node);
    Py_DECREF(seq);
    return result;
}

/* ---- window_run: a report's records in its window -------------------------------------- */

/* window_run(recs, start, since_us, until_us, counted, interval_type, event_type, parse_error)
 * -> index: report.window.window_run_reference. The records of recs[start:] (a list or tuple)
 * for as long as each is in the window: an interval (exactly interval_type) that ends in
 * [since_us, until_us], each timed one (reason "") adding end - start to counted[tokens] (a
 * dict of lists); an event (exactly event_type) in it that is not a parse_error. The index of
 * the first record that is not (times that are not ints of 64 bits stop it too). */
/* counted[tokens].append(duration), the list made when it is the first: 0, or -1 on an error
 * (a MemoryError, or tokens unhashable: never from a Parser) */
static int note(PyObject *counted, PyObject *tokens, long long duration) {
    PyObject *durations = PyDict_GetItemWithError(counted, tokens); /* (borrowed) */
    if (durations == NULL && PyErr_Occurred()) return -1;
    if (durations != NULL && !PyList_CheckExact(durations)) {
        PyErr_SetString(PyExc_TypeError, "window_run(): counted holds no list there");
        return -1;
    }
    PyObject *d = PyLong_FromLongLong(duration);
    if (d == NULL) return -1;
    int bad;
    if (durations != NULL) {
        bad = PyList_Append(durations, d);
    } else {
        PyObject *one = PyList_New(1);
        if (one == NULL) {
            Py_DECREF(d);
            return -1;
        }
        PyList_SET_ITEM(one, 0, Py_NewRef(d));
        bad = PyDict_SetItem(counted, tokens, one);
        Py_DECREF(one);
    }
    Py_DECREF(d);
    return bad;
}

static PyObject *window_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long since, until;
    Py_ssize_t start;
    if (nargs != 8 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])) ||
        !PyLong_Check(args[1]) || !as_i64(args[2], &since) || !as_i64(args[3], &until) ||
        !PyDict_CheckExact(args[4]) || !PyType_Check(args[5]) || !PyType_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "window_run(recs: list | tuple, start: int, since_us: int, until_us: int, "
                        "counted: dict, interval_type, event_type, parse_error)");
        return NULL;
    }
    if ((start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    PyObject *recs = args[0], *counted = args[4], *parse_error = args[7];
    PyTypeObject *interval_type = (PyTypeObject *)args[5], *event_type = (PyTypeObject *)args[6];
    if (start < 0 || start > PySequence_Fast_GET_SIZE(recs)) {
        PyErr_SetString(PyExc_IndexError, "window_run() start out of range");
        return NULL;
    }
    Py_ssize_t i = start;
    for (; i < PySequence_Fast_GET_SIZE(recs); i++) {
        PyObject *rec = PySequence_Fast_GET_ITEM(recs, i);
        if (Py_TYPE(rec) == interval_type && PyTuple_GET_SIZE(rec) == I_N) {
            PyObject **f = &PyTuple_GET_ITEM(rec, 0);
            long long end, begin;
            if (!as_i64(f[I_END_US], &end) || end < since || end > until ||
                !PyUnicode_CheckExact(f[I_REASON]))
                break;
            if (PyUnicode_GET_LENGTH(f[I_REASON]) > 0) continue; /* (not timed) */
            if (!as_i64(f[I_START_US], &begin) || (begin < 0 && end > LLONG_MAX + begin) ||
                (begin > 0 && end < LLONG_MIN + begin))
                break;
            if (note(counted, f[I_TOKENS], end - begin) < 0) return NULL;
        } else if (Py_TYPE(rec) == event_type && PyTuple_GET_SIZE(rec) == E_N) {
            long long t;
            PyObject **f = &PyTuple_GET_ITEM(rec, 0);
            if (!as_i64(f[E_TIME_US], &t) || t < since || t > until || f[E_KIND] == parse_error)
                break;
        } else
            break;
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"check_layouts", check_layouts, METH_O,
     "check_layouts(layouts) -> None: ValueError unless layouts ({name: field or attribute\n"
     "names}) are the ones this module was built for."},
    {"add_all", (PyCFunction)(void (*)(void))add_all, METH_FASTCALL,
     "add_all(recs, start, accounting, types) -> index: accounting.add_all_reference on\n"
     "recs[start:] for as long as they are intervals and STARTED events (of types: Interval,\n"
     "Event, STARTED) it can take exactly; the index of the first record it leaves to Python\n"
     "(len(recs) when none)."},
    {"keep_recent", (PyCFunction)(void (*)(void))keep_recent, METH_FASTCALL,
     "keep_recent(rings, recs, interval_type, lost, since) -> None:\n"
     "lanes.Recent.add_all_reference: each interval of recs (but those of reason lost, and\n"
     "those ending before since unless it is None) appended to its node's ring, if any."},
    {"window_run", (PyCFunction)(void (*)(void))window_run, METH_FASTCALL,
     "window_run(recs, start, since_us, until_us, counted, interval_type, event_type,\n"
     "parse_error) -> index: report.window.window_run_reference (how far recs[start:] are in\n"
     "the window, each timed interval's (tokens, duration) added to counted)."},
    {"sweep", (PyCFunction)(void (*)(void))sweep, METH_FASTCALL,
     "sweep(pending, lo, hi, n_nodes, n_kinds) -> (keep, concurrency, mix_by_mask, busy,\n"
     "slot_busy) or\n"
     "None: what Accounting.advance_to_reference(hi) from watermark lo keeps pending and adds\n"
     "to the timeline figures; None to leave it to Python. Changes nothing."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "exporter.compiled._accounting",
    .m_doc = "Compiled fast paths of the accounting: add_all and the sweep (see _accounting.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__accounting(void) {
    for (int a = 0; a < N_NAMES; a++)
        if ((names[a] = PyUnicode_InternFromString(NAMES[a])) == NULL) return NULL;
    for (int a = 0; a < C_N; a++)
        if ((accounting_names[a] = PyUnicode_InternFromString(accounting_reads[a])) == NULL)
            return NULL;
    return PyModule_Create(&module);
}
