/* moonish.values._cjson: the JSON of plain values and of images, each in one C call.
 *
 * "Plain" bytes are printable ASCII other than '"' and '\\' (moonish.values.jsontext.PLAIN):
 * their JSON string is themselves between quotes. Each function gives the same bytes as its
 * Python twin in moonish.values.plainjson (tests/values/test_c_json.py compares them on random
 * values), and returns None where the JSON needs the general path (orjson), which the caller
 * (moonish.values.model, moonish.values.streams) then runs:
 *
 *   quote(value: bytes) -> bytes | None        '"value"', None unless plain
 *   array(items: Sequence[bytes]) -> bytes | None
 *                                              '["a","b"]' in order ('[]' when empty)
 *   sorted_array(items: Iterable[bytes]) -> bytes | None
 *                                              the same, in byte order (a set's members)
 *   pairs(fields: dict[bytes, bytes]) -> bytes | None
 *                                              '[["f","v"],...]' in the dict's order
 *   scored(order: Iterable[tuple[float, bytes]]) -> bytes | None
 *                                              '[["m",1.5],...]': a sorted set's members and
 *                                              scores in Redis's order, the scores as orjson
 *                                              writes them (Python's repr); None also for a
 *                                              score that is not finite or in [1e-10, 1e-4),
 *                                              where orjson's form differs from repr
 *   stream_entries(entries: dict[tuple[int, int], list[bytes]]) -> bytes | None
 *                                              (a dict or an OrderedDict, in its order)
 *                                              '[{"id":"1-0","fields":[["f","v"],...]},...]':
 *                                              a stream's entries in order ('[]' when empty);
 *                                              None also for an entry without fields (or an
 *                                              odd count) or an ID that is not two u64
 *   stream_bytes(entries: dict[tuple[int, int], list[bytes]]) -> int
 *                                              the bytes of all fields and values (what the
 *                                              image limit's lower bound counts), no copy
 *   image(db: int, key: bytes, type_piece: bytes, value_json: bytes,
 *         expire_at_ms: int | None, end: bytes) -> bytes | None
 *       '{"db":<db>,"key":"<key>"<type_piece><value_json>,"expire_at_ms":<ms|null><end>'
 *       (docs/images.md: the full image), None unless the key is plain (or when db or
 *       expire_at_ms is beyond 64 bits).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int plain(const char *data, Py_ssize_t size) {
    const unsigned char *p = (const unsigned char *)data, *end = p + size;
    for (; p < end; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\') return 0;
    return 1;
}

static int plain_bytes(PyObject *value) {
    return plain(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
}

static char *put(char *at, const char *data, Py_ssize_t size) {
    memcpy(at, data, (size_t)size);
    return at + size;
}

static char *put_quoted(char *at, PyObject *bytes) {
    *at++ = '"';
    at = put(at, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
    *at++ = '"';
    return at;
}

static PyObject *quote(PyObject *module, PyObject *value) {
    (void)module;
    if (!PyBytes_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "quote takes bytes");
        return NULL;
    }
    if (!plain_bytes(value)) Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(value) + 2);
    if (out != NULL) put_quoted(PyBytes_AS_STRING(out), value);
    return out;
}

/* '["a","b"]' from items[0:count] (bytes, checked), or None when one is not plain. */
static PyObject *array_of(PyObject **items, Py_ssize_t count) {
    Py_ssize_t size = 2 + (count ? 3 * count - 1 : 0);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!plain_bytes(items[i])) Py_RETURN_NONE;
        size += PyBytes_GET_SIZE(items[i]);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *at = PyBytes_AS_STRING(out);
    *at++ = '[';
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i) *at++ = ',';
        at = put_quoted(at, items[i]);
    }
    *at = ']';
    return out;
}

static int all_bytes(PyObject **items, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (!PyBytes_CheckExact(items[i])) {
            PyErr_SetString(PyExc_TypeError, "the items must be bytes");
            return 0;
        }
    return 1;
}

static PyObject *array(PyObject *module, PyObject *items) {
    (void)module;
    PyObject *seq = PySequence_Fast(items, "array takes a sequence of bytes");
    if (seq == NULL) return NULL;
    PyObject **got = PySequence_Fast_ITEMS(seq);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = all_bytes(got, count) ? array_of(got, count) : NULL;
    Py_DECREF(seq);
    return out;
}

