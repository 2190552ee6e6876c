/* A measuring aid, not part of evstore: the Merkle tree's hashing (RFC 9162 leaf and node hashes)
 * done in C with OpenSSL's low-level SHA-256, to show what the append's tree costs once its two
 * SHA-256 calls an event no longer go through Python.  Built by build.py; used only by
 * benchmarks/bench_proofs.py --native-prototype (native_tree.py).
 *
 *   leaves(seq of 32-byte buffers) -> bytes: the leaf hashes SHA-256(0x00 || d), joined
 *   pairs(bytes of 64*m)           -> bytes: the node hashes SHA-256(0x01 || l || r) of each pair, joined
 *
 * SHA256_Init/Update/Final, not SHA256(): on OpenSSL 3 the one-shot fetches the digest at every
 * call (0.3-0.4 us a hash, no faster than hashlib); the low-level calls run the SHA instructions
 * directly (~0.07 us a hash). */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED
#include <Python.h>
#include <openssl/sha.h>

static void sha(const unsigned char *in, size_t n, unsigned char *out) {
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, in, n);
    SHA256_Final(out, &c);
}

static PyObject *leaves(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "leaves() takes a sequence of 32-byte buffers");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 32);
    if (out == NULL) { Py_DECREF(seq); return NULL; }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char buf[33];
    buf[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer b;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &b, PyBUF_SIMPLE) < 0) goto fail;
        if (b.len != 32) {
            PyBuffer_Release(&b);
            PyErr_SetString(PyExc_ValueError, "a leaf's data is 32 bytes");
            goto fail;
        }
        memcpy(buf + 1, b.buf, 32);
        PyBuffer_Release(&b);
        sha(buf, 33, o + 32 * i);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

static PyObject *pairs(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    if (b.len % 64) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "pairs() takes a multiple of 64 bytes");
        return NULL;
    }
    Py_ssize_t m = b.len / 64;
    PyObject *out = PyBytes_FromStringAndSize(NULL, m * 32);
    if (out != NULL) {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        const unsigned char *in = b.buf;
        unsigned char buf[65];
        buf[0] = 1;
        for (Py_ssize_t i = 0; i < m; i++) {
            memcpy(buf + 1, in + 64 * i, 64);
            sha(buf, 65, o + 32 * i);
        }
    }
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"leaves", leaves, METH_O, "SHA-256(0x00 || d) of each 32-byte d, joined."},
    {"pairs", pairs, METH_O, "SHA-256(0x01 || l || r) of each 64-byte pair, joined."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_merkle_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__merkle_native(void) { return PyModule_Create(&module); }
