/* scan: a chunk's keyword lines, in one or two parts, handed over as one answer.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

/* scan's answer for the parts read (with the GIL): (lines, newlines, raw). Gives back the parts'
 * blocks, and takes `data` (held by the Lines answered, else released). */
static PyObject *scan_answer(Part *parts, int np, Py_buffer *data, PyObject *node,
                             PyTypeObject *line_type) {
    PyObject *out = NULL, *lines = NULL, *empty = NULL, *last_pid = NULL;
    Lines *l = NULL; /* every keyword line, decoded where it is of a usual shape */
    long long last_pid_value = 0;
    Py_ssize_t count = 0, newlines = 0, raw = 0, escaped = 0;
    if ((empty = PyUnicode_New(0, 0)) == NULL) goto fail;
    for (int k = 0; k < np; k++) {
        if (parts[k].count < 0) {
            PyErr_NoMemory();
            goto fail;
        }
        count += parts[k].count, newlines += parts[k].newlines, raw += parts[k].raw;
        escaped += parts[k].escaped;
    }
    if (np == 1) { /* the Lines takes the part's items as they are */
        if ((l = lines_new(-1, node, (PyObject *)line_type, empty)) == NULL) goto fail;
        l->items = parts[0].items, l->items_size = parts[0].items_size;
        parts[0].items = NULL;
    } else {
        if ((l = lines_new(count, node, (PyObject *)line_type, empty)) == NULL) goto fail;
        memcpy(l->items, parts[0].items, (size_t)parts[0].count * sizeof(Item));
        memcpy(l->items + parts[0].count, parts[1].items, (size_t)parts[1].count * sizeof(Item));
    }
    Item *items = l->items;
    l->n = count; /* (every obj is set: the Lines owns them now) */
    for (Py_ssize_t j = 0; j < count && raw == 0 && escaped > 0; j++) {
        Item *it = &items[j];
        if (it->d.shape == SHAPE_JSON && (it->d.msg_esc || it->d.cur_esc)) {
            /* made now: should the decoder refuse it after all, every line is handed back */
            l->made = 1;
            it->obj = log_line(line_type, node, empty, &l->last_pid, &l->last_pid_value,
                               it->line, &it->d);
            if (it->obj == NULL) {
                if (PyErr_ExceptionMatches(PyExc_MemoryError)) goto fail;
                PyErr_Clear();
                raw = 1;
            }
        }
    }
    if (raw == 0) { /* every line decoded (the usual case): the Lines, holding the bytes */
        if (count > 0) { /* the items point into the bytes: the Lines holds them */
            l->view = *data, l->has_view = 1;
            data->obj = NULL, data->buf = NULL;
        }
        out = Py_BuildValue("(Nnn)", (PyObject *)l, newlines, (Py_ssize_t)0);
        l = NULL;
        goto fail; /* (the common exit) */
    }
    raw = 0;
    lines = PyList_New(0);
    if (lines == NULL) goto fail;
    for (Py_ssize_t j = 0; j < count; j++) {
        const Item *it = &items[j];
        const Found *d = &it->d;
        PyObject *item = NULL;
        if (d->ok) { /* (none older than since_us: left out already) */
            item = log_line(line_type, node, empty, &last_pid, &last_pid_value, it->line, d);
            if (item == NULL && !PyErr_ExceptionMatches(PyExc_MemoryError))
                PyErr_Clear(); /* (validated, so never) the decoder's to judge: raw */
            else if (item == NULL)
                goto fail;
        }
        if (item == NULL) {
            item = PyBytes_FromStringAndSize(it->line, d->len);
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
    Py_XDECREF(l);
    Py_XDECREF(empty);
    Py_XDECREF(last_pid);
    for (int k = 0; k < np; k++) {
        block_give(parts[k].items, parts[k].items_size);
        parts[k].items = NULL;
    }
    if (data->obj != NULL) PyBuffer_Release(data);
    return out;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *keywords, *node, *since_arg, *max_arg, *out = NULL, *search = NULL;
    long long since_us, max_line;
    PyTypeObject *line_type;
    Part parts[2];
    int np = 0;
    if (!PyArg_ParseTuple(args, "y*O!UOO!O:scan", &data, &PyTuple_Type, &keywords, &node,
                          &since_arg, &PyType_Type, &line_type, &max_arg))
        return NULL;
    const Search *t;
    if (scan_args("scan", since_arg, max_arg, line_type, keywords, &since_us, &max_line, &search,
                  &t) < 0)
        goto fail;
    const char *buf = data.buf;
    Py_ssize_t n = data.len, cut = first_half(buf, n); /* (the parts: one, or two halves) */
    for (Py_ssize_t from = 0; from < n || np == 0; from = cut, cut = n) {
        Part *p = &parts[np++];
        memset(p, 0, sizeof *p);
        p->s = buf + from, p->n = cut - from, p->t = t;
        p->max_line = max_line, p->since_us = since_us;
        /* (room for a line in 200 bytes: more is grown into) */
        p->items = block_take(((size_t)p->n / 200 + 16) * sizeof(Item), &p->items_size);
        if (p->items == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    /* Nothing changes the buffer meanwhile: a bytes object cannot change, and a file source
     * reuses its bytearray only once nothing holds it. So it is read in parallel. */
    Py_BEGIN_ALLOW_THREADS
    each_part(scan_part, parts, np);
    Py_END_ALLOW_THREADS
    out = scan_answer(parts, np, &data, node, line_type);
    np = 0; /* (the answer gave back the parts' blocks, and took or released the bytes) */
fail:
    Py_XDECREF(search);
    for (int k = 0; k < np; k++) block_give(parts[k].items, parts[k].items_size);
    if (data.obj != NULL) PyBuffer_Release(&data);
    return out;
}