/* Python's order of bytes: memcmp over the common length, then the shorter first. */
static int compare_bytes(const void *a, const void *b) {
    PyObject *x = *(PyObject *const *)a, *y = *(PyObject *const *)b;
    Py_ssize_t nx = PyBytes_GET_SIZE(x), ny = PyBytes_GET_SIZE(y);
    int c = memcmp(PyBytes_AS_STRING(x), PyBytes_AS_STRING(y), (size_t)(nx < ny ? nx : ny));
    if (c) return c;
    return nx < ny ? -1 : nx > ny;
}

static PyObject *sorted_array(PyObject *module, PyObject *items) {
    (void)module;
    PyObject *list = PySequence_List(items); /* a new list: sorted in place below */
    if (list == NULL) return NULL;
    PyObject **got = PySequence_Fast_ITEMS(list);
    Py_ssize_t count = PyList_GET_SIZE(list);
    PyObject *out = NULL;
    if (all_bytes(got, count)) {
        qsort(got, (size_t)count, sizeof(PyObject *), compare_bytes);
        out = array_of(got, count);
    }
    Py_DECREF(list);
    return out;
}

static PyObject *pairs(PyObject *module, PyObject *fields) {
    (void)module;
    if (!PyDict_CheckExact(fields)) {
        PyErr_SetString(PyExc_TypeError, "pairs takes a dict of bytes");
        return NULL;
    }
    Py_ssize_t count = PyDict_GET_SIZE(fields), size = 2 + (count ? 8 * count - 1 : 0), pos = 0;
    PyObject *field, *value;
    while (PyDict_Next(fields, &pos, &field, &value)) {
        if (!PyBytes_CheckExact(field) || !PyBytes_CheckExact(value)) {
            PyErr_SetString(PyExc_TypeError, "pairs takes a dict of bytes");
            return NULL;
        }
        if (!plain_bytes(field) || !plain_bytes(value)) Py_RETURN_NONE;
        size += PyBytes_GET_SIZE(field) + PyBytes_GET_SIZE(value);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *at = PyBytes_AS_STRING(out);
    *at++ = '[';
    pos = 0;
    int first = 1;
    while (PyDict_Next(fields, &pos, &field, &value)) {
        if (!first) *at++ = ',';
        first = 0;
        *at++ = '[';
        at = put_quoted(at, field);
        *at++ = ',';
        at = put_quoted(at, value);
        *at++ = ']';
    }
    *at = ']';
    return out;
}

/* A growing output buffer (PyMem): for output whose size is only known at the end. */
typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Buffer;

static int reserve(Buffer *buffer, Py_ssize_t more) {
    if (buffer->size + more <= buffer->capacity) return 1;
    Py_ssize_t capacity = buffer->capacity ? buffer->capacity : 256;
    while (capacity < buffer->size + more) capacity *= 2;
    char *data = PyMem_Realloc(buffer->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    buffer->data = data;
    buffer->capacity = capacity;
    return 1;
}

static int append(Buffer *buffer, const char *data, Py_ssize_t size) {
    if (!reserve(buffer, size)) return 0;
    memcpy(buffer->data + buffer->size, data, (size_t)size);
    buffer->size += size;
    return 1;
}

/* The decimal digits of n at out (room for 20 bytes); how many were written. */
static int put_decimal(char *out, long long n) {
    char digits[24];
    int count = 0, size;
    unsigned long long magnitude = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    do {
        digits[count++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    size = count + (n < 0);
    if (n < 0) *out++ = '-';
    while (count) *out++ = digits[--count];
    return size;
}

/* Appends '["member",score]'; 1 done, 0 not plain or not repr-like (None), -1 error. */
static int append_scored(Buffer *buffer, PyObject *item) {
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
        PyErr_SetString(PyExc_TypeError, "scored takes (score, member) tuples");
        return -1;
    }
    PyObject *score = PyTuple_GET_ITEM(item, 0), *member = PyTuple_GET_ITEM(item, 1);
    if (!PyFloat_CheckExact(score) || !PyBytes_CheckExact(member)) return 0;
    double value = PyFloat_AS_DOUBLE(score), magnitude = fabs(value);
    if (!isfinite(value) || (magnitude >= 1e-10 && magnitude < 1e-4)) return 0;
    if (!plain_bytes(member)) return 0;
    char integral[32], *text = integral;
    if (magnitude < 1e15 && value == (double)(long long)value && (value != 0 || !signbit(value))) {
        memcpy(integral + put_decimal(integral, (long long)value), ".0", 3); /* repr's form */
    } else {
        text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) return -1;
    }
    Py_ssize_t text_size = (Py_ssize_t)strlen(text), member_size = PyBytes_GET_SIZE(member);
    int done = reserve(buffer, member_size + text_size + 6);
    if (done) {
        char *at = buffer->data + buffer->size;
        *at++ = '[';
        at = put_quoted(at, member);
        *at++ = ',';
        at = put(at, text, text_size);
        *at++ = ']';
        buffer->size = at - buffer->data;
    }
    if (text != integral) PyMem_Free(text);
    return done ? 1 : -1;
}

static PyObject *scored(PyObject *module, PyObject *order) {
    (void)module;
    PyObject *iterator = PyObject_GetIter(order), *item, *out = NULL;
    if (iterator == NULL) return NULL;
    Buffer buffer = {NULL, 0, 0};
    int got = append(&buffer, "[", 1) ? 1 : -1;
    while (got == 1 && (item = PyIter_Next(iterator)) != NULL) {
        got = (buffer.size == 1 || append(&buffer, ",", 1)) ? append_scored(&buffer, item) : -1;
        Py_DECREF(item);
    }
    if (got == 1 && !PyErr_Occurred() && append(&buffer, "]", 1))
        out = PyBytes_FromStringAndSize(buffer.data, buffer.size);
    else if (got == 0)
        out = Py_NewRef(Py_None);
    Py_DECREF(iterator);
    PyMem_Free(buffer.data);
    return out;
}

/* Appends '{"id":"<ms>-<seq>","fields":[["f","v"],...]}'; 1 done, 0 None, -1 error. */
static int append_stream_entry(Buffer *buffer, PyObject *id, PyObject *fields) {
    if (!PyTuple_CheckExact(id) || PyTuple_GET_SIZE(id) != 2 || !PyList_CheckExact(fields)) return 0;
    Py_ssize_t count = PyList_GET_SIZE(fields), size = 0;
    if (count == 0 || count % 2) return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(fields, i);
        if (!PyBytes_CheckExact(item) || !plain_bytes(item)) return 0;
        size += PyBytes_GET_SIZE(item) + 4;
    }
    unsigned long long ms = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(id, 0));
    unsigned long long seq = ms == (unsigned long long)-1 && PyErr_Occurred()
                                 ? 0 : PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(id, 1));
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError) && !PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear(); /* not an unsigned 64-bit ID: orjson's path decides */
        return 0;
    }
    char head[80];
    int head_size = snprintf(head, sizeof head, "{\"id\":\"%llu-%llu\",\"fields\":[", ms, seq);
    if (!reserve(buffer, head_size + size + count / 2 * 3 + 2)) return -1;
    char *at = put(buffer->data + buffer->size, head, head_size);
    for (Py_ssize_t i = 0; i < count; i += 2) {
        if (i) *at++ = ',';
        *at++ = '[';
        at = put_quoted(at, PyList_GET_ITEM(fields, i));
        *at++ = ',';
        at = put_quoted(at, PyList_GET_ITEM(fields, i + 1));
        *at++ = ']';
    }
    *at++ = ']';
    *at++ = '}';
    buffer->size = at - buffer->data;
    return 1;
}

