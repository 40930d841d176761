/* moonish.cdc._cenvelope: the envelopes of a run of kv_change records in one C call, and the
 * change feed's lines with the token after each event in another.
 *
 * The same bytes as moonish.cdc.envelope.EnvelopeEncoder._change (tests/cdc/
 * test_c_envelope_encoder.py compares the two on random records): payload-only Debezium JSON
 * (docs/envelopes.md), the images spliced in as the writer stored them. The payload grammar
 * is moonish.log.payloads' (kv_change), little-endian:
 *
 *   head    := op:u8 change_flags:u8 view:u8 replay:u8 db:u16 reserved:u16
 *   payload := head bytes(command) bytes(key) bytes(before) bytes(after) bytes(state)
 *              argc:u32 bytes(arg)*argc [bytes(source) if change_flags & CHANGE_SOURCE]
 *   bytes(x) := len:u32 x
 *
 * encode_changes(frames, start, ops, envelopes, source_head, tail, shard, merged) -> int
 *   frames: a list of moonish.log.frames.Frame; start: the first to encode; ops, envelopes:
 *   lists the op (str) and the envelope (bytes) of each encoded frame are appended to;
 *   source_head: the envelope's bytes from ',"source":{' up to the value of source.ts_ms;
 *   tail: its last bytes, from '"ts_ms":' of the processing time to the closing brace;
 *   shard: source.shard; merged: true in a merged read over every shard, which marks an RDB
 *   load's rows by the load's first and last rows (docs/envelopes.md). Encodes frames[start], frames[start + 1], ... while each is a
 *   kv_change record it encodes exactly as the Python encoder would, and returns the index of
 *   the first it leaves to Python: another record type, a record of a disabled stream, a
 *   payload that does not follow the grammar (Python names the damage), an image that holds
 *   "_omitted_length" anywhere but in the place an omitted value is written, a command that
 *   is not plain ASCII, a commit time outside 0..2^63/1000.
 *
 * token_lines(head, mid, tail, with_envelopes, positions, indexes, frames, envelopes)
 *   -> list[bytes]
 *   The change feed's framed events (moonish.serve.chunks.Chunk): per event i,
 *   head + token + mid + envelopes[i] (only if with_envelopes) + tail, where token is the
 *   components of the token after the event joined by '.' (moonish.cdc.token: a letter for
 *   the digit count, a = 1 .. t = 20, then the LSN). positions: the token's LSNs before the
 *   first event (shard 0 first; not changed); event i moves component indexes[i] to
 *   frames[i].lsn when that is larger. head carries the token's "m<count>." prefix.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KV_CHANGE 5 /* moonish.log.format.RecordType.KV_CHANGE */
#define FLAG_BATCH 0x01 /* frame flags (moonish.log.format) */
#define FLAG_SNAPSHOT 0x80 /* a snapshot row (moonish.cdc.envelope) */
#define CHANGE_EXPIRED 1 /* change_flags (moonish.log.records CHANGE_*) */
#define CHANGE_SOURCE 4
#define CHANGE_FIRST_ROW 8
#define CHANGE_LAST_ROW 16
#define CHANGE_LOAD_FIRST 32
#define CHANGE_LOAD_LAST 64
#define ROW_BITS (CHANGE_FIRST_ROW | CHANGE_LAST_ROW | CHANGE_LOAD_FIRST | CHANGE_LOAD_LAST)
#define KNOWN_CHANGE_FLAGS 127
#define MAX_VIEW 4 /* ViewType.NEW_AND_OLD_IMAGES */
#define REPLAY_COMMAND 1 /* Replay */
#define REPLAY_STATE 2
#define HEAD_BYTES 8
#define MAX_COMMIT_US (INT64_MAX / 1000)

static const char OMITTED[] = "\"_omitted_length\"";

static uint32_t get_u32(const unsigned char *at) {
    return (uint32_t)at[0] | ((uint32_t)at[1] << 8) | ((uint32_t)at[2] << 16) |
           ((uint32_t)at[3] << 24);
}

