/* moonish.log._cframes: the frames of a batch of kv_change records in one C call.
 *
 * The same bytes as moonish.log.frames.encode_records on records that are all
 * moonish.log.records.KvChange (tests/log/test_c_frame_encoder.py compares the two on random
 * records): the payload grammar of moonish.log.payloads (kv_change) inside version 2 frames
 * (docs/wal-format.md: a 36-byte header whose first field is the crc32c of its other 32
 * bytes, the payload, a 4-byte trailer with the crc32c of header and payload). All integers
 * are little-endian. The checksums come from the crc32c package, called through Python.
 *
 * encode_changes(records, first_lsn, commit_us, flags, source) -> bytes | None
 *   records: a sequence of KvChange; first_lsn: the first record's LSN; commit_us: the
 *   commit time (microseconds since the Unix epoch); flags: the frames' flags byte; source:
 *   a source position to store on the last record instead of its own, or None.
 *   Returns None when a record is not exactly a KvChange or a field has another type than the
 *   write path gives it (exact bytes and str, bool flags, a tuple argv, int db/view/replay):
 *   the caller then runs the Python encoder, which converts or refuses it. Raises ValueError
 *   for a db outside 0..65535 (the Python encoder's message), a view, replay or flags outside
 *   0..255 (Python: struct.error) or a payload above 512 MiB; KeyError for an unknown row.
 *
 * kv_change(op, db, command, key, before, after, view, expired, replay, state, argv, loading,
 *           source, row) -> KvChange
 *   the record from its 14 fields as they are (no checks: tuple.__new__(KvChange, fields)),
 *   without the intermediate tuple and call that costs from Python.
 *
 * scan(buf, pos, next_lsn, max_records, mid_batch_start, file_offset) -> (frames, end, done)
 *   the committed frames of version 2 bytes, as moonish.log.frames.scan_frames takes them, up
 *   to the first frame that is not whole and sound (see the function's comment); scan_frames
 *   goes on from there in Python. Each frame's trailer checksum is checked as there.
 *
 * configure(kv_change_type, row_flags, record_type, crc32c) and configure_scan(frame_type)
 * bind what the functions read from Python once, at import of moonish.log.frames.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DB 65535
#define MAX_PAYLOAD ((Py_ssize_t)512 * 1024 * 1024)
#define HEADER_BYTES 36
#define TRAILER_BYTES 4
#define CHANGE_HEAD_BYTES 8
/* change_flags bits (moonish.log.records CHANGE_*; the row bits come from configure) */
#define CHANGE_EXPIRED 1
#define CHANGE_LOADING 2
#define CHANGE_SOURCE 4
#define STACK_RECORDS 64

static PyObject *kv_change_type = NULL;
static PyObject *row_flags = NULL;
static PyObject *crc_function = NULL;
static int kv_change_record_type = -1;

static void put_u16(char *at, uint32_t v) {
    at[0] = (char)(v & 0xff);
    at[1] = (char)((v >> 8) & 0xff);
}

static void put_u32(char *at, uint32_t v) {
    at[0] = (char)(v & 0xff);
    at[1] = (char)((v >> 8) & 0xff);
    at[2] = (char)((v >> 16) & 0xff);
    at[3] = (char)((v >> 24) & 0xff);
}

static void put_u64(char *at, uint64_t v) {
    put_u32(at, (uint32_t)(v & 0xffffffffu));
    put_u32(at + 4, (uint32_t)(v >> 32));
}

/* The bytes the next checksum is of, lent to the crc32c package through the buffer
 * protocol: one object for every call, not a memoryview made and freed per call. The
 * package takes its Py_buffer (a copy of the pointer and size) before it could release the
 * GIL, so another thread's next call cannot change what this one reads. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} Span;

static int span_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Span *span = (Span *)self;
    return PyBuffer_FillInfo(view, self, span->data, span->size, 1, flags);
}

static PyBufferProcs span_buffer = {span_getbuffer, NULL};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "moonish.log._cframes.Span",
    .tp_basicsize = sizeof(Span),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_buffer = &span_buffer,
};

static Span *span = NULL;
static PyObject *span_args = NULL; /* (span,): crc32c.crc32c takes a tuple (METH_VARARGS) */

/* crc32c of data[0:size], by the crc32c package; -1 on error. */
static int64_t crc_of(char *data, Py_ssize_t size) {
    span->data = data;
    span->size = size;
    PyObject *result = PyObject_Call(crc_function, span_args, NULL);
    span->data = NULL;
    span->size = 0;
    if (result == NULL) return -1;
    unsigned long value = PyLong_AsUnsignedLong(result);
    Py_DECREF(result);
    if (value == (unsigned long)-1 && PyErr_Occurred()) return -1;
    return (int64_t)(value & 0xffffffffu);
}

