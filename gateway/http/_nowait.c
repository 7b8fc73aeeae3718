/* send() on a non-blocking socket with the GIL held: what gateway/http/writes.py's Sender calls
 * to write a small message on a connection's socket. os.write and socket.send release the
 * GIL around the call, which costs more than the call itself here: a non-blocking send
 * never waits, so there is nothing to release it for (libuv's own writes hold it too).
 *
 * send(fd, data) -> int: the bytes of data the socket did not take: 0 when it took all
 * (a cached int, not a new one), len(data) when it took none (full, or an error: the
 * caller hands the rest to its transport, which meets the error itself).
 * sendv(fd, head, body) -> int: the same for head then body, in one call (sendmsg), so a
 * message's two parts need not be joined into a new object first.
 * readinto(fd, buffer) and write(fd, data): see below.
 * Built by setup.py; gateway/http/writes.py has the same functions in Python for a build
 * without C (OPENEAS_PURE_PYTHON=1). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <errno.h>

#define FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL)

/* The bytes of ``obj`` (bytes without a buffer to get and release, as most writes are). */
static int view_of(PyObject *obj, Py_buffer *view, struct iovec *iov) {
    if (PyBytes_CheckExact(obj)) {
        view->obj = NULL;
        iov->iov_base = PyBytes_AS_STRING(obj);
        iov->iov_len = (size_t)PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    iov->iov_base = view->buf;
    iov->iov_len = (size_t)view->len;
    return 0;
}

static void release(Py_buffer *view) {
    if (view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

static int fd_of(PyObject *arg, int *fd) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    *fd = (int)n;
    return 0;
}

/* send(2) of (fd, data) in ``args`` once, without waiting: its result in ``n`` (errno in
 * ``err``) and the data's length in ``len``; -1 when the arguments are wrong. */
static int send_once(PyObject *const *args, Py_ssize_t nargs, const char *usage, ssize_t *n,
                     int *err, size_t *len) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    int fd;
    Py_buffer view;
    struct iovec iov;
    if (fd_of(args[0], &fd) < 0 || view_of(args[1], &view, &iov) < 0) {
        return -1;
    }
    *n = send(fd, iov.iov_base, iov.iov_len, FLAGS);
    *err = errno;
    *len = iov.iov_len;
    release(&view);
    return 0;
}

static PyObject *nowait_send(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    ssize_t n;
    int err;
    size_t len;
    if (send_once(args, nargs, "send(fd, data) takes 2 arguments", &n, &err, &len) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t((Py_ssize_t)len - (n < 0 ? 0 : n));
}

static PyObject *nowait_sendv(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "sendv(fd, head, body) takes 3 arguments");
        return NULL;
    }
    int fd;
    Py_buffer views[2];
    struct iovec iov[2];
    if (fd_of(args[0], &fd) < 0 || view_of(args[1], &views[0], &iov[0]) < 0) {
        return NULL;
    }
    if (view_of(args[2], &views[1], &iov[1]) < 0) {
        release(&views[0]);
        return NULL;
    }
    struct msghdr msg = {0};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    ssize_t n = sendmsg(fd, &msg, FLAGS);
    release(&views[0]);
    release(&views[1]);
    Py_ssize_t total = (Py_ssize_t)(iov[0].iov_len + iov[1].iov_len);
    return PyLong_FromSsize_t(total - (n < 0 ? 0 : n));
}

/* A read's or write's result: its count, -1 for "not now", or the OSError of ``err``. */
static PyObject *count_or_raise(ssize_t n, int err) {
    if (n >= 0) {
        return PyLong_FromSsize_t(n);
    }
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) {
        return PyLong_FromLong(-1);
    }
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* For a relay's own loop (gateway/http/splice.py's BodyRelay), where "the socket is full" or "has
 * nothing yet" is the common answer: -1 then, rather than an exception to raise and catch,
 * and an OSError for a real error, which ends the relay. */
static PyObject *nowait_readinto(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "readinto(fd, buffer) takes 2 arguments");
        return NULL;
    }
    int fd;
    Py_buffer view;
    if (fd_of(args[0], &fd) < 0 || PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    ssize_t n = recv(fd, view.buf, (size_t)view.len, MSG_DONTWAIT);
    int err = errno;
    PyBuffer_Release(&view);
    return count_or_raise(n, err);
}

static PyObject *nowait_write(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    ssize_t n;
    int err;
    size_t len;
    if (send_once(args, nargs, "write(fd, data) takes 2 arguments", &n, &err, &len) < 0) {
        return NULL;
    }
    return count_or_raise(n, err);
}

static PyMethodDef nowait_methods[] = {
    {"send", (PyCFunction)(void (*)(void))nowait_send, METH_FASTCALL,
     "send(fd, data) -> bytes of data the non-blocking socket did not take (0: all went)"},
    {"sendv", (PyCFunction)(void (*)(void))nowait_sendv, METH_FASTCALL,
     "sendv(fd, head, body) -> bytes of head + body the socket did not take (0: all went)"},
    {"readinto", (PyCFunction)(void (*)(void))nowait_readinto, METH_FASTCALL,
     "readinto(fd, buffer) -> bytes read (0: the peer's end; -1: none yet); OSError else"},
    {"write", (PyCFunction)(void (*)(void))nowait_write, METH_FASTCALL,
     "write(fd, data) -> bytes the socket took (-1: full); OSError on an error"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef nowait_module = {
    PyModuleDef_HEAD_INIT, "gateway.http._nowait", NULL, 0, nowait_methods,
};

PyMODINIT_FUNC PyInit__nowait(void) { return PyModule_Create(&nowait_module); }