/* One bytes(x) field at *pos of payload[0:size]: its start and length, *pos moved past it;
 * 0 when it overruns the payload. */
static int field(const unsigned char *payload, Py_ssize_t size, Py_ssize_t *pos,
                 const unsigned char **start, Py_ssize_t *length) {
    if (size - *pos < 4) return 0;
    uint32_t n = get_u32(payload + *pos);
    *pos += 4;
    if ((Py_ssize_t)n > size - *pos) return 0;
    *start = payload + *pos;
    *length = (Py_ssize_t)n;
    *pos += (Py_ssize_t)n;
    return 1;
}

static int has_omitted(const unsigned char *image, Py_ssize_t length) {
    Py_ssize_t n = (Py_ssize_t)sizeof(OMITTED) - 1;
    for (Py_ssize_t i = 0; i + n <= length; i++)
        if (image[i] == '"' && memcmp(image + i, OMITTED, (size_t)n) == 0) return 1;
    return 0;
}

/* An image whose value was left out, as the writer stores it: it ends with
 *   ,"value":{"_omitted_length":N},"expire_at_ms":E}      (N digits, E null or -?digits)
 * (moonish.cdc.images.omitted_out's pattern). The parts an envelope shows instead. */
typedef struct {
    Py_ssize_t prefix_len; /* the image before ,"value": */
    const unsigned char *length, *expire;
    Py_ssize_t length_len, expire_len;
} Omitted;

static const char VALUE_HEAD[] = ",\"value\":{\"_omitted_length\":";
static const char EXPIRE_HEAD[] = "},\"expire_at_ms\":";

/* 1 when image[0:size] ends as above, with its parts in *o. */
static int omitted_parts(const unsigned char *image, Py_ssize_t size, Omitted *o) {
    Py_ssize_t end = size - 1, i;
    if (end < 0 || image[end] != '}') return 0;
    if (end >= 4 && memcmp(image + end - 4, "null", 4) == 0) {
        i = end - 4;
    } else {
        i = end;
        while (i > 0 && image[i - 1] >= '0' && image[i - 1] <= '9') i--;
        if (i == end) return 0;
        if (i > 0 && image[i - 1] == '-') i--;
    }
    o->expire = image + i;
    o->expire_len = end - i;
    Py_ssize_t n = (Py_ssize_t)sizeof(EXPIRE_HEAD) - 1;
    if (i < n || memcmp(image + i - n, EXPIRE_HEAD, (size_t)n) != 0) return 0;
    Py_ssize_t digits_end = i - n, j = digits_end;
    while (j > 0 && image[j - 1] >= '0' && image[j - 1] <= '9') j--;
    if (j == digits_end) return 0;
    o->length = image + j;
    o->length_len = digits_end - j;
    n = (Py_ssize_t)sizeof(VALUE_HEAD) - 1;
    if (j < n || memcmp(image + j - n, VALUE_HEAD, (size_t)n) != 0) return 0;
    o->prefix_len = j - n;
    return 1;
}

/* Printable ASCII other than '"' and '\\' (moonish.values.jsontext.is_plain). */
static int is_plain(const unsigned char *text, Py_ssize_t length) {
    for (Py_ssize_t i = 0; i < length; i++)
        if (text[i] < 0x20 || text[i] > 0x7e || text[i] == '"' || text[i] == '\\') return 0;
    return 1;
}

static char *put(char *at, const void *bytes, Py_ssize_t length) {
    memcpy(at, bytes, (size_t)length);
    return at + length;
}

#define PUT_TEXT(at, text) put((at), (text), (Py_ssize_t)sizeof(text) - 1)

/* bytes with a-z as A-Z (Python's bytes.upper: ASCII letters only). */
static char *put_upper(char *at, const unsigned char *bytes, Py_ssize_t length) {
    for (Py_ssize_t i = 0; i < length; i++)
        at[i] = (char)(bytes[i] >= 'a' && bytes[i] <= 'z' ? bytes[i] - ('a' - 'A') : bytes[i]);
    return at + length;
}