/* A stream's entries are an OrderedDict (O(1) at its front: trimming), whose dict holds the
 * same order as its links: moonish never reorders one (no move_to_end). */
static PyObject *stream_entries(PyObject *module, PyObject *entries) {
    (void)module;
    if (!PyDict_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "stream_entries takes a dict");
        return NULL;
    }
    Buffer buffer = {NULL, 0, 0};
    Py_ssize_t pos = 0;
    PyObject *id, *fields, *out = NULL;
    int got = append(&buffer, "[", 1) ? 1 : -1;
    while (got == 1 && PyDict_Next(entries, &pos, &id, &fields))
        got = (buffer.size == 1 || append(&buffer, ",", 1)) ? append_stream_entry(&buffer, id, fields) : -1;
    if (got == 1 && append(&buffer, "]", 1))
        out = PyBytes_FromStringAndSize(buffer.data, buffer.size);
    else if (got == 0)
        out = Py_NewRef(Py_None);
    PyMem_Free(buffer.data);
    return out;
}

static PyObject *stream_bytes(PyObject *module, PyObject *entries) {
    (void)module;
    if (!PyDict_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "stream_bytes takes a dict of lists of bytes");
        return NULL;
    }
    Py_ssize_t pos = 0, total = 0;
    PyObject *id, *fields;
    while (PyDict_Next(entries, &pos, &id, &fields)) {
        if (!PyList_CheckExact(fields)) {
            PyErr_SetString(PyExc_TypeError, "stream_bytes takes a dict of lists of bytes");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fields); i++) {
            PyObject *item = PyList_GET_ITEM(fields, i);
            if (!PyBytes_CheckExact(item)) {
                PyErr_SetString(PyExc_TypeError, "stream_bytes takes a dict of lists of bytes");
                return NULL;
            }
            total += PyBytes_GET_SIZE(item);
        }
    }
    return PyLong_FromSsize_t(total);
}

