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
 *
 * This file holds the small helpers, the layouts, check_layouts and the module's set-up. Each
 * function is a part of its own in accounting/ (add_all, sweep, recent, window), included below
 * in that order as one translation unit: each reads what those before it define.
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

#include "accounting/add_all.c"

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

#include "accounting/sweep.c"
#include "accounting/recent.c"
#include "accounting/window.c"

/* ---- the module --------------------------------------------------------------------------- */

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