static char *put_int(char *at, long long value) {
    return at + sprintf(at, "%lld", value);
}

/* What a kv_change payload holds that an envelope shows; 0 when Python must encode it. */
typedef struct {
    unsigned char op, change_flags;
    unsigned db;
    const unsigned char *command, *before, *after;
    Py_ssize_t command_len, before_len, after_len;
    int before_omitted, after_omitted;
    Omitted before_parts, after_parts;
} Change;

/* The fields of a payload that follows the grammar as moonish.log.payloads._change_parts
 * checks it, and that this encoder takes (see the file's comment). */
static int read_change(const unsigned char *p, Py_ssize_t size, Change *c) {
    if (size < HEAD_BYTES) return 0;
    unsigned op = p[0], flags = p[1], view = p[2], replay = p[3];
    unsigned reserved = (unsigned)p[6] | ((unsigned)p[7] << 8);
    if (view == 0) return 0; /* a disabled stream's record: Python skips it after checking */
    Py_ssize_t pos = HEAD_BYTES, key_len, state_len, ignored;
    const unsigned char *key, *state, *arg;
    if (!field(p, size, &pos, &c->command, &c->command_len)) return 0;
    if (!field(p, size, &pos, &key, &key_len)) return 0;
    if (!field(p, size, &pos, &c->before, &c->before_len)) return 0;
    if (!field(p, size, &pos, &c->after, &c->after_len)) return 0;
    if (!field(p, size, &pos, &state, &state_len)) return 0;
    if (size - pos < 4) return 0;
    uint32_t argc = get_u32(p + pos);
    pos += 4;
    for (uint32_t i = 0; i < argc; i++)
        if (!field(p, size, &pos, &arg, &ignored)) return 0;
    if (flags & CHANGE_SOURCE) {
        const unsigned char *source;
        Py_ssize_t source_len;
        if (!field(p, size, &pos, &source, &source_len) || source_len == 0) return 0;
    }
    if (pos != size) return 0;
    if ((op != 'c' && op != 'u' && op != 'd' && op != 'r') || (flags & ~KNOWN_CHANGE_FLAGS) ||
        view > MAX_VIEW || replay > REPLAY_STATE || reserved ||
        (state_len && replay != REPLAY_STATE) || (argc && replay != REPLAY_COMMAND) ||
        (!argc && replay == REPLAY_COMMAND) ||
        ((flags & ROW_BITS) && op != 'r') ||
        ((flags & CHANGE_LOAD_FIRST) && !(flags & CHANGE_FIRST_ROW)) ||
        ((flags & CHANGE_LOAD_LAST) && !(flags & CHANGE_LAST_ROW)))
        return 0;
    if (c->command_len && !is_plain(c->command, c->command_len)) return 0;
    c->before_omitted = has_omitted(c->before, c->before_len);
    if (c->before_omitted && !omitted_parts(c->before, c->before_len, &c->before_parts)) return 0;
    c->after_omitted = has_omitted(c->after, c->after_len);
    if (c->after_omitted && !omitted_parts(c->after, c->after_len, &c->after_parts)) return 0;
    c->op = (unsigned char)op;
    c->change_flags = (unsigned char)flags;
    c->db = (unsigned)p[4] | ((unsigned)p[5] << 8);
    return 1;
}

/* An image as the envelope shows it: as stored, "null" for none, or with its omitted value
 * as moonish.cdc.images.omitted_out writes it. */
static char *put_image(char *at, const unsigned char *image, Py_ssize_t size, int omitted,
                       const Omitted *o) {
    if (size == 0) return PUT_TEXT(at, "null");
    if (!omitted) return put(at, image, size);
    at = put(at, image, o->prefix_len);
    at = PUT_TEXT(at, ",\"value\":null,\"expire_at_ms\":");
    at = put(at, o->expire, o->expire_len);
    at = PUT_TEXT(at, ",\"omitted_length\":");
    at = put(at, o->length, o->length_len);
    *at++ = '}';
    return at;
}

static PyObject *ops_by_code[256];

