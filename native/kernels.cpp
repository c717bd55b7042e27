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

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

namespace {

// A C-contiguous buffer of 8-byte items: int64 (T = int64_t; the format is not checked, the callers
// convert) or float64 (T = double; format "d" required).
template <typename T>
struct Array {
    static_assert(sizeof(T) == 8, "8-byte items only");
    Py_buffer view{};
    bool ok = false;
    ~Array() {
        if (ok) PyBuffer_Release(&view);
    }
    bool get(PyObject* obj, const char* name) {
        if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
        ok = true;
        const bool is_float = std::is_floating_point<T>::value;
        if (view.itemsize != 8 ||
            (is_float && (view.format == nullptr || std::strcmp(view.format, "d") != 0))) {
            PyErr_Format(PyExc_TypeError, "`%s` must be a%s array", name, is_float ? " float64" : "n int64");
            return false;
        }
        return true;
    }
    const T* data() const { return static_cast<const T*>(view.buf); }
    Py_ssize_t size() const { return view.len / 8; }
};
using Buf = Array<int64_t>;
using FBuf = Array<double>;

template <typename T>
PyObject* to_bytes(const std::vector<T>& v) {
    return PyByteArray_FromStringAndSize(reinterpret_cast<const char*>(v.data()),
                                         static_cast<Py_ssize_t>(v.size() * sizeof(T)));
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

// path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, tol, max_cuts) -> (violation, row_ptr, row_idx)
// W and cum are float64; violation comes back as float64 bytes.
PyObject* path_cuts(PyObject*, PyObject* args) {
    Py_ssize_t n, max_cuts;
    double tol;
    PyObject *o_ip, *o_ii, *o_w, *o_cum, *o_first, *o_rc, *o_sc;
    if (!PyArg_ParseTuple(args, "nOOOOOOOdn", &n, &o_ip, &o_ii, &o_w, &o_cum, &o_first, &o_rc, &o_sc, &tol,
                          &max_cuts))
        return nullptr;
    Buf ip, ii, fb, rb, sb;
    FBuf wb, cb;
    if (!ip.get(o_ip, "in_ptr") || !ii.get(o_ii, "in_idx") || !wb.get(o_w, "W") || !cb.get(o_cum, "cum") ||
        !fb.get(o_first, "first") || !rb.get(o_rc, "Rcol") || !sb.get(o_sc, "Scol"))
        return nullptr;
    const int64_t *in_ptr = ip.data(), *in_idx = ii.data(), *first = fb.data(), *Rcol = rb.data(), *Scol = sb.data();
    const double *W = wb.data(), *cum = cb.data();
    std::vector<double> out_viol;
    std::vector<int64_t> row_ptr(1, 0), row_idx;
    bool no_memory = false;
    {
        Py_BEGIN_ALLOW_THREADS
        try {
        // D and P laid out [g, y, a] (the reference's [g, a, y] transposed): the inner loop runs over a
        const size_t N = static_cast<size_t>(n);
        std::vector<double> D(N * N * N);
        std::vector<int64_t> P(N * N * N);
        const double inf = std::numeric_limits<double>::infinity();
        for (size_t g = 0; g < N; ++g) {
            for (size_t y = 0; y < N; ++y) {
                const size_t row = (g * N + y) * N;
                const double w = W[g * N + y];
                if (in_ptr[y] == in_ptr[y + 1]) {
                    for (size_t a = 0; a < N; ++a) { D[row + a] = inf; P[row + a] = -1; }
                } else {
                    for (size_t a = 0; a < N; ++a) {
                        double best = inf;
                        int64_t arg = -1;
                        for (int64_t p = in_ptr[y]; p < in_ptr[y + 1]; ++p) {
                            const int64_t z = in_idx[p];
                            const double d = D[(g * N + static_cast<size_t>(z)) * N + a];
                            if (arg == -1 || d < best) { best = d; arg = z; }
                        }
                        D[row + a] = best + w;
                        P[row + a] = arg;
                    }
                }
                D[row + y] = w;
                P[row + y] = -1;
            }
        }
        const double thr = 1.0 - tol;
        std::vector<int64_t> gs, as, vs;
        std::vector<double> viol;
        for (size_t g = 0; g < N; ++g)
            for (size_t a = 0; a < g; ++a)
                for (size_t v = 0; v < N; ++v) {
                    const int64_t t = first[g * N + v];
                    if (t >= n) continue;
                    const double lhs = (cum[(static_cast<size_t>(t) + 1) * N + a] - cum[g * N + a]) + D[(g * N + v) * N + a];
                    if (lhs < thr) {
                        gs.push_back(static_cast<int64_t>(g)); as.push_back(static_cast<int64_t>(a));
                        vs.push_back(static_cast<int64_t>(v)); viol.push_back(1.0 - lhs);
                    }
                }
        std::vector<size_t> order(viol.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return viol[i] > viol[j]; });
        if (order.size() > static_cast<size_t>(max_cuts)) order.resize(static_cast<size_t>(max_cuts));
        for (size_t r : order) {
            const size_t g = static_cast<size_t>(gs[r]), a = static_cast<size_t>(as[r]);
            const int64_t v = vs[r];
            for (int64_t s = static_cast<int64_t>(g); s <= first[g * N + static_cast<size_t>(v)]; ++s) {
                const int64_t c = Rcol[static_cast<size_t>(s) * N + a];
                if (c >= 0) row_idx.push_back(c);
            }
            for (int64_t b = v; b != -1; b = P[(g * N + static_cast<size_t>(b)) * N + a])
                row_idx.push_back(Scol[g * N + static_cast<size_t>(b)]);
            row_ptr.push_back(static_cast<int64_t>(row_idx.size()));
            out_viol.push_back(viol[r]);
        }
        } catch (const std::bad_alloc&) {
            no_memory = true;
        }
        Py_END_ALLOW_THREADS
    }
    if (no_memory) return PyErr_NoMemory();
    PyObject* a = to_bytes(out_viol);
    PyObject* b = to_bytes(row_ptr);
    PyObject* c = to_bytes(row_idx);
    if (!a || !b || !c) { Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c); return nullptr; }
    return Py_BuildValue("(NNN)", a, b, c);
}

