// Native (C++17) versions of remat_core/kernels/_reference.py.
//
// Built by pip as the private module remat_core.kernels._native_ext; the
// Python wrapper remat_core/kernels/_native.py gives it the same signatures as
// the numba kernels. Inputs are C-contiguous int64 buffers (no validation:
// the callers validate); outputs are returned as bytearrays of int64 that the
// wrapper views as numpy arrays. The algorithms, tie-breaking and error order
// are exactly those of the reference; the differential tests check that the
// integer outputs are identical.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

struct Buf {
    Py_buffer view{};
    bool ok = false;
    ~Buf() {
        if (ok) PyBuffer_Release(&view);
    }
    bool get(PyObject* obj, const char* name) {
        if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
        ok = true;
        if (view.itemsize != 8) {
            PyErr_Format(PyExc_TypeError, "`%s` must be an int64 array", name);
            return false;
        }
        return true;
    }
    const int64_t* data() const { return static_cast<const int64_t*>(view.buf); }
    Py_ssize_t size() const { return view.len / 8; }
};

PyObject* to_bytes(const std::vector<int64_t>& v) {
    return PyByteArray_FromStringAndSize(reinterpret_cast<const char*>(v.data()),
                                         static_cast<Py_ssize_t>(v.size() * sizeof(int64_t)));
}

// simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, fixed) -> (info, step_mem)
PyObject* simulate(PyObject*, PyObject* args) {
    Py_ssize_t n;
    long long fixed;
    PyObject *o_rp, *o_ri, *o_sp, *o_si, *o_dp, *o_di, *o_mem, *o_ws;
    if (!PyArg_ParseTuple(args, "nOOOOOOOOL", &n, &o_rp, &o_ri, &o_sp, &o_si, &o_dp, &o_di, &o_mem, &o_ws, &fixed))
        return nullptr;
    Buf rp, ri, sp, si, dp, di, mb, wb;
    if (!rp.get(o_rp, "R_ptr") || !ri.get(o_ri, "R_idx") || !sp.get(o_sp, "S_ptr") || !si.get(o_si, "S_idx") ||
        !dp.get(o_dp, "dep_ptr") || !di.get(o_di, "dep_idx") || !mb.get(o_mem, "mem") || !wb.get(o_ws, "ws"))
        return nullptr;
    const int64_t *R_ptr = rp.data(), *R_idx = ri.data(), *S_ptr = sp.data(), *S_idx = si.data();
    const int64_t *dep_ptr = dp.data(), *dep_idx = di.data(), *mem = mb.data(), *ws = wb.data();
    std::vector<int64_t> info(7, -1), step_mem(static_cast<size_t>(ri.size()), 0);
    info[0] = 0;
    {
        Py_BEGIN_ALLOW_THREADS
        std::vector<int64_t> in_R(n, -1), listed_R(n, -1), run_start(n, 1), last_row(n, -1);
        std::vector<int64_t> last_user(n, -1), last_user_stage(n, -1);
        int64_t peak = -1, peak_stage = -1, peak_node = -1;
        int64_t current_start = fixed;
        bool failed = false;
        for (int64_t t = 0; t < n && !failed; ++t) {
            int64_t current = current_start;
            for (int64_t p = R_ptr[t]; p < R_ptr[t + 1]; ++p) {
                const int64_t k = R_idx[p];
                listed_R[k] = t;
                for (int64_t q = dep_ptr[k]; q < dep_ptr[k + 1]; ++q) {
                    last_user[dep_idx[q]] = k;
                    last_user_stage[dep_idx[q]] = t;
                }
            }
            int64_t next_start = fixed;
            if (t + 1 < n) {
                for (int64_t p = S_ptr[t + 1]; p < S_ptr[t + 2]; ++p) {
                    const int64_t i = S_idx[p];
                    const bool kept_now = last_row[i] == t && run_start[i] <= t;
                    if (!(kept_now || listed_R[i] == t)) {
                        info[0] = 2; info[1] = t + 1; info[2] = i; info[3] = -1;
                        failed = true;
                        break;
                    }
                    if (!kept_now) run_start[i] = t + 1;
                    last_row[i] = t + 1;
                    next_start += mem[i];
                }
                if (failed) break;
            }
            for (int64_t p = R_ptr[t]; p < R_ptr[t + 1] && !failed; ++p) {
                const int64_t k = R_idx[p];
                for (int64_t q = dep_ptr[k]; q < dep_ptr[k + 1]; ++q) {
                    const int64_t i = dep_idx[q];
                    if (!(in_R[i] == t || (run_start[i] <= t && last_row[i] >= t))) {
                        info[0] = 1; info[1] = t; info[2] = k; info[3] = i;
                        failed = true;
                        break;
                    }
                }
                if (failed) break;
                in_R[k] = t;
                current += mem[k];
                const int64_t at_step = current + ws[k];
                step_mem[p] = at_step;
                if (at_step > peak) { peak = at_step; peak_stage = t; peak_node = k; }
                for (int64_t q = dep_ptr[k]; q < dep_ptr[k + 1]; ++q) {
                    const int64_t i = dep_idx[q];
                    if (last_user[i] == k && last_user_stage[i] == t && last_row[i] != t + 1) current -= mem[i];
                }
            }
            current_start = next_start;
        }
        if (!failed) { info[4] = peak; info[5] = peak_stage; info[6] = peak_node; }
        Py_END_ALLOW_THREADS
    }
    PyObject* a = to_bytes(info);
    PyObject* b = to_bytes(step_mem);
    if (!a || !b) { Py_XDECREF(a); Py_XDECREF(b); return nullptr; }
    return Py_BuildValue("(NN)", a, b);
}

