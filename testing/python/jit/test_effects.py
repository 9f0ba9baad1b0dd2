"""``tilelang.jit.effects``: which tensors a tile program writes, and which it touches other
than as the destination of a ``T.copy``."""

import tilelang.language as T
from tilelang.jit.effects import accessed_besides_copies, written_params


def _program():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64,), "int32"), D: T.Tensor((64, 64), "float16"),
             E: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A, S)                    # A read
            T.copy(S, B[C[0], 0])           # B written; C read in the destination's index
            D[0, 0] = E[1, 1]               # D written; E read element-wise

    return main


def test_accessed_besides_copies():
    f = _program()
    handles = {p.name: f.buffer_map[p].__chandle__() for p in f.params}
    touched = accessed_besides_copies(f.body)
    assert {n for n, h in handles.items() if h in touched} == {"A", "C", "D", "E"}


def test_written_params():
    assert written_params(_program()) == ["B", "D"]


def test_a_view_is_its_tensor():
    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), W: T.Tensor((8, 8), "float32"),
             Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            Av = T.reshape(A, (64,))
            Wv = T.view(W, (64,))
            for i in T.Parallel(64):
                Wv[i] = Av[i]               # W written through its view; A only read
            for i in T.Parallel(64):
                Y[i] = Av[i]

    assert written_params(main) == ["W", "Y"]