// ---------------------------------------------------------------------------------------------------------
// dtr(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, heuristic, seed, max_computes[, keep_dead])
//   -> (info, R_ptr, R_idx, S_ptr, S_idx); the algorithm, scores and tie-breaking of _reference.dtr.
enum { H_DTR = 0, H_DTR_EQ, H_DTR_LOCAL, H_LRU, H_LARGEST, H_MSPS, H_RANDOM };

double dtr_random_key(uint64_t seed, uint64_t evictions, uint64_t v) {
    uint64_t z = (seed + (evictions << 32) + v + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11);
}

struct DtrRun {
    int64_t n;
    const int64_t *dep_ptr, *dep_idx, *user_ptr, *user_idx, *mem, *ws;
    const double* cost;
    int64_t heuristic, keep_dead = 0;
    std::vector<int64_t> last_use, parent, size, seen, stack;
    std::vector<char> resident, in_uf;
    std::vector<double> class_cost;
    int64_t stamp = 0;

    int64_t find(int64_t x) {
        int64_t root = x;
        while (parent[root] != root) root = parent[root];
        while (parent[x] != root) { const int64_t nxt = parent[x]; parent[x] = root; x = nxt; }
        return root;
    }
    void unite(int64_t a, int64_t b) {
        int64_t ra = find(a), rb = find(b);
        if (ra == rb) return;
        if (size[ra] < size[rb] || (size[ra] == size[rb] && rb < ra)) std::swap(ra, rb);
        parent[rb] = ra;
        size[ra] += size[rb];
        class_cost[ra] += class_cost[rb];
    }
    bool evicted_reader(int64_t j, int64_t t) const { return j < t && !resident[j] && last_use[j] > t; }
    bool can_free(int64_t i, int64_t t) {   // dead, and no value still read later needs it recomputed
        if (last_use[i] > t) return false;
        if (keep_dead)
            for (int64_t q = user_ptr[i]; q < user_ptr[i + 1]; ++q)
                if (last_use[user_idx[q]] > t) return false;
        ++stamp;
        seen[i] = stamp;
        size_t top = 0;
        stack[top++] = i;
        while (top > 0) {
            const int64_t x = stack[--top];
            for (int64_t q = user_ptr[x]; q < user_ptr[x + 1]; ++q) {
                const int64_t j = user_idx[q];
                if (j < t && !resident[j] && seen[j] != stamp) {
                    if (last_use[j] > t) return false;
                    seen[j] = stamp;
                    stack[top++] = j;
                }
            }
        }
        return true;
    }
    void leave(int64_t v, int64_t t) {
        if (heuristic != H_DTR_EQ) return;
        if (!in_uf[v]) { in_uf[v] = 1; class_cost[v] = cost[v]; }
        else class_cost[find(v)] += cost[v];
        for (int64_t q = dep_ptr[v]; q < dep_ptr[v + 1]; ++q)
            if (!resident[dep_idx[q]]) unite(v, dep_idx[q]);
        for (int64_t q = user_ptr[v]; q < user_ptr[v + 1]; ++q)
            if (evicted_reader(user_idx[q], t)) unite(v, user_idx[q]);
    }
    double walk(int64_t v, int64_t t, bool down) {
        ++stamp;
        seen[v] = stamp;
        double total = 0.0;
        size_t top = 0;
        for (int64_t q = dep_ptr[v]; q < dep_ptr[v + 1]; ++q) {
            const int64_t i = dep_idx[q];
            if (!resident[i] && seen[i] != stamp) { seen[i] = stamp; stack[top++] = i; }
        }
        while (top > 0) {
            const int64_t x = stack[--top];
            total += cost[x];
            for (int64_t q = dep_ptr[x]; q < dep_ptr[x + 1]; ++q) {
                const int64_t i = dep_idx[q];
                if (!resident[i] && seen[i] != stamp) { seen[i] = stamp; stack[top++] = i; }
            }
        }
        if (down) {
            for (int64_t q = user_ptr[v]; q < user_ptr[v + 1]; ++q) {
                const int64_t j = user_idx[q];
                if (evicted_reader(j, t) && seen[j] != stamp) { seen[j] = stamp; stack[top++] = j; }
            }
            while (top > 0) {
                const int64_t x = stack[--top];
                total += cost[x];
                for (int64_t q = user_ptr[x]; q < user_ptr[x + 1]; ++q) {
                    const int64_t j = user_idx[q];
                    if (evicted_reader(j, t) && seen[j] != stamp) { seen[j] = stamp; stack[top++] = j; }
                }
            }
        }
        return total;
    }
    double eq_score_sum(int64_t v, int64_t t) {
        ++stamp;
        double total = cost[v];
        for (int64_t q = dep_ptr[v]; q < dep_ptr[v + 1]; ++q) {
            const int64_t i = dep_idx[q];
            if (!resident[i]) {
                const int64_t r = find(i);
                if (seen[r] != stamp) { seen[r] = stamp; total += class_cost[r]; }
            }
        }
        for (int64_t q = user_ptr[v]; q < user_ptr[v + 1]; ++q) {
            const int64_t j = user_idx[q];
            if (evicted_reader(j, t)) {
                const int64_t r = find(j);
                if (seen[r] != stamp) { seen[r] = stamp; total += class_cost[r]; }
            }
        }
        return total;
    }
};