// r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx) -> (R_ptr, R_idx)
PyObject* r_given_s(PyObject*, PyObject* args) {
    Py_ssize_t n;
    PyObject *o_sp, *o_si, *o_dp, *o_di;
    if (!PyArg_ParseTuple(args, "nOOOO", &n, &o_sp, &o_si, &o_dp, &o_di)) return nullptr;
    Buf sp, si, dp, di;
    if (!sp.get(o_sp, "S_ptr") || !si.get(o_si, "S_idx") || !dp.get(o_dp, "dep_ptr") || !di.get(o_di, "dep_idx"))
        return nullptr;
    const int64_t *S_ptr = sp.data(), *S_idx = si.data(), *dep_ptr = dp.data(), *dep_idx = di.data();
    std::vector<int64_t> R_ptr(static_cast<size_t>(n) + 1, 0), R_idx;
    {
        Py_BEGIN_ALLOW_THREADS
        std::vector<int64_t> kept(n, -1), need(n, -1), row;
        R_idx.reserve(static_cast<size_t>(2 * n));
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t p = S_ptr[t]; p < S_ptr[t + 1]; ++p) kept[S_idx[p]] = t;
            need[t] = t;
            if (t + 1 < n)
                for (int64_t p = S_ptr[t + 1]; p < S_ptr[t + 2]; ++p)
                    if (kept[S_idx[p]] != t) need[S_idx[p]] = t;
            row.clear();
            for (int64_t k = t; k >= 0; --k) {
                if (need[k] != t) continue;
                row.push_back(k);
                for (int64_t q = dep_ptr[k]; q < dep_ptr[k + 1]; ++q)
                    if (kept[dep_idx[q]] != t) need[dep_idx[q]] = t;
            }
            R_idx.insert(R_idx.end(), row.rbegin(), row.rend());
            R_ptr[t + 1] = static_cast<int64_t>(R_idx.size());
        }
        Py_END_ALLOW_THREADS
    }
    PyObject* a = to_bytes(R_ptr);
    PyObject* b = to_bytes(R_idx);
    if (!a || !b) { Py_XDECREF(a); Py_XDECREF(b); return nullptr; }
    return Py_BuildValue("(NN)", a, b);
}

PyMethodDef methods[] = {
    {"simulate", simulate, METH_VARARGS, "Simulate a schedule (see remat_core/kernels/_reference.py)."},
    {"r_given_s", r_given_s, METH_VARARGS, "Minimal R for a checkpoint matrix S (see _reference.py)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_ext", "remat native kernels", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__native_ext() { return PyModule_Create(&module); }
