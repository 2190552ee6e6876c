/* The Merkle tree's hashing in C (RFC 9162 §2.1: leaf SHA-256(0x00 || d), node SHA-256(0x01 || l || r)),
 * an optional accelerator of eventstore/tree.py: the same two functions as its pure-Python path, called
 * once a level rather than once a hash.  An append hashes one leaf and about one node an event; from
 * Python that is two hashlib calls an event (~1 us each), which cost batch appends 10-20 % of their CPU
 * (5-9 % with this module: docs/performance.md).
 * Built at install when a C compiler and OpenSSL's headers are there (eventstore/_build_native.py); without it,
 * or with EVSTORE_PURE_TREE=1, evstore uses the pure-Python functions and gives the same hashes.
 *
 *   leaf_hashes(seq of bytes-like)        -> list of 32-byte bytes: SHA-256(0x00 || d) of each d
 *   parents(seq of 32-byte bytes, rounds) -> list of bytes: `rounds` rounds of SHA-256(0x01 || l || r)
 *                                            over adjacent pairs (len(seq) a multiple of 2**rounds)
 *
 * SHA256_Init/Update/Final, not EVP or SHA256(): on OpenSSL 3 the one-shot and EVP_Digest fetch the
 * digest at every call (0.3-0.4 us a hash, no faster than hashlib); the low-level calls run the CPU's
 * SHA instructions directly (~0.07 us a hash).  They are deprecated in OpenSSL 3, not removed.
 * Hand-written: no maintained package hashes RFC 6962/9162 leaves and nodes in bulk in native code
 * (the ones found are pure Python, or Rust bindings that hash one node a call). */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED
#include <Python.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#define HASH 32
#ifndef EVSTORE_SOURCE_SHA256
#define EVSTORE_SOURCE_SHA256 ""
#endif

static void sha256(const unsigned char *in, size_t n, unsigned char *out) {
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, in, n);
    SHA256_Final(out, &c);
}

static PyObject *leaf_hashes(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "leaf_hashes() takes a sequence of bytes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    unsigned char buf[64];  /* 0x00 || d for d of up to 63 bytes: one Update */
    buf[0] = 0x00;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PyBytes_FromStringAndSize(NULL, HASH);
        if (h == NULL) goto fail;
        PyList_SET_ITEM(out, i, h);
        unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(h);
        /* Read afresh each time: a buffer exporter other than bytes may run code that changes the list. */
        if (i >= PySequence_Fast_GET_SIZE(seq)) {
            PyErr_SetString(PyExc_RuntimeError, "leaf_hashes(): the sequence changed size");
            goto fail;
        }
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (PyBytes_Check(item)) {
            const char *d = PyBytes_AS_STRING(item);
            Py_ssize_t len = PyBytes_GET_SIZE(item);
            if (len < (Py_ssize_t)sizeof buf) {
                memcpy(buf + 1, d, (size_t)len);
                sha256(buf, (size_t)len + 1, dst);
            } else {
                SHA256_CTX c;
                SHA256_Init(&c);
                SHA256_Update(&c, buf, 1);
                SHA256_Update(&c, d, (size_t)len);
                SHA256_Final(dst, &c);
            }
        } else {
            Py_buffer b;
            Py_INCREF(item);
            int got = PyObject_GetBuffer(item, &b, PyBUF_SIMPLE);
            Py_DECREF(item);  /* the buffer, if any, holds its own reference (b.obj) */
            if (got < 0) goto fail;
            SHA256_CTX c;
            SHA256_Init(&c);
            SHA256_Update(&c, buf, 1);
            SHA256_Update(&c, b.buf, (size_t)b.len);
            SHA256_Final(dst, &c);
            PyBuffer_Release(&b);
        }
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *parents(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "parents() takes a sequence of hashes and a number of rounds");
        return NULL;
    }
    long rounds = PyLong_AsLong(args[1]);
    if (rounds == -1 && PyErr_Occurred()) return NULL;
    if (rounds < 0 || rounds > 62) {
        PyErr_SetString(PyExc_ValueError, "parents(): rounds is 0 to 62");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "parents() takes a sequence of 32-byte hashes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL;
    unsigned char *level = NULL;
    if (n % ((Py_ssize_t)1 << rounds)) {
        PyErr_Format(PyExc_ValueError, "parents(): %zd hashes do not pair up %ld times", n, rounds);
        goto done;
    }
    level = PyMem_Malloc(n ? (size_t)n * HASH : 1);
    if (level == NULL) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = items[i];
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) != HASH) {
            PyErr_Format(PyExc_ValueError, "parents(): item %zd is not a 32-byte hash (bytes)", i);
            goto done;
        }
        memcpy(level + i * HASH, PyBytes_AS_STRING(item), HASH);
    }
    /* Each round in place: parent i is written over child i's slot after children 2i and 2i+1 are read. */
    unsigned char buf[1 + 2 * HASH];
    buf[0] = 0x01;
    Py_ssize_t m = n;
    for (long r = 0; r < rounds; r++) {
        m /= 2;
        for (Py_ssize_t i = 0; i < m; i++) {
            memcpy(buf + 1, level + 2 * i * HASH, 2 * HASH);
            sha256(buf, sizeof buf, level + i * HASH);
        }
    }
    out = PyList_New(m);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *h = PyBytes_FromStringAndSize((const char *)level + i * HASH, HASH);
        if (h == NULL) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, i, h);
    }
done:
    PyMem_Free(level);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"leaf_hashes", leaf_hashes, METH_O, "SHA-256(0x00 || d) of each d, as a list."},
    {"parents", (PyCFunction)(void (*)(void))parents, METH_FASTCALL,
     "`rounds` rounds of SHA-256(0x01 || l || r) over adjacent pairs of 32-byte hashes, as a list."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "eventstore._tree_native",
    "The Merkle tree's leaf and node hashes in C (OpenSSL's SHA-256); see eventstore/tree.py.", -1, methods,
};

PyMODINIT_FUNC PyInit__tree_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "OPENSSL_VERSION", OpenSSL_version(OPENSSL_VERSION)) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_SHA256", EVSTORE_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
