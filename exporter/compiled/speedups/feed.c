/* feed: Parser.feed_all's state machine for runs of common lines.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

/* Parser.block as C values: `any` 0 for NO_BLOCK; each field with its `has` bit (None: 0). */
typedef struct {
    int any, has[B_N];
    long long v[B_N];
} Block;

/* The parser's block into `b`: 1, or 0 when a field is no int that fits (feed hands back). */
static int block_in(PyObject *block, PyObject *no_block, Block *b) {
    memset(b, 0, sizeof *b);
    if (block == no_block) return 1;
    b->any = 1;
    for (int f = 0; f < B_N; f++) {
        PyObject *v = PyObject_GetAttrString(block, block_fields[f]);
        if (v == NULL) return -1;
        if (v != Py_None) {
            int overflow = 0;
            b->v[f] = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
            b->has[f] = 1;
            if (!PyLong_Check(v) || overflow || (b->v[f] == -1 && PyErr_Occurred())) {
                Py_DECREF(v);
                PyErr_Clear();
                return 0;
            }
        }
        Py_DECREF(v);
    }
    return 1;
}

static PyObject *opt_int(int has, long long v) {
    return has ? PyLong_FromLongLong(v) : Py_NewRef(Py_None);
}

static PyObject *block_name; /* "block", made once (setting it then takes no memory) */

/* `b` back into the parser: NO_BLOCK, or a new Block(slot, task, ...). 0, or -1 on error. */
static int block_out(PyObject *parser, const Block *b, PyObject *block_type, PyObject *no_block) {
    PyObject *block;
    if (!b->any) {
        block = Py_NewRef(no_block);
    } else {
        PyObject *args = PyTuple_New(B_N);
        if (args == NULL) return -1;
        for (int f = 0; f < B_N; f++) {
            PyObject *v = opt_int(b->has[f], b->v[f]);
            if (v == NULL) {
                Py_DECREF(args);
                return -1;
            }
            PyTuple_SET_ITEM(args, f, v);
        }
        block = PyObject_Call(block_type, args, NULL);
        Py_DECREF(args);
        if (block == NULL) return -1;
    }
    int bad = PyObject_SetAttr(parser, block_name, block);
    Py_DECREF(block);
    return bad;
}

/* A new tuple of `type` (a NamedTuple: its __new__ does no more) holding `items`, stolen. */
static PyObject *record(PyTypeObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *r = NULL;
    for (Py_ssize_t j = 0; j < n; j++)
        if (items[j] == NULL) goto fail;
    if ((r = type->tp_alloc(type, n)) == NULL) goto fail;
    for (Py_ssize_t j = 0; j < n; j++) PyTuple_SET_ITEM(r, j, items[j]);
    /* Untracked by the cyclic collector: a record holds only ints, strs, None and enum members,
     * so it is never part of a cycle, and the collector need not walk the hundreds of
     * thousands a backlog makes (it spent 6% of the reading path on them). */
    PyObject_GC_UnTrack(r);
    return r;
fail:
    for (Py_ssize_t j = 0; j < n; j++) Py_XDECREF(items[j]);
    return NULL;
}

static PyObject *pair(long long a, long long b) {
    PyObject *x = PyLong_FromLongLong(a), *y = PyLong_FromLongLong(b);
    if (x == NULL || y == NULL) {
        Py_XDECREF(x), Py_XDECREF(y);
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, x, y);
    Py_DECREF(x), Py_DECREF(y);
    return t;
}

/* 1 when dict `d` has the int key `k`, 0 when not, -1 on an error. */
static int has_int_key(PyObject *d, long long k) {
    PyObject *key = PyLong_FromLongLong(k);
    if (key == NULL) return -1;
    int r = PyDict_Contains(d, key);
    Py_DECREF(key);
    return r;
}

/* Whether `started` holds the key (slot, task), found by its values (no tuple made for the
 * lookup: a request looks twice): 1 and `*key` (borrowed) when it does, 0 when it does not,
 * -1 when a key is not a pair of ints of 64 bits or the dict is large (then look it up). */
