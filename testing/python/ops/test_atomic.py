"""T.atomic_add/max/min on the CPU backend: many blocks updating the same elements."""

import torch

import tilelang
import tilelang.language as T


def test_atomic_add_scalar_from_every_block():
    M, bM = 1000, 16

    @T.prim_func
    def main(X: T.Tensor((M,), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=32) as bx:
            x = T.alloc_fragment((bM,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx * bM], x)
            T.reduce_sum(x, s, dim=0)
            T.atomic_add(S[0], s[0])

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(M)
    s = torch.zeros(1)
    k(x, s)
    torch.testing.assert_close(s, x.sum(0, keepdim=True), rtol=1e-4, atol=1e-4)


def test_atomic_add_region():
    G, N = 9, 32

    @T.prim_func
    def main(X: T.Tensor((G, N), "float32"), Acc: T.Tensor((N,), "float32")):
        with T.Kernel(G, threads=32) as bx:
            row = T.alloc_fragment((N,), "float32")
            T.copy(X[bx, 0], row)
            T.atomic_add(Acc[0], row)

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(G, N)
    acc = torch.ones(N)
    k(x, acc)
    torch.testing.assert_close(acc, 1 + x.sum(0), rtol=1e-5, atol=1e-5)


def test_atomic_max_and_min():
    G = 7

    @T.prim_func
    def main(X: T.Tensor((G,), "int32"), Mx: T.Tensor((1,), "int32"), Mn: T.Tensor((1,), "int32")):
        with T.Kernel(G, threads=32) as bx:
            T.atomic_max(Mx[0], X[bx])
            T.atomic_min(Mn[0], X[bx])

    k = tilelang.compile(main, target="cpu")
    x = torch.randint(-100, 100, (G,), dtype=torch.int32)
    mx = torch.full((1,), -1000, dtype=torch.int32)
    mn = torch.full((1,), 1000, dtype=torch.int32)
    k(x, mx, mn)
    assert int(mx) == int(x.max()) and int(mn) == int(x.min())