/* What one record's payload is made of, read and checked in the first pass. */
typedef struct {
    PyObject *record; /* borrowed from the batch's tuple, as are the fields below */
    PyObject *argv; /* a tuple: immutable between the two passes */
    PyObject *source; /* borrowed: bytes, possibly empty */
    Py_ssize_t payload;
    unsigned char op, change_flags, view, replay;
    uint16_t db;
} Change;

/* A byte field 0..255 from an int; -2 when it is not an int (the caller falls back). */
static int byte_field(PyObject *value, const char *name) {
    if (!PyLong_Check(value)) return -2;
    long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v > 255) {
        PyErr_Format(PyExc_ValueError, "%s must be 0..255, got %ld", name, v);
        return -1;
    }
    return (int)v;
}

/* Reads record into change; 1 done, 0 not encodable here (fall back), -1 error. */
static int read_change(PyObject *record, PyObject *source, Change *change) {
    if (Py_TYPE(record) != (PyTypeObject *)kv_change_type || PyTuple_GET_SIZE(record) != 14)
        return 0;
    PyObject *op = PyTuple_GET_ITEM(record, 0), *db = PyTuple_GET_ITEM(record, 1);
    if (!PyUnicode_CheckExact(op) || PyUnicode_GET_LENGTH(op) != 1 || !PyLong_Check(db)) return 0;
    Py_UCS4 op_char = PyUnicode_READ_CHAR(op, 0);
    if (op_char > 255) return 0;
    static const int bytes_fields[] = {2, 3, 4, 5, 9, 12};
    for (size_t i = 0; i < sizeof(bytes_fields) / sizeof(bytes_fields[0]); i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(record, bytes_fields[i]))) return 0;
    if (source == Py_None) source = PyTuple_GET_ITEM(record, 12);
    else if (!PyBytes_CheckExact(source)) return 0;
    /* Only exact types below, so that no Python code runs while the batch is read. */
    PyObject *expired_flag = PyTuple_GET_ITEM(record, 7), *loading_flag = PyTuple_GET_ITEM(record, 11);
    PyObject *row = PyTuple_GET_ITEM(record, 13), *argv = PyTuple_GET_ITEM(record, 10);
    if (!PyBool_Check(expired_flag) || !PyBool_Check(loading_flag) || !PyUnicode_CheckExact(row) ||
        !PyTuple_CheckExact(argv))
        return 0;
    int overflow = 0;
    long db_index = PyLong_AsLongAndOverflow(db, &overflow);
    if (db_index == -1 && PyErr_Occurred()) return -1;
    if (overflow || db_index < 0 || db_index > MAX_DB) {
        PyErr_Format(PyExc_ValueError, "db index must be 0..%d, got %S", MAX_DB, db);
        return -1;
    }
    int view = byte_field(PyTuple_GET_ITEM(record, 6), "view");
    if (view < 0) return view == -2 ? 0 : -1;
    int replay = byte_field(PyTuple_GET_ITEM(record, 8), "replay");
    if (replay < 0) return replay == -2 ? 0 : -1;
    int expired = expired_flag == Py_True, loading = loading_flag == Py_True;
    long row_bits = 0;
    if (PyUnicode_GET_LENGTH(row)) {
        PyObject *bits = PyDict_GetItemWithError(row_flags, row);
        if (bits == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, row);
            return -1;
        }
        row_bits = PyLong_AsLong(bits);
        if (row_bits == -1 && PyErr_Occurred()) return -1;
    }
    Py_ssize_t argc = PyTuple_GET_SIZE(argv);
    Py_ssize_t size = CHANGE_HEAD_BYTES + 4 * 5 + 4 + 4 * argc;
    for (Py_ssize_t i = 0; i < argc; i++) {
        PyObject *arg = PyTuple_GET_ITEM(argv, i);
        if (!PyBytes_CheckExact(arg)) return 0;
        size += PyBytes_GET_SIZE(arg);
    }
    static const int sized_fields[] = {2, 3, 4, 5, 9};
    for (size_t i = 0; i < sizeof(sized_fields) / sizeof(sized_fields[0]); i++)
        size += PyBytes_GET_SIZE(PyTuple_GET_ITEM(record, sized_fields[i]));
    Py_ssize_t source_size = PyBytes_GET_SIZE(source);
    if (source_size) size += 4 + source_size;
    change->record = record;
    change->argv = argv;
    change->source = source;
    change->payload = size;
    change->op = (unsigned char)op_char;
    change->change_flags = (unsigned char)((expired ? CHANGE_EXPIRED : 0) |
                                           (loading ? CHANGE_LOADING : 0) |
                                           (source_size ? CHANGE_SOURCE : 0) | row_bits);
    change->view = (unsigned char)view;
    change->replay = (unsigned char)replay;
    change->db = (uint16_t)db_index;
    return 1;
}

