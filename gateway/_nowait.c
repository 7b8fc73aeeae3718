/* send() on a non-blocking socket with the GIL held: what gateway/writes.py's Sender calls
 * to write a small message on a connection's socket. os.write and socket.send release the
 * GIL around the call, which costs more than the call itself here: a non-blocking send
 * never waits, so there is nothing to release it for (libuv's own writes hold it too).
 *
 * send(fd, data) -> int: the bytes the socket took, 0 when it took none (full, or an
 * error: the caller hands the data to its transport, which meets the error itself).
 * Built by setup.py; gateway/writes.py has the same function in Python for a build
 * without C (OPENEAS_PURE_PYTHON=1). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/socket.h>

static PyObject *nowait_send(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send(fd, data) takes 2 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    ssize_t n;
    if (PyBytes_CheckExact(args[1])) { /* most writes: no buffer to get and release */
        n = send((int)fd, PyBytes_AS_STRING(args[1]), (size_t)PyBytes_GET_SIZE(args[1]),
                 MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
            return NULL;
        }
        n = send((int)fd, view.buf, (size_t)view.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        PyBuffer_Release(&view);
    }
    return PyLong_FromSsize_t(n < 0 ? 0 : n);
}

static PyMethodDef nowait_methods[] = {
    {"send", (PyCFunction)(void (*)(void))nowait_send, METH_FASTCALL,
     "send(fd, data) -> bytes the non-blocking socket took (0: none)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef nowait_module = {
    PyModuleDef_HEAD_INIT, "gateway._nowait", NULL, 0, nowait_methods,
};

PyMODINIT_FUNC PyInit__nowait(void) { return PyModule_Create(&nowait_module); }
