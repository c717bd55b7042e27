import numpy as np
import pytest
import scipy.sparse as sp

from remat_core import InvalidScheduleError, Schedule, simulate
from remat_core.zoo import linear_graph, random_training_graph


def eye_tril(n):
    return np.eye(n, dtype=bool), np.tril(np.ones((n, n), dtype=bool), -1)


def test_dense_sparse_and_csr_constructors_agree():
    R, S = eye_tril(4)
    a = Schedule(R, S)
    b = Schedule(sp.csr_matrix(R.astype(int)), sp.coo_matrix(S.astype(int)))
    c = Schedule.from_csr(4, *a.csr)
    assert a == b == c
    R2, S2 = a.dense()
    assert (R2 == R).all() and (S2 == S).all()
    assert (a.R == R).all() and (a.S == S).all()
    assert a.num_computes == 4 and a.compute_counts().tolist() == [1, 1, 1, 1]
    assert a.R_row(2).tolist() == [2] and a.S_row(2).tolist() == [0, 1]


@pytest.mark.parametrize(
    "R, S, match, stage, node",
    [
        (np.eye(3)[:2], np.zeros((3, 3)), "`R` must be a square matrix", None, None),
        (np.eye(3), np.zeros((2, 2)), "same shape", None, None),
        (np.eye(3) * 2, np.zeros((3, 3)), r"binary.*R\[0, 0\] = 2\.0", 0, 0),
        (np.diag([1, 0, 1]), np.zeros((3, 3)), r"R\[1, 1\] = 0", 1, 1),
        (np.eye(3) + np.eye(3, k=1), np.zeros((3, 3)), r"R\[0, 1\] = 1", 0, 1),
        (np.eye(3), np.eye(3), r"S\[0, 0\] = 1", 0, 0),
        (np.eye(3), np.eye(3, k=1), r"S\[0, 1\] = 1", 0, 1),
    ],
)
def test_structural_errors_name_stage_and_node(R, S, match, stage, node):
    with pytest.raises(InvalidScheduleError, match=match) as info:
        Schedule(R, S)
    assert info.value.stage == stage and info.value.node == node


def test_sparse_non_binary_rejected():
    with pytest.raises(InvalidScheduleError, match="binary"):
        Schedule(sp.csr_matrix(np.eye(2) * 3), sp.csr_matrix((2, 2)))


def test_from_csr_validates():
    with pytest.raises(InvalidScheduleError, match="pointer"):
        Schedule.from_csr(2, [0, 1], [0], [0, 0, 0], [])
    with pytest.raises(InvalidScheduleError, match="strictly increasing"):
        Schedule.from_csr(2, [0, 1, 3], [0, 1, 1], [0, 0, 0], [])
    with pytest.raises(InvalidScheduleError, match="outside"):
        Schedule.from_csr(2, [0, 1, 2], [0, 5], [0, 0, 0], [])


def test_to_dict_roundtrip_and_repr():
    g = random_training_graph(4, seed=2)
    s = Schedule.checkpoint_all(g)
    assert Schedule.from_dict(s.to_dict()) == s
    assert "stages" in repr(s)
    with pytest.raises(InvalidScheduleError, match="needs `n`"):
        Schedule.from_dict({"R": []})
    with pytest.raises(InvalidScheduleError, match="rows"):
        Schedule.from_dict({"n": 2, "R": [[0]], "S": [[], []]})


def test_checkpoint_all_keeps_each_value_until_its_last_use():
    g = linear_graph(3)
    s = Schedule.checkpoint_all(g)
    R, S = s.dense()
    assert (R == np.eye(g.n, dtype=bool)).all()
    for i in range(g.n):
        last = max(g.users[i], default=i)
        assert S[i + 1:last + 1, i].all() and not S[last + 1:, i].any()
    simulate(g, s, timeline=False)


def test_validate_and_cost_check_graph_size():
    g = linear_graph(2)
    s = Schedule(*eye_tril(4))
    with pytest.raises(InvalidScheduleError, match="4 stages but the graph has 5"):
        simulate(g, s, timeline=False)
    with pytest.raises(InvalidScheduleError, match="4 stages"):
        s.cost(g)
    assert Schedule.checkpoint_all(g).cost(g) == 5.0