PyObject* dtr(PyObject*, PyObject* args) {
    Py_ssize_t n;
    long long fixed, budget, heuristic, max_computes, keep_dead = 0;
    unsigned long long seed;
    PyObject *o_dp, *o_di, *o_up, *o_ui, *o_mem, *o_ws, *o_cost;
    if (!PyArg_ParseTuple(args, "nOOOOOOOLLLKL|L", &n, &o_dp, &o_di, &o_up, &o_ui, &o_mem, &o_ws, &o_cost, &fixed,
                          &budget, &heuristic, &seed, &max_computes, &keep_dead))
        return nullptr;
    Buf dp, di, up, ui, mb, wb;
    FBuf cb;
    if (!dp.get(o_dp, "dep_ptr") || !di.get(o_di, "dep_idx") || !up.get(o_up, "user_ptr") ||
        !ui.get(o_ui, "user_idx") || !mb.get(o_mem, "mem") || !wb.get(o_ws, "ws") || !cb.get(o_cost, "cost"))
        return nullptr;
    std::vector<int64_t> info(7, -1), R_ptr(static_cast<size_t>(n) + 1, 0), S_ptr(static_cast<size_t>(n) + 1, 0);
    std::vector<int64_t> R_idx, S_idx;
    bool no_memory = false;
    {
        Py_BEGIN_ALLOW_THREADS
        try {
        const size_t N = static_cast<size_t>(n);
        DtrRun d;
        d.n = n; d.dep_ptr = dp.data(); d.dep_idx = di.data(); d.user_ptr = up.data(); d.user_idx = ui.data();
        d.mem = mb.data(); d.ws = wb.data(); d.cost = cb.data(); d.heuristic = heuristic; d.keep_dead = keep_dead;
        const int64_t *dep_ptr = d.dep_ptr, *dep_idx = d.dep_idx, *mem = d.mem, *ws = d.ws;
        const double* cost = d.cost;
        d.last_use.resize(N); d.parent.resize(N); d.size.assign(N, 1); d.seen.assign(N, 0);
        d.stack.resize(N + 1); d.resident.assign(N, 0); d.in_uf.assign(N, 0); d.class_cost.assign(N, 0.0);
        for (int64_t k = 0; k < n; ++k) {
            d.parent[k] = k;
            d.last_use[k] = d.user_ptr[k + 1] > d.user_ptr[k] ? d.user_idx[d.user_ptr[k + 1] - 1] : k;
        }
        std::vector<int64_t> pins(N, 0), used_stage(N, -1), computed_stage(N, -1), retro_stage(N, -1);
        std::vector<int64_t> last_access(N, 0), in_need(N, -1), row, res_list, res_pos(N, -1);
        std::vector<char>& resident = d.resident;
        auto drop = [&](int64_t v) {   // v leaves the resident list
            resident[v] = 0;
            const int64_t last = res_list.back();
            res_list[static_cast<size_t>(res_pos[v])] = last;
            res_pos[last] = res_pos[v];
            res_pos[v] = -1;
            res_list.pop_back();
        };
        R_idx.reserve(2 * N);
        int64_t current = fixed, clock = 0, peak = -1, computations = 0, evictions = 0;
        info[0] = 0;
        bool failed = false;
        for (int64_t t = 0; t < n && !failed; ++t) {
            const size_t s_start = S_idx.size();
            for (int64_t v = 0; v < t; ++v)
                if (resident[v]) S_idx.push_back(v);
            row.clear();
            row.push_back(t);
            in_need[t] = t;
            size_t top = 0;
            d.stack[top++] = t;
            while (top > 0) {
                const int64_t x = d.stack[--top];
                for (int64_t q = dep_ptr[x]; q < dep_ptr[x + 1]; ++q) {
                    const int64_t i = dep_idx[q];
                    if (!resident[i] && in_need[i] != t) { in_need[i] = t; d.stack[top++] = i; row.push_back(i); }
                }
            }
            std::sort(row.begin(), row.end());
            for (int64_t k : row)
                for (int64_t q = dep_ptr[k]; q < dep_ptr[k + 1]; ++q) { ++pins[dep_idx[q]]; used_stage[dep_idx[q]] = t; }
            for (int64_t k : row) {
                while (current + mem[k] + ws[k] > budget) {
                    int64_t best = -1;
                    double best_score = 0.0;
                    for (int64_t v : res_list) {
                        if (pins[v] != 0 || mem[v] <= 0) continue;
                        const double mv = static_cast<double>(mem[v]);
                        const double stale = static_cast<double>(clock - last_access[v] + 1);
                        double s;
                        switch (heuristic) {
                            case H_DTR: s = (cost[v] + d.walk(v, t, true)) / (mv * stale); break;
                            case H_DTR_EQ: s = d.eq_score_sum(v, t) / (mv * stale); break;
                            case H_DTR_LOCAL: s = cost[v] / (mv * stale); break;
                            case H_LRU: s = static_cast<double>(last_access[v]); break;
                            case H_LARGEST: s = -mv; break;
                            case H_MSPS: s = (cost[v] + d.walk(v, t, false)) / mv; break;
                            default: s = dtr_random_key(seed, static_cast<uint64_t>(evictions), static_cast<uint64_t>(v));
                        }
                        if (best == -1 || s < best_score || (s == best_score && v < best)) { best = v; best_score = s; }
                    }
                    if (best == -1) {
                        info[0] = 1; info[1] = t; info[2] = k; info[3] = current + mem[k] + ws[k];
                        failed = true;
                        break;
                    }
                    drop(best);
                    current -= mem[best];
                    ++evictions;
                    if (computed_stage[best] != t && used_stage[best] != t) retro_stage[best] = t;
                    d.leave(best, t);
                }
                if (failed) break;
                if (computations == max_computes) {
                    info[0] = 2; info[1] = t; info[2] = k; info[3] = current + mem[k] + ws[k];
                    failed = true;
                    break;
                }
                ++computations;
                ++clock;
                if (heuristic == H_DTR_EQ && d.in_uf[k]) d.class_cost[d.find(k)] -= cost[k];
                resident[k] = 1;
                res_pos[k] = static_cast<int64_t>(res_list.size());
                res_list.push_back(k);
                computed_stage[k] = t;
                last_access[k] = clock;
                current += mem[k];
                peak = std::max(peak, current + ws[k]);
                for (int64_t q = dep_ptr[k]; q < dep_ptr[k + 1]; ++q) {
                    const int64_t i = dep_idx[q];
                    last_access[i] = clock;
                    if (--pins[i] == 0 && resident[i] && d.can_free(i, t)) {
                        drop(i);
                        current -= mem[i];
                        d.leave(i, t);
                    }
                }
                if (pins[k] == 0 && d.can_free(k, t)) {
                    drop(k);
                    current -= mem[k];
                    d.leave(k, t);
                }
            }
            if (failed) break;
            R_idx.insert(R_idx.end(), row.begin(), row.end());
            R_ptr[t + 1] = static_cast<int64_t>(R_idx.size());
            size_t w = s_start;
            for (size_t p = s_start; p < S_idx.size(); ++p)
                if (retro_stage[S_idx[p]] != t) S_idx[w++] = S_idx[p];
            S_idx.resize(w);
            S_ptr[t + 1] = static_cast<int64_t>(w);
        }
        if (!failed) info[4] = peak;
        info[5] = computations;
        info[6] = evictions;
        } catch (const std::bad_alloc&) {
            no_memory = true;
        }
        Py_END_ALLOW_THREADS
    }
    if (no_memory) return PyErr_NoMemory();
    PyObject* a = to_bytes(info);
    PyObject* b = to_bytes(R_ptr);
    PyObject* c = to_bytes(R_idx);
    PyObject* e = to_bytes(S_ptr);
    PyObject* f = to_bytes(S_idx);
    if (!a || !b || !c || !e || !f) {
        Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c); Py_XDECREF(e); Py_XDECREF(f);
        return nullptr;
    }
    return Py_BuildValue("(NNNNN)", a, b, c, e, f);
}

PyMethodDef methods[] = {
    {"simulate", simulate, METH_VARARGS, "Simulate a schedule (see remat_core/kernels/_reference.py)."},
    {"r_given_s", r_given_s, METH_VARARGS, "Minimal R for a checkpoint matrix S (see _reference.py)."},
    {"path_cuts", path_cuts, METH_VARARGS, "Separate path inequalities (see _reference.py)."},
    {"dtr", dtr, METH_VARARGS, "Simulate DTR's online evictor as a schedule (see _reference.py)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_ext", "remat native kernels", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__native_ext() { return PyModule_Create(&module); }