static PyObject *image(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "image takes 6 arguments");
        return NULL;
    }
    PyObject *db = args[0], *expire = args[4];
    for (int i = 1; i < 6; i++)
        if (i != 4 && !PyBytes_CheckExact(args[i])) {
            PyErr_SetString(PyExc_TypeError, "image: key, type_piece, value_json and end are bytes");
            return NULL;
        }
    if (!PyLong_Check(db) || (expire != Py_None && !PyLong_Check(expire))) {
        PyErr_SetString(PyExc_TypeError, "image: db is an int, expire_at_ms an int or None");
        return NULL;
    }
    if (!plain_bytes(args[1])) Py_RETURN_NONE;
    char db_text[24], expire_text[24];
    int overflow = 0;
    long long db_value = PyLong_AsLongLongAndOverflow(db, &overflow);
    if (db_value == -1 && PyErr_Occurred()) return NULL;
    if (overflow) Py_RETURN_NONE; /* beyond 64 bits: the caller's Python formats it */
    int db_size = put_decimal(db_text, db_value), expire_size = 4;
    if (expire == Py_None) {
        memcpy(expire_text, "null", 4);
    } else {
        long long ms = PyLong_AsLongLongAndOverflow(expire, &overflow);
        if (ms == -1 && PyErr_Occurred()) return NULL;
        if (overflow) Py_RETURN_NONE;
        expire_size = put_decimal(expire_text, ms);
    }
    static const char head[] = "{\"db\":", key_head[] = ",\"key\":", expire_head[] = ",\"expire_at_ms\":";
    Py_ssize_t size = (Py_ssize_t)(sizeof head - 1 + sizeof key_head - 1 + sizeof expire_head - 1) +
                      db_size + expire_size + 2; /* the key's quotes */
    for (int i = 1; i < 6; i++)
        if (i != 4) size += PyBytes_GET_SIZE(args[i]);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *at = PyBytes_AS_STRING(out);
    at = put(at, head, sizeof head - 1);
    at = put(at, db_text, db_size);
    at = put(at, key_head, sizeof key_head - 1);
    at = put_quoted(at, args[1]);
    for (int i = 2; i < 4; i++) at = put(at, PyBytes_AS_STRING(args[i]), PyBytes_GET_SIZE(args[i]));
    at = put(at, expire_head, sizeof expire_head - 1);
    at = put(at, expire_text, expire_size);
    put(at, PyBytes_AS_STRING(args[5]), PyBytes_GET_SIZE(args[5]));
    return out;
}

static PyMethodDef methods[] = {
    {"quote", quote, METH_O, "quote(value) -> bytes | None"},
    {"array", array, METH_O, "array(items) -> bytes | None"},
    {"sorted_array", sorted_array, METH_O, "sorted_array(items) -> bytes | None"},
    {"pairs", pairs, METH_O, "pairs(fields) -> bytes | None"},
    {"scored", scored, METH_O, "scored(order) -> bytes | None"},
    {"stream_entries", stream_entries, METH_O, "stream_entries(entries) -> bytes | None"},
    {"stream_bytes", stream_bytes, METH_O, "stream_bytes(entries) -> int"},
    {"image", (PyCFunction)(void (*)(void))image, METH_FASTCALL,
     "image(db, key, type_piece, value_json, expire_at_ms, end) -> bytes | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "moonish.values._cjson",
    "The JSON of plain values and of images, each in one C call (see the source's comment).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cjson(void) { return PyModule_Create(&module_def); }
