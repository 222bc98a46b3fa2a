/* window: how far a batch's records are in a report's window.
 *
 * A part of _accounting.c, which includes the parts in order (one translation unit); it
 * reads what the parts before it define. */

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