/* source.snapshot of an RDB load's row (moonish.cdc.envelope's row marks): in a shard's own
 * read, its shard's first and last rows are "first" and "last"; in a merged read, only the
 * load's are, and its shard's are Debezium's "first_in_data_collection" and
 * "last_in_data_collection". A last mark wins over a first (a row alone). */
static const char *row_mark(unsigned change_flags, int merged) {
    if (!merged)
        return change_flags & CHANGE_LAST_ROW ? "last"
               : change_flags & CHANGE_FIRST_ROW ? "first"
                                                 : "true";
    return change_flags & CHANGE_LOAD_LAST    ? "last"
           : change_flags & CHANGE_LOAD_FIRST ? "first"
           : change_flags & CHANGE_LAST_ROW   ? "last_in_data_collection"
           : change_flags & CHANGE_FIRST_ROW  ? "first_in_data_collection"
                                              : "true";
}

static PyObject *encode_changes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 8 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[2]) ||
        !PyList_CheckExact(args[3]) || !PyBytes_CheckExact(args[4]) ||
        !PyBytes_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_changes(frames: list, start, ops: list, envelopes: list, "
                        "source_head: bytes, tail: bytes, shard, merged)");
        return NULL;
    }
    PyObject *frames = args[0], *ops = args[2], *envelopes = args[3];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    long long shard = PyLong_AsLongLong(args[6]);
    if (shard == -1 && PyErr_Occurred()) return NULL;
    int merged = PyObject_IsTrue(args[7]);
    if (merged < 0) return NULL;
    const char *source_head = PyBytes_AS_STRING(args[4]), *tail = PyBytes_AS_STRING(args[5]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[4]), tail_len = PyBytes_GET_SIZE(args[5]);
    for (; i >= 0 && i < PyList_GET_SIZE(frames); i++) {
        PyObject *frame = PyList_GET_ITEM(frames, i);
        if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) != 8) break;
        PyObject *payload = PyTuple_GET_ITEM(frame, 6);
        if (!PyBytes_CheckExact(payload)) break;
        long long fields[6]; /* lsn, record_type, flags, batch_index, batch_size, commit_us */
        int ok = 1;
        for (int k = 0; k < 6 && ok; k++) {
            PyObject *value = PyTuple_GET_ITEM(frame, k);
            ok = PyLong_Check(value); /* an int, or an IntEnum such as RecordType */
            if (ok) {
                int overflow;
                fields[k] = PyLong_AsLongLongAndOverflow(value, &overflow);
                ok = !overflow && !(fields[k] == -1 && PyErr_Occurred());
            }
        }
        if (!ok) {
            PyErr_Clear();
            break;
        }
        long long lsn = fields[0], flags = fields[2], bidx = fields[3], bsize = fields[4];
        long long commit_us = fields[5];
        if (fields[1] != KV_CHANGE || commit_us < 0 || commit_us > MAX_COMMIT_US || lsn < 0 ||
            bidx < 0 || bidx >= bsize || lsn - bidx < 0)
            break;
        Change c;
        if (!read_change((const unsigned char *)PyBytes_AS_STRING(payload),
                         PyBytes_GET_SIZE(payload), &c))
            break;
        const char *snapshot = "false", *transaction = "null";
        char txn[128];
        if (flags & FLAG_SNAPSHOT) {
            int mark = (bidx == bsize - 1) - (bidx == 0 && bsize > 1);
            snapshot = mark < 0 ? "first" : mark == 0 ? "true" : "last";
        } else if (c.op == 'r') {
            snapshot = row_mark(c.change_flags, merged);
        } else if (flags & FLAG_BATCH) {
            snprintf(txn, sizeof(txn),
                     "{\"id\":\"%lld:%lld\",\"total_order\":%lld,\"data_collection_order\":%lld}",
                     shard, lsn - bidx, bidx + 1, bidx + 1);
            transaction = txn;
        }
        Py_ssize_t before_len = c.before_len ? c.before_len : 4;
        Py_ssize_t after_len = c.after_len ? c.after_len : 4;
        Py_ssize_t size = 10 + before_len + 9 + after_len + head_len + 6 * 21 + 240 +
                          c.command_len + (Py_ssize_t)strlen(transaction) + tail_len;
        PyObject *out = PyBytes_FromStringAndSize(NULL, size);
        if (out == NULL) return NULL;
        char *at = PyBytes_AS_STRING(out), *begin = at;
        at = PUT_TEXT(at, "{\"before\":");
        at = put_image(at, c.before, c.before_len, c.before_omitted, &c.before_parts);
        at = PUT_TEXT(at, ",\"after\":");
        at = put_image(at, c.after, c.after_len, c.after_omitted, &c.after_parts);
        at = put(at, source_head, head_len);
        at = put_int(at, commit_us / 1000);
        at = PUT_TEXT(at, ",\"ts_us\":");
        at = put_int(at, commit_us);
        at = PUT_TEXT(at, ",\"ts_ns\":");
        at = put_int(at, commit_us * 1000);
        at = PUT_TEXT(at, ",\"snapshot\":\"");
        at = put(at, snapshot, (Py_ssize_t)strlen(snapshot));
        at = PUT_TEXT(at, "\",\"db\":");
        at = put_int(at, (long long)c.db);
        at = PUT_TEXT(at, ",\"shard\":");
        at = put_int(at, shard);
        at = PUT_TEXT(at, ",\"lsn\":");
        at = put_int(at, lsn);
        at = PUT_TEXT(at, ",\"command\":");
        if (c.command_len) {
            *at++ = '"';
            at = put_upper(at, c.command, c.command_len);
            *at++ = '"';
        } else {
            at = PUT_TEXT(at, "null");
        }
        at = (c.change_flags & CHANGE_EXPIRED) ? PUT_TEXT(at, ",\"expired\":true")
                                               : PUT_TEXT(at, ",\"expired\":false");
        at = PUT_TEXT(at, "},\"transaction\":");
        at = put(at, transaction, (Py_ssize_t)strlen(transaction));
        at = PUT_TEXT(at, ",\"op\":\"");
        *at++ = (char)c.op;
        at = PUT_TEXT(at, "\",");
        at = put(at, tail, tail_len);
        if (_PyBytes_Resize(&out, at - begin) < 0) return NULL;
        int failed = PyList_Append(envelopes, out);
        Py_DECREF(out);
        if (failed || PyList_Append(ops, ops_by_code[c.op]) < 0) return NULL;
    }
    return PyLong_FromSsize_t(i);
}