#define STARTED_SCANNED 16
static int started_key(PyObject *started, long long slot, long long task, PyObject **key) {
    if (PyDict_GET_SIZE(started) > STARTED_SCANNED) return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *value;
    while (PyDict_Next(started, &pos, &k, &value)) {
        if (!PyTuple_CheckExact(k) || PyTuple_GET_SIZE(k) != 2) return -1;
        PyObject *s = PyTuple_GET_ITEM(k, 0), *t = PyTuple_GET_ITEM(k, 1);
        if (!PyLong_CheckExact(s) || !PyLong_CheckExact(t)) return -1;
        int over = 0;
        long long sv = PyLong_AsLongLongAndOverflow(s, &over);
        long long tv = over ? 0 : PyLong_AsLongLongAndOverflow(t, &over);
        if (over || PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        if (sv == slot && tv == task) {
            *key = k;
            return 1;
        }
    }
    return 0;
}

/* Whether `started` holds (slot, task): 1 and `*key` (a new reference to a key equal to it)
 * when it does, 0 when not, -1 on an error. Deleting that key cannot fail. */
static int started_find(PyObject *started, long long slot, long long task, PyObject **key) {
    PyObject *found = NULL;
    int there = started_key(started, slot, task, &found);
    if (there == 1) *key = Py_NewRef(found);
    if (there >= 0) return there;
    PyObject *made = pair(slot, task);
    if (made == NULL) return -1;
    int launched = PyDict_Contains(started, made);
    if (launched == 1) *key = made;
    else Py_DECREF(made);
    return launched;
}

/* Drop the last item of `list`, appended by the caller (a list may be shorter than its
 * allocation: nothing is allocated or freed but the item's reference). */
static void list_drop_last(PyObject *list) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *item = PyList_GET_ITEM(list, n - 1);
    Py_SET_SIZE(list, n - 1);
    Py_DECREF(item);
}

/* `(slot, task) in started`: 1, 0, or -1 on an error. */
static int started_has(PyObject *started, long long slot, long long task) {
    PyObject *found = NULL;
    int there = started_key(started, slot, task, &found);
    if (there >= 0) return there;
    PyObject *key = pair(slot, task);
    if (key == NULL) return -1;
    int launched = PyDict_Contains(started, key);
    Py_DECREF(key);
    return launched;
}

/* 1 when a launch of (slot, task) takes nothing from `started` (no other task of that slot in
 * it, and room for it within `bound`), 0 when it would, -1 on an error. */
static int launch_fits(PyObject *started, long long slot, long long task, Py_ssize_t bound) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int there = 0;
    while (PyDict_Next(started, &pos, &key, &value)) {
        if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2) return 0;
        PyObject *s = PyTuple_GET_ITEM(key, 0), *k = PyTuple_GET_ITEM(key, 1);
        if (!PyLong_CheckExact(s) || !PyLong_CheckExact(k)) return 0;
        int over = 0;
        long long sv = PyLong_AsLongLongAndOverflow(s, &over);
        long long kv = over ? 0 : PyLong_AsLongLongAndOverflow(k, &over);
        if (over || PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (sv == slot) {
            if (kv != task) return 0;
            there = 1;
        }
    }
    return there || PyDict_GET_SIZE(started) < bound;
}

/* One common line's token applied as Parser.feed_all applies it: 1 done, 0 hand back (the line
 * would add a pending stop, which Python decides), -1 on error. */
