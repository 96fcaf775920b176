/* A small CPython extension for tests/call_sites.rs, built by the test against each
 * interpreter's own headers:
 *   simext.alloc_nogil(n)    cudaMalloc(n) with the GIL released (Py_BEGIN_ALLOW_THREADS), as
 *                            PyTorch's bindings do; returns the pointer
 *   simext.call(fn)          calls fn() from C (CPython 3.12+ pushes a C-stack shim frame)
 *   simext.c_thread_alloc(n) cudaMalloc(n) from a pthread created here, which has no Python
 *                            thread state; returns the pointer
 * The runtime is found with dlopen/dlsym, as extensions that load CUDA lazily do. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

typedef int (*malloc_fn)(void **, size_t);

static malloc_fn cuda_malloc(void) {
    void *h = dlopen("libcudart.so.12", RTLD_NOW);
    return h ? (malloc_fn)dlsym(h, "cudaMalloc") : NULL;
}

static PyObject *alloc_nogil(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    malloc_fn f = cuda_malloc();
    if (!f) return PyErr_Format(PyExc_RuntimeError, "no cudaMalloc");
    void *p = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = f(&p, (size_t)n);
    Py_END_ALLOW_THREADS
    if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "cudaMalloc: %d", rc);
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

static PyObject *call(PyObject *self, PyObject *fn) {
    return PyObject_CallObject(fn, NULL);
}

struct job { malloc_fn f; size_t n; void *p; int rc; };

static void *thread_main(void *arg) {
    struct job *j = arg;
    j->rc = j->f(&j->p, j->n);
    return NULL;
}

static PyObject *c_thread_alloc(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    struct job j = {cuda_malloc(), (size_t)n, NULL, -1};
    if (!j.f) return PyErr_Format(PyExc_RuntimeError, "no cudaMalloc");
    pthread_t t;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = pthread_create(&t, NULL, thread_main, &j);
    if (err == 0) pthread_join(t, NULL);
    Py_END_ALLOW_THREADS
    if (err != 0 || j.rc != 0) return PyErr_Format(PyExc_RuntimeError, "thread: %d, cudaMalloc: %d", err, j.rc);
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)j.p);
}

static PyMethodDef methods[] = {
    {"alloc_nogil", alloc_nogil, METH_VARARGS, NULL},
    {"call", call, METH_O, NULL},
    {"c_thread_alloc", c_thread_alloc, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "simext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_simext(void) { return PyModule_Create(&module); }