static char *put_blob(char *at, PyObject *bytes) {
    Py_ssize_t size = PyBytes_GET_SIZE(bytes);
    put_u32(at, (uint32_t)size);
    memcpy(at + 4, PyBytes_AS_STRING(bytes), (size_t)size);
    return at + 4 + size;
}

/* Writes the frame of change at out; the number of bytes written, -1 on error. */
static Py_ssize_t write_frame(char *out, const Change *change, uint64_t lsn, int64_t commit_us,
                              int flags, uint32_t index, uint32_t count) {
    PyObject *record = change->record;
    put_u32(out + 4, (uint32_t)change->payload);
    put_u64(out + 8, lsn);
    out[16] = (char)kv_change_record_type;
    out[17] = (char)flags;
    put_u16(out + 18, 0);
    put_u32(out + 20, index);
    put_u32(out + 24, count);
    put_u64(out + 28, (uint64_t)commit_us);
    int64_t head_crc = crc_of(out + 4, HEADER_BYTES - 4);
    if (head_crc < 0) return -1;
    put_u32(out, (uint32_t)head_crc);
    char *at = out + HEADER_BYTES;
    at[0] = (char)change->op;
    at[1] = (char)change->change_flags;
    at[2] = (char)change->view;
    at[3] = (char)change->replay;
    put_u16(at + 4, change->db);
    put_u16(at + 6, 0);
    at += CHANGE_HEAD_BYTES;
    at = put_blob(at, PyTuple_GET_ITEM(record, 2)); /* command */
    at = put_blob(at, PyTuple_GET_ITEM(record, 3)); /* key */
    at = put_blob(at, PyTuple_GET_ITEM(record, 4)); /* before */
    at = put_blob(at, PyTuple_GET_ITEM(record, 5)); /* after */
    at = put_blob(at, PyTuple_GET_ITEM(record, 9)); /* state */
    Py_ssize_t argc = PyTuple_GET_SIZE(change->argv);
    put_u32(at, (uint32_t)argc);
    at += 4;
    for (Py_ssize_t i = 0; i < argc; i++) at = put_blob(at, PyTuple_GET_ITEM(change->argv, i));
    if (PyBytes_GET_SIZE(change->source)) at = put_blob(at, change->source);
    Py_ssize_t end = HEADER_BYTES + change->payload;
    int64_t frame_crc = crc_of(out, end); /* the trailer: header and payload */
    if (frame_crc < 0) return -1;
    put_u32(out + end, (uint32_t)frame_crc);
    return end + TRAILER_BYTES;
}

static PyObject *encode_changes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_changes takes 5 arguments");
        return NULL;
    }
    if (kv_change_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "moonish.log._cframes is not configured");
        return NULL;
    }
    unsigned long long first_lsn = PyLong_AsUnsignedLongLong(args[1]);
    if (first_lsn == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    long long commit_us = PyLong_AsLongLong(args[2]);
    if (commit_us == -1 && PyErr_Occurred()) return NULL;
    long flags = PyLong_AsLong(args[3]);
    if (flags == -1 && PyErr_Occurred()) return NULL;
    if (flags < 0 || flags > 255) {
        PyErr_Format(PyExc_ValueError, "flags must be 0..255, got %ld", flags);
        return NULL;
    }
    PyObject *source = args[4];
    PyObject *records = PySequence_Tuple(args[0]); /* a snapshot: nothing changes it below */
    if (records == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(records);
    Change stack[STACK_RECORDS];
    Change *changes = count <= STACK_RECORDS ? stack : PyMem_Malloc(sizeof(Change) * count);
    PyObject *result = NULL;
    Py_ssize_t read = 0, total = 0;
    if (changes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; read < count; read++) {
        PyObject *own = read == count - 1 ? source : Py_None;
        int got = read_change(PyTuple_GET_ITEM(records, read), own, &changes[read]);
        if (got <= 0) {
            if (got == 0) result = Py_NewRef(Py_None);
            goto done;
        }
        if (changes[read].payload > MAX_PAYLOAD) {
            PyErr_Format(PyExc_ValueError, "payload of %zd bytes exceeds %zd",
                         changes[read].payload, MAX_PAYLOAD);
            read++;
            goto done;
        }
        total += HEADER_BYTES + changes[read].payload + TRAILER_BYTES;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    char *at = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t written = write_frame(at, &changes[i], (uint64_t)(first_lsn + i), commit_us,
                                         (int)flags, (uint32_t)i, (uint32_t)count);
        if (written < 0) {
            Py_DECREF(out);
            goto done;
        }
        at += written;
    }
    result = out;
done:
    if (changes != NULL && changes != stack) PyMem_Free(changes);
    Py_DECREF(records);
    return result;
}

static PyObject *kv_change(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (kv_change_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "moonish.log._cframes is not configured");
        return NULL;
    }
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "kv_change takes the 14 fields of a KvChange");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)kv_change_type;
    PyObject *record = type->tp_alloc(type, 14);
    if (record == NULL) return NULL;
    for (Py_ssize_t i = 0; i < 14; i++) PyTuple_SET_ITEM(record, i, Py_NewRef(args[i]));
    return record;
}