static int apply(const Tok *t, PyObject *time, long long end, PyObject *pid, PyObject *node,
                 Block *b, PyObject *started, PyObject *last_timed, PyObject *task_reasons,
                 PyObject *const *types, Py_ssize_t max_started, PyObject *out) {
    int matches = (!b->has[B_TASK] || b->v[B_TASK] == t->task) &&
                  (!b->has[B_SLOT] || b->v[B_SLOT] == t->slot);
    switch (t->kind) {
    case PROMPT:
    case EVAL: {
        if (!b->any || !matches) memset(b, 0, sizeof *b), b->any = 1;
        b->v[B_SLOT] = t->slot, b->v[B_TASK] = t->task, b->has[B_SLOT] = b->has[B_TASK] = 1;
        int us = t->kind == PROMPT ? B_PROMPT_US : B_GENERATION_US;
        int count = t->kind == PROMPT ? B_PROMPT_TOKENS : B_GENERATED_TOKENS;
        b->v[us] = t->us, b->v[count] = t->count, b->has[us] = b->has[count] = 1;
        return 1;
    }
    case TOTAL: {
        if (PyDict_GET_SIZE(last_timed) > max_started) return 0; /* (a bound that shrank) */
        if (PyDict_GET_SIZE(last_timed) == max_started) { /* a new slot beyond the bound? */
            int known = has_int_key(last_timed, t->slot);
            if (known <= 0) return known; /* (Python forgets one: the reference's to do) */
        }
        Block used = *b;
        if (!b->any || !matches) memset(&used, 0, sizeof used);
        /* all it takes is made first; then the changes that may fail, undone if a later one
         * does; then those that cannot (deleting a key that is there) */
        PyObject *key = NULL;
        int launched = started_find(started, t->slot, t->task, &key);
        if (launched < 0) return -1;
        PyObject *slot = PyLong_FromLongLong(t->slot), *task = PyLong_FromLongLong(t->task);
        PyObject *items[I_N] = {
            [I_NODE] = Py_NewRef(node),
            /* end in range, us <= a week: no overflow */
            [I_START_US] = PyLong_FromLongLong(end - t->us),
            [I_END_US] = time != NULL ? Py_NewRef(time) : PyLong_FromLongLong(end),
            [I_TOKENS] = PyLong_FromLongLong(t->count),
            [I_PROMPT_TOKENS] = opt_int(used.has[B_PROMPT_TOKENS], used.v[B_PROMPT_TOKENS]),
            [I_GENERATED_TOKENS] =
                opt_int(used.has[B_GENERATED_TOKENS], used.v[B_GENERATED_TOKENS]),
            [I_PROMPT_US] = opt_int(used.has[B_PROMPT_US], used.v[B_PROMPT_US]),
            [I_GENERATION_US] = opt_int(used.has[B_GENERATION_US], used.v[B_GENERATION_US]),
            [I_SLOT] = Py_XNewRef(slot),
            [I_TASK] = Py_XNewRef(task),
            [I_PID] = Py_NewRef(pid),
            [I_REASON] = Py_NewRef(types[T_EMPTY]), /* a timed request */
            [I_MODEL] = Py_NewRef(types[T_EMPTY]),  /* none outside router mode */
        };
        PyObject *iv = record((PyTypeObject *)types[T_INTERVAL], items, I_N);
        int noted = iv == NULL || !PyDict_GET_SIZE(task_reasons) ? 0
                                                                 : PyDict_Contains(task_reasons, task);
        int bad = iv == NULL || noted < 0 || PyList_Append(out, iv) < 0;
        if (!bad && PyDict_SetItem(last_timed, slot, task) < 0) {
            list_drop_last(out); /* (the record appended) */
            bad = 1;
        }
        if (!bad) { /* started.pop(key, None); task_reasons.pop(task, None): timed, no cancel */
            if (launched) PyDict_DelItem(started, key);
            if (noted) PyDict_DelItem(task_reasons, task);
            memset(b, 0, sizeof *b);
        }
        Py_XDECREF(key), Py_XDECREF(iv), Py_XDECREF(slot), Py_XDECREF(task);
        return bad ? -1 : 1;
    }
    case LAUNCH: {
        /* a request still on this slot is lost, and so is the oldest beyond the bound: both
         * for the reference to say (only a launch on a free slot, within it, is done here) */
        int fits = launch_fits(started, t->slot, t->task, max_started);
        if (fits <= 0) return fits;
        PyObject *key = pair(t->slot, t->task);
        PyObject *at = time != NULL ? Py_NewRef(time) : PyLong_FromLongLong(end);
        PyObject *items[E_N] = {
            [E_NODE] = Py_NewRef(node),
            [E_TIME_US] = Py_XNewRef(at),
            [E_KIND] = Py_NewRef(types[T_STARTED]),
            [E_PID] = Py_NewRef(pid),
            [E_SLOT] = PyLong_FromLongLong(t->slot),
            [E_TASK] = PyLong_FromLongLong(t->task),
            [E_DETAIL] = Py_NewRef(types[T_EMPTY]),
            [E_MODEL] = Py_NewRef(types[T_EMPTY]),
            [E_VALUE] = Py_NewRef(Py_None),
        };
        PyObject *ev = record((PyTypeObject *)types[T_EVENT], items, E_N);
        int bad = key == NULL || ev == NULL || PyList_Append(out, ev) < 0;
        if (!bad && PyDict_SetItem(started, key, at) < 0) {
            list_drop_last(out); /* (the event appended) */
            bad = 1;
        }
        Py_XDECREF(key), Py_XDECREF(at), Py_XDECREF(ev);
        return bad ? -1 : 1;
    }
    case RELEASE: { /* a pending stop when launched here and not yet timed: Python's to add */
        PyObject *slot = PyLong_FromLongLong(t->slot);
        if (slot == NULL) return -1;
        int launched = started_has(started, t->slot, t->task);
        PyObject *timed = launched == 1 ? PyDict_GetItemWithError(last_timed, slot) : NULL;
        Py_DECREF(slot);
        if (launched < 0 || PyErr_Occurred()) return -1;
        if (launched == 0) return 1;
        if (timed == NULL || !PyLong_CheckExact(timed)) return 0;
        int overflow = 0;
        long long timed_task = PyLong_AsLongLongAndOverflow(timed, &overflow);
        if (overflow || (timed_task == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        return timed_task == t->task ? 1 : 0;
    }
    case HEADER:
        memset(b, 0, sizeof *b), b->any = 1;
        b->v[B_SLOT] = t->slot, b->v[B_TASK] = t->task, b->has[B_SLOT] = b->has[B_TASK] = 1;
        return 1;
    default: /* OTHER */
        return 1;
    }
}

/* One line of feed's input as feed reads it: 1 and the fields filled when it is a LogLine (or
 * a Lines item) of a time and PID that fit, the time in range, and a common line; else 0. The
 * `time` and `pid` objects are borrowed, `time` NULL where the line is not made yet (`pid` then
 * the parser's own when the values match, or 0). */
typedef struct {
    Tok tok;
    long long time_us, pid;
    PyObject *time, *pid_obj;
} Read;

static int read_tuple(PyObject *line, Read *r) {
    if (!PyTuple_Check(line) || PyTuple_CheckExact(line) || PyTuple_GET_SIZE(line) != L_N)
        return 0;
    PyObject *msg = PyTuple_GET_ITEM(line, L_MESSAGE), *pid = PyTuple_GET_ITEM(line, L_PID);
    PyObject *time = PyTuple_GET_ITEM(line, L_TIME_US);
    if (!PyLong_CheckExact(time) || !PyLong_CheckExact(pid)) return 0;
    int time_over = 0, pid_over = 0;
    r->time_us = PyLong_AsLongLongAndOverflow(time, &time_over);
    r->pid = PyLong_AsLongLongAndOverflow(pid, &pid_over);
    if (PyErr_Occurred()) { /* (exact ints: never) */
        PyErr_Clear();
        return 0;
    }
    if (time_over || pid_over || r->time_us < MIN_TIME_US || r->time_us > MAX_TIME_US) return 0;
    r->time = time, r->pid_obj = pid;
    return read_token(msg, &r->tok);
}

static int read_item(const Item *it, Read *r) {
    const Found *d = &it->d; /* (an escaped JSON entry has no token: scan made its LogLine) */
    if (d->time_us < MIN_TIME_US || d->time_us > MAX_TIME_US) return 0;
    r->time_us = d->time_us, r->pid = d->pid, r->time = NULL, r->pid_obj = NULL;
    r->tok = d->tok;
    return d->has_tok;
}

/* feed(parser, lines, start, out, types, max_started) -> the index of the first line left to
 * Python; lines a tuple of LogLines or a Lines, types a FeedTypes. It raises only before it
 * changes anything: a line whose changes fail (out of memory) is undone and left to Python,
 * so the caller needs no copy of the parser's state to go back to (Parser.feed_all). */
static PyObject *feed(PyObject *self, PyObject *args) {
    PyObject *parser, *lines, *out, *types;
    Py_ssize_t start, max_started;
    if (!PyArg_ParseTuple(args, "OOnO!O!n:feed", &parser, &lines, &start, &PyList_Type, &out,
                          &PyTuple_Type, &types, &max_started))
        return NULL;
    int lazy = Py_TYPE(lines) == &LinesType;
    if (!lazy && !PyTuple_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "feed() takes a tuple of lines or a Lines");
        return NULL;
    }
    if (PyTuple_GET_SIZE(types) != T_N) {
        PyErr_SetString(PyExc_ValueError,
                        "feed() types: a FeedTypes (interval, started, empty, event, block, "
                        "no_block)");
        return NULL;
    }
    PyObject *ty[T_N];
    for (int k = 0; k < T_N; k++) ty[k] = PyTuple_GET_ITEM(types, k);
    if (!is_plain_tuple_type(ty[T_INTERVAL]) || !is_plain_tuple_type(ty[T_EVENT])) {
        PyErr_SetString(PyExc_TypeError, "feed() needs NamedTuple types for its records");
        return NULL;
    }
    PyObject *block_type = ty[T_BLOCK], *no_block = ty[T_NO_BLOCK];
    Lines *ls = lazy ? (Lines *)lines : NULL;
    Py_ssize_t n = lazy ? ls->n : PyTuple_GET_SIZE(lines), i = start;
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "feed() start out of range");
        return NULL;
    }
    PyObject *attr[P_N] = {NULL};
    for (int k = 0; k < P_N; k++)
        if ((attr[k] = PyObject_GetAttrString(parser, parser_reads[k])) == NULL) break;
    PyObject *node = attr[P_NODE], *pid = attr[P_PID], *started = attr[P_STARTED];
    PyObject *last_timed = attr[P_LAST_TIMED], *block = attr[P_BLOCK];
    PyObject *task_reasons = attr[P_TASK_REASONS];
    PyObject *zero = PyLong_FromLong(0);
    int ok = -1, changed = 0, pid_over = 0;
    long long pid_value = 0;
    Block b;
    if (attr[P_N - 1] == NULL || zero == NULL) goto done; /* (the reads stop at a failure) */
    if (!PyDict_CheckExact(started) || !PyDict_CheckExact(last_timed) ||
        !PyDict_CheckExact(task_reasons)) {
        ok = 1; /* not what Parser holds: leave it all to Python */
        goto done;
    }
    if (PyLong_CheckExact(pid)) pid_value = PyLong_AsLongLongAndOverflow(pid, &pid_over);
    if (!PyLong_CheckExact(pid) || pid_over || PyErr_Occurred()) {
        PyErr_Clear();
        pid_over = 1; /* a lazy line is then the Python loop's (a tuple's compares as ever) */
    }
    if ((ok = block_in(block, no_block, &b)) != 1) goto done;
    for (; i < n; i++) {
        /* a LogLine whose time and PID are ints that fit, the time in range, and a common
         * line; anything else is the Python loop's (which names a time out of range) */
        Read r;
        const Item *it = lazy ? &ls->items[i] : NULL;
        PyObject *obj = lazy ? it->obj : PyTuple_GET_ITEM(lines, i);
        if (!(obj != NULL ? read_tuple(obj, &r) : read_item(it, &r))) break;
        if (r.pid_obj == NULL) { /* a line not made yet: its PID by value */
            if (pid_over || (r.pid != pid_value && r.pid != 0)) break;
            r.pid_obj = r.pid == 0 ? zero : pid;
        } else if (r.pid_obj != pid) { /* another server (Python restarts), unless same or 0 */
            int same = PyObject_RichCompareBool(r.pid_obj, pid, Py_EQ);
            int is_zero = same == 1 ? 0 : PyObject_Not(r.pid_obj);
            if (same < 0 || is_zero < 0) {
                PyErr_Clear(); /* (the line is the Python loop's) */
                break;
            }
            if (!same && !is_zero) break;
        }
        Block before = b;
        int done = apply(&r.tok, r.time, r.time_us, r.pid_obj, node, &b, started, last_timed,
                         task_reasons, ty, max_started, out);
        if (done <= 0) { /* handed back, or failed having changed nothing: the Python loop's */
            b = before;
            if (done < 0) PyErr_Clear();
            break;
        }
        changed = 1;
    }
    if (changed && block_out(parser, &b, block_type, no_block) < 0) {
        /* (out of memory) the block of a request not yet timed is let go, its prompt and
         * generation figures with it; that takes no memory, and nothing is counted twice. The
         * lines are fed: no error is raised after a change, whatever happens here. */
        PyErr_Clear();
        if (PyObject_SetAttr(parser, block_name, no_block) < 0) PyErr_Clear();
    }
done:
    for (int k = 0; k < P_N; k++) Py_XDECREF(attr[k]);
    Py_XDECREF(zero);
    if (ok < 0) return NULL;
    return PyLong_FromSsize_t(ok == 0 ? start : i);
}
