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
 *
 * This file holds the layouts, the module's functions and its set-up. The stages are its parts
 * in speedups/ (decode, lines, search, workers, scan, reading, tokenize, feed), included below
 * in that order as one translation unit: each reads what those before it define, and the hot
 * calls between them (a line's decode and tokens inside the search) stay inlined.
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

/* ---- the parts, in order: each reads what those before it define ------------------------- */

#include "speedups/decode.c"
#include "speedups/lines.c"
#include "speedups/search.c"
#include "speedups/workers.c"
#include "speedups/scan.c"
#include "speedups/reading.c"
#include "speedups/tokenize.c"
#include "speedups/feed.c"

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