static PyObject *configure(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *type, *rows, *crc;
    int record_type;
    if (!PyArg_ParseTuple(args, "O!O!iO:configure", &PyType_Type, &type, &PyDict_Type, &rows,
                          &record_type, &crc))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) || !PyCallable_Check(crc)) {
        PyErr_SetString(PyExc_TypeError, "configure takes a tuple type and the crc32c function");
        return NULL;
    }
    Py_XSETREF(kv_change_type, Py_NewRef(type));
    Py_XSETREF(row_flags, Py_NewRef(rows));
    Py_XSETREF(crc_function, Py_NewRef(crc));
    kv_change_record_type = record_type;
    Py_RETURN_NONE;
}


/* -- scanning ---------------------------------------------------------------------------- */

static PyObject *frame_type = NULL;

static uint32_t get_u32(const unsigned char *at) {
    return (uint32_t)at[0] | ((uint32_t)at[1] << 8) | ((uint32_t)at[2] << 16) |
           ((uint32_t)at[3] << 24);
}

static uint64_t get_u64(const unsigned char *at) {
    return (uint64_t)get_u32(at) | ((uint64_t)get_u32(at + 4) << 32);
}

/* A Frame (moonish.log.frames.Frame, a NamedTuple) from its eight fields, as
 * tuple.__new__(Frame, fields) makes it; NULL on error. */
static PyObject *new_frame(uint64_t lsn, unsigned rtype, unsigned flags, uint32_t bidx,
                           uint32_t bsize, int64_t commit_us, const unsigned char *payload,
                           Py_ssize_t length, long long offset) {
    PyObject *fields[8];
    fields[0] = PyLong_FromUnsignedLongLong(lsn);
    fields[1] = PyLong_FromLong((long)rtype);
    fields[2] = PyLong_FromLong((long)flags);
    fields[3] = PyLong_FromUnsignedLong(bidx);
    fields[4] = PyLong_FromUnsignedLong(bsize);
    fields[5] = PyLong_FromLongLong(commit_us);
    fields[6] = PyBytes_FromStringAndSize((const char *)payload, length);
    fields[7] = PyLong_FromLongLong(offset);
    PyTypeObject *type = (PyTypeObject *)frame_type;
    PyObject *frame = NULL;
    int ok = 1;
    for (int i = 0; i < 8; i++) ok &= fields[i] != NULL;
    if (ok) frame = type->tp_alloc(type, 8);
    if (frame == NULL) {
        for (int i = 0; i < 8; i++) Py_XDECREF(fields[i]);
        return NULL;
    }
    for (int i = 0; i < 8; i++) PyTuple_SET_ITEM(frame, i, fields[i]);
    return frame;
}

/* scan(buf, pos, next_lsn, max_records, mid_batch_start, file_offset) -> (frames, end, done)
 *
 * The committed frames of a version 2 segment's bytes buf[pos:], as
 * moonish.log.frames.scan_frames takes them, up to the first frame it would not take as it
 * is: one past the data's end, with a bad checksum, length, LSN, flags or batch fields. done
 * is True when the scan ended cleanly (at the end of buf with no batch open, or at
 * max_records); otherwise scan_frames goes on from end in Python, which names the reason.
 * end is the buffer position after the last committed frame; a batch still open is not
 * returned. */
