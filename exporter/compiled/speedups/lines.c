/* lines: a chunk's keyword lines as a Lines (LogLines made on access), its arrays kept.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

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
