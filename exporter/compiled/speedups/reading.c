/* reading: a file's next bytes, read and scanned in a thread of its own.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

/* A Reading reads a regular file's next bytes into a buffer and scans their whole lines, in a
 * thread that never takes the GIL, while its caller applies what the last one found; `result`
 * answers as scan does. (In a thread that holds the GIL only to start it and to take its answer,
 * a backlog's reading no longer waits for the GIL between its read and its scan.) */
#define READING_TAIL_MOST 65536

typedef struct {
    PyObject_HEAD
    Job job;     /* the reading, on a kept thread (see job_submit) */
    int running; /* the job was handed over, and not yet waited for */
    int answered; /* result() was called */
    int fd;           /* its own (a duplicate of the caller's), closed once read: -1 then */
    long long offset; /* where the bytes are read from */
    Py_buffer data;   /* the buffer read into: held until the answer takes it */
    char *tail;       /* the bytes expected right before offset (a copy), tail_n of them */
    Py_ssize_t tail_n;
    PyObject *search, *node, *line_type;
    Part parts[2];      /* the whole lines read: in two halves when long (see SCAN_SPLIT) */
    int np;             /* how many parts were read (0: none) */
    Py_ssize_t cut;     /* the end of the last whole line read */
    Py_ssize_t got;     /* bytes read */
    int err;            /* the errno of a failed read, else 0 */
    int moved;          /* the bytes before offset are not the tail: the file changed */
    int nul;            /* a NUL among the bytes read: for the line layer to frame */
    int split;          /* a long read may be scanned in two halves */
} Reading;

static PyTypeObject ReadingType;

/* pread until `n` bytes or the end: how many, or -1 with errno. */
static Py_ssize_t read_fully(int fd, char *buf, Py_ssize_t n, long long offset) {
    Py_ssize_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, (size_t)(n - got), (off_t)(offset + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += k;
    }
    return got;
}

/* The thread: the tail checked, the bytes read (the descriptor's offset left after them, as a
 * read leaves it), their whole lines scanned. Needs no GIL. */
static void *reading_run(void *arg) {
    Reading *r = arg;
    if (r->tail_n > 0) {
        char *now = PyMem_RawMalloc((size_t)r->tail_n);
        Py_ssize_t k = now == NULL || r->offset < r->tail_n
                           ? -2
                           : read_fully(r->fd, now, r->tail_n, r->offset - r->tail_n);
        if (k == -1) r->err = errno;
        else if (now == NULL) r->err = ENOMEM;
        else r->moved = k != r->tail_n || memcmp(now, r->tail, (size_t)r->tail_n) != 0;
        PyMem_RawFree(now);
        if (r->err || r->moved) return NULL;
    }
    char *buf = r->data.buf;
    Py_ssize_t got = read_fully(r->fd, buf, r->data.len, r->offset);
    if (got < 0) {
        r->err = errno;
        return NULL;
    }
    r->got = got;
    (void)lseek(r->fd, (off_t)(r->offset + got), SEEK_SET);
    if (memchr(buf, 0, (size_t)got) != NULL) {
        r->nul = 1;
        return NULL;
    }
    const char *last = got > 0 ? memrchr(buf, '\n', (size_t)got) : NULL;
    if (last == NULL) return NULL;
    Py_ssize_t cut = r->cut = last - buf + 1;
    Py_ssize_t half = r->split ? first_half(buf, cut) : cut; /* (the parts: one, or two halves) */
    r->parts[0].s = buf, r->parts[0].n = half;
    r->parts[1].s = buf + half, r->parts[1].n = cut - half;
    r->np = half < cut ? 2 : 1;
    each_part(scan_part, r->parts, r->np);
    return NULL;
}

/* The job: reading_run, then its own descriptor closed. */
static void *reading_main(void *arg) {
    Reading *r = arg;
    reading_run(r);
    close(r->fd);
    r->fd = -1;
    return NULL;
}

/* Waited for (the GIL given up meanwhile), if it runs: by whoever else waits for it too. */
static void reading_join(Reading *r) {
    if (!r->running) return;
    Py_BEGIN_ALLOW_THREADS
    job_wait(&r->job);
    Py_END_ALLOW_THREADS
    r->running = 0;
}

/* Its buffer and blocks let go (with the GIL). */
static void reading_release(Reading *r) {
    for (int k = 0; k < 2; k++) {
        block_give(r->parts[k].items, r->parts[k].items_size);
        r->parts[k].items = NULL;
    }
    if (r->data.obj != NULL) PyBuffer_Release(&r->data);
}