static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (frame_type == NULL || crc_function == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "moonish.log._cframes is not configured");
        return NULL;
    }
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "scan(buf, pos, next_lsn, max_records, mid_batch_start, file_offset)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    unsigned long long next_lsn = PyLong_AsUnsignedLongLong(args[2]);
    if (next_lsn == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_records = PyLong_AsSsize_t(args[3]);
    if (max_records == -1 && PyErr_Occurred()) return NULL;
    int may_resume = PyObject_IsTrue(args[4]);
    if (may_resume < 0) return NULL;
    long long file_offset = PyLong_AsLongLong(args[5]);
    if (file_offset == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    PyObject *frames = PyList_New(0);
    PyObject *result = NULL;
    if (frames == NULL) goto done;
    Py_ssize_t committed = 0, committed_pos = pos;
    uint32_t open_size = 0, expect_index = 0;
    int clean = 0;
    while (pos >= 0) { /* a negative position is the Python scanner's to judge */
        if (pos >= end) {
            clean = open_size == 0;
            break;
        }
        if (end - pos < HEADER_BYTES) break;
        const unsigned char *at = buf + pos;
        uint32_t length = get_u32(at + 4);
        uint64_t lsn = get_u64(at + 8);
        unsigned rtype = at[16], flags = at[17];
        unsigned reserved = (unsigned)at[18] | ((unsigned)at[19] << 8);
        uint32_t bidx = get_u32(at + 20), bsize = get_u32(at + 24);
        int64_t commit_us = (int64_t)get_u64(at + 28);
        Py_ssize_t room = end - pos - HEADER_BYTES - TRAILER_BYTES; /* payload bytes there */
        if ((Py_ssize_t)length > MAX_PAYLOAD || (Py_ssize_t)length > room || lsn != next_lsn ||
            (flags & ~1u) || reserved)
            break;
        Py_ssize_t frame_end = pos + HEADER_BYTES + (Py_ssize_t)length + TRAILER_BYTES;
        int64_t crc = crc_of((char *)at, HEADER_BYTES + (Py_ssize_t)length);
        if (crc < 0) goto done;
        if ((uint32_t)crc != get_u32(buf + frame_end - TRAILER_BYTES)) break;
        if (!(bsize == 1 && open_size == 0 && bidx == 0)) {
            if (open_size) {
                if (bidx != expect_index || bsize != open_size) break;
            } else if (bsize == 0 || bidx >= bsize ||
                       (bidx && !(may_resume && PyList_GET_SIZE(frames) == 0)) || !(flags & 1u)) {
                break;
            }
        }
        PyObject *frame = new_frame(lsn, rtype, flags, bidx, bsize, commit_us, at + HEADER_BYTES,
                                    (Py_ssize_t)length, file_offset + pos);
        if (frame == NULL) goto done;
        int appended = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (appended < 0) goto done;
        pos = frame_end;
        next_lsn++;
        if (bidx + 1 == bsize) {
            open_size = 0;
            committed = PyList_GET_SIZE(frames);
            committed_pos = pos;
            if (committed >= max_records) {
                clean = 1;
                break;
            }
        } else {
            open_size = bsize;
            expect_index = bidx + 1;
        }
    }
    if (PyList_GET_SIZE(frames) != committed &&
        PyList_SetSlice(frames, committed, PyList_GET_SIZE(frames), NULL) < 0)
        goto done;
    result = Py_BuildValue("(OnO)", frames, committed_pos, clean ? Py_True : Py_False);
done:
    Py_XDECREF(frames);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *configure_scan(PyObject *module, PyObject *type) {
    (void)module;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure_scan takes the Frame tuple type");
        return NULL;
    }
    Py_XSETREF(frame_type, Py_NewRef(type));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode_changes", (PyCFunction)(void (*)(void))encode_changes, METH_FASTCALL,
     "encode_changes(records, first_lsn, commit_us, flags, source) -> bytes | None"},
    {"kv_change", (PyCFunction)(void (*)(void))kv_change, METH_FASTCALL,
     "kv_change(op, db, command, key, before, after, view, expired, replay, state, argv, "
     "loading, source, row) -> KvChange"},
    {"configure", configure, METH_VARARGS,
     "configure(kv_change_type, row_flags, record_type, crc32c) -> None"},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buf, pos, next_lsn, max_records, mid_batch_start, file_offset) -> (frames, end, done)"},
    {"configure_scan", configure_scan, METH_O, "configure_scan(frame_type) -> None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "moonish.log._cframes",
    "The frames of a batch of kv_change records in one C call (see the source's comment).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cframes(void) {
    if (PyType_Ready(&SpanType) < 0) return NULL;
    if (span == NULL) {
        span = PyObject_New(Span, &SpanType);
        if (span == NULL) return NULL;
        span->data = NULL;
        span->size = 0;
        span_args = PyTuple_Pack(1, (PyObject *)span);
        if (span_args == NULL) return NULL;
    }
    return PyModule_Create(&module_def);
}
