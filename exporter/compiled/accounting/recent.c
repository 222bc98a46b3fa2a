/* recent: each node's ring of recent intervals, for the status page.
 *
 * A part of _accounting.c, which includes the parts in order (one translation unit); it
 * reads what the parts before it define. */

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