static void reading_dealloc(Reading *r) {
    reading_join(r);
    job_free(&r->job);
    if (r->fd >= 0) close(r->fd);
    reading_release(r);
    PyMem_RawFree(r->tail);
    Py_XDECREF(r->search), Py_XDECREF(r->node), Py_XDECREF(r->line_type);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *read_ahead(PyObject *self, PyObject *args) {
    int fd;
    long long offset;
    Py_buffer tail;
    PyObject *keywords, *node, *since_arg, *max_arg;
    PyTypeObject *line_type;
    Reading *r = PyObject_New(Reading, &ReadingType);
    if (r == NULL) return NULL;
    job_init(&r->job, reading_main, r);
    r->running = r->answered = 0, r->tail = NULL, r->tail_n = 0, r->fd = -1;
    r->search = r->node = r->line_type = NULL;
    r->data.obj = NULL;
    memset(r->parts, 0, sizeof r->parts);
    r->np = 0, r->cut = 0;
    r->got = 0, r->err = 0, r->moved = 0, r->nul = 0;
    r->split = 1;
    if (!PyArg_ParseTuple(args, "iLw*y*O!UOO!O|p:read_ahead", &fd, &offset, &r->data, &tail,
                          &PyTuple_Type, &keywords, &node, &since_arg, &PyType_Type, &line_type,
                          &max_arg, &r->split))
        goto fail_early;
    r->tail_n = tail.len;
    if (tail.len > READING_TAIL_MOST || offset < 0 || fd < 0) {
        PyErr_SetString(PyExc_ValueError, "read_ahead() needs fd >= 0, offset >= 0, a short tail");
        PyBuffer_Release(&tail);
        goto fail;
    }
    if (tail.len > 0 && (r->tail = PyMem_RawMalloc((size_t)tail.len)) == NULL) {
        PyBuffer_Release(&tail);
        PyErr_NoMemory();
        goto fail;
    }
    if (tail.len > 0) memcpy(r->tail, tail.buf, (size_t)tail.len);
    PyBuffer_Release(&tail);
    /* its own descriptor (the same open file, and offset): should the caller's be closed
     * meanwhile, and its number reused, the thread still reads the file it was given */
    if ((r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    r->offset = offset;
    r->node = Py_NewRef(node), r->line_type = Py_NewRef((PyObject *)line_type);
    long long since_us, max_line;
    const Search *t;
    if (scan_args("read_ahead", since_arg, max_arg, line_type, keywords, &since_us, &max_line,
                  &r->search, &t) < 0)
        goto fail;
    for (int k = 0; k < 2; k++) { /* (room for a line in 200 bytes of a half: more is grown into) */
        Part *p = &r->parts[k];
        p->t = t, p->since_us = since_us, p->max_line = max_line;
        p->items = block_take(((size_t)r->data.len / 400 + 16) * sizeof(Item), &p->items_size);
        if (p->items == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    /* Nothing reads or changes the buffer meanwhile: the caller holds it for the answer. */
    if (job_submit(&r->job)) {
        r->running = 1;
    } else { /* no thread to be had: read here and now */
        Py_BEGIN_ALLOW_THREADS
        reading_main(r);
        Py_END_ALLOW_THREADS
    }
    return (PyObject *)r;
fail_early:
    r->data.obj = NULL;
fail:
    Py_DECREF(r);
    return NULL;
}

static PyObject *reading_result(Reading *r, PyObject *unused) {
    reading_join(r);
    if (r->answered) {
        PyErr_SetString(PyExc_RuntimeError, "a Reading answers once");
        return NULL;
    }
    r->answered = 1;
    PyObject *out = NULL;
    if (r->err) {
        errno = r->err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (r->parts[0].count < 0 || (r->np > 1 && r->parts[1].count < 0)) {
        PyErr_NoMemory();
    } else if (r->moved || r->nul || r->np == 0) {
        out = Py_BuildValue("(nnOnn)", r->moved ? (Py_ssize_t)-1 : r->got, (Py_ssize_t)0, Py_None,
                            (Py_ssize_t)0, (Py_ssize_t)0);
    } else {
        Py_ssize_t cut = r->cut;
        PyObject *found =
            scan_answer(r->parts, r->np, &r->data, r->node, (PyTypeObject *)r->line_type);
        if (found != NULL) {
            PyObject *lines, *newlines, *raw;
            if (PyArg_ParseTuple(found, "OOO", &lines, &newlines, &raw))
                out = Py_BuildValue("(nnOOO)", r->got, cut, lines, newlines, raw);
            Py_DECREF(found);
        }
    }
    reading_release(r);
    return out;
}

static PyObject *reading_wait(Reading *r, PyObject *unused) {
    reading_join(r);
    Py_ssize_t got = r->err ? 0 : r->moved ? -1 : r->got;
    return Py_BuildValue("(nn)", got, r->err || r->nul ? (Py_ssize_t)0 : r->cut);
}

static PyMethodDef reading_methods[] = {
    {"wait", (PyCFunction)reading_wait, METH_NOARGS,
     "wait() -> (got, cut): waits for the thread (done with the file and the buffer); got\n"
     "and cut as result() answers them (0, 0 when the read failed)."},
    {"result", (PyCFunction)reading_result, METH_NOARGS,
     "result() -> (got, cut, lines, newlines, raw): waits for the thread; the bytes read (-1\n"
     "when the bytes before the offset were not the tail given), the end of their last whole\n"
     "line, and scan's answer for the bytes before it; (got, 0, None, 0, 0) when they hold a\n"
     "NUL or no whole line. OSError when the read failed. Once only."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReadingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "exporter.compiled._speedups.Reading",
    .tp_basicsize = sizeof(Reading),
    .tp_dealloc = (destructor)reading_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A file's next bytes, read and scanned in a thread (see read_ahead).",
    .tp_methods = reading_methods,
};