/* One token component (letter, digits) at out; its length. */
static int put_component(char *out, unsigned long long lsn) {
    char digits[24];
    int n = snprintf(digits, sizeof(digits), "%llu", lsn);
    out[0] = (char)('a' + n - 1);
    memcpy(out + 1, digits, (size_t)n);
    return n + 1;
}

#define COMPONENT_MAX 21 /* a letter and up to 20 digits */

static PyObject *token_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 8 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) ||
        !PyBytes_CheckExact(args[2]) || !PyList_CheckExact(args[4]) ||
        !PyList_CheckExact(args[5]) || !PyList_CheckExact(args[6]) ||
        !PyList_CheckExact(args[7])) {
        PyErr_SetString(PyExc_TypeError,
                        "token_lines(head: bytes, mid: bytes, tail: bytes, with_envelopes, "
                        "positions: list, indexes: list, frames: list, envelopes: list)");
        return NULL;
    }
    int with_envelopes = PyObject_IsTrue(args[3]);
    if (with_envelopes < 0) return NULL;
    PyObject *positions = args[4], *indexes = args[5], *frames = args[6], *envelopes = args[7];
    Py_ssize_t count = PyList_GET_SIZE(envelopes), width = PyList_GET_SIZE(positions);
    if (PyList_GET_SIZE(indexes) != count || PyList_GET_SIZE(frames) != count) {
        PyErr_SetString(PyExc_ValueError, "indexes, frames and envelopes differ in length");
        return NULL;
    }
    unsigned long long *lsns = PyMem_Malloc((size_t)(width ? width : 1) * sizeof(*lsns));
    char *components = PyMem_Malloc((size_t)(width ? width : 1) * COMPONENT_MAX);
    int *lengths = PyMem_Malloc((size_t)(width ? width : 1) * sizeof(int));
    PyObject *out = PyList_New(count);
    Py_ssize_t token_len = width ? width - 1 : 0; /* the dots */
    if (lsns == NULL || components == NULL || lengths == NULL || out == NULL) {
        if (out == NULL || !PyErr_Occurred()) PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < width; k++) {
        lsns[k] = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(positions, k));
        if (lsns[k] == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
        lengths[k] = put_component(components + k * COMPONENT_MAX, lsns[k]);
        token_len += lengths[k];
    }
    const char *head = PyBytes_AS_STRING(args[0]), *mid = PyBytes_AS_STRING(args[1]);
    const char *tail = PyBytes_AS_STRING(args[2]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[0]), mid_len = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t tail_len = PyBytes_GET_SIZE(args[2]);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyList_GET_ITEM(indexes, i));
        if (k == -1 && PyErr_Occurred()) goto fail;
        if (k < 0 || k >= width) {
            PyErr_Format(PyExc_IndexError, "event %zd: shard index %zd of %zd", i, k, width);
            goto fail;
        }
        PyObject *frame = PyList_GET_ITEM(frames, i), *envelope = PyList_GET_ITEM(envelopes, i);
        if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) < 1 ||
            !PyBytes_CheckExact(envelope)) {
            PyErr_Format(PyExc_TypeError, "event %zd: a frame (tuple) and bytes expected", i);
            goto fail;
        }
        unsigned long long lsn = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(frame, 0));
        if (lsn == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
        if (lsn > lsns[k]) {
            lsns[k] = lsn;
            token_len -= lengths[k];
            lengths[k] = put_component(components + k * COMPONENT_MAX, lsn);
            token_len += lengths[k];
        }
        Py_ssize_t envelope_len = with_envelopes ? PyBytes_GET_SIZE(envelope) : 0;
        PyObject *line =
            PyBytes_FromStringAndSize(NULL, head_len + token_len + mid_len + envelope_len + tail_len);
        if (line == NULL) goto fail;
        char *at = put(PyBytes_AS_STRING(line), head, head_len);
        for (Py_ssize_t j = 0; j < width; j++) {
            if (j) *at++ = '.';
            at = put(at, components + j * COMPONENT_MAX, lengths[j]);
        }
        at = put(at, mid, mid_len);
        at = put(at, PyBytes_AS_STRING(envelope), envelope_len);
        put(at, tail, tail_len);
        PyList_SET_ITEM(out, i, line);
    }
    PyMem_Free(lsns);
    PyMem_Free(components);
    PyMem_Free(lengths);
    return out;
fail:
    PyMem_Free(lsns);
    PyMem_Free(components);
    PyMem_Free(lengths);
    Py_XDECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_changes", (PyCFunction)(void (*)(void))encode_changes, METH_FASTCALL,
     "encode_changes(frames, start, ops, envelopes, source_head, tail, shard, merged) -> int"},
    {"token_lines", (PyCFunction)(void (*)(void))token_lines, METH_FASTCALL,
     "token_lines(head, mid, tail, with_envelopes, positions, indexes, frames, envelopes) "
     "-> list[bytes]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "moonish.cdc._cenvelope",
    "The envelopes of a run of kv_change records, and the change feed's lines with the token "
    "after each event, in one C call each (see the source's comment).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cenvelope(void) {
    const char *codes = "cudr";
    for (int k = 0; k < 4; k++) {
        unsigned char code = (unsigned char)codes[k];
        if (ops_by_code[code] == NULL) {
            ops_by_code[code] = PyUnicode_InternFromString((char[]){(char)code, 0});
            if (ops_by_code[code] == NULL) return NULL;
        }
    }
    return PyModule_Create(&module_def);
}
