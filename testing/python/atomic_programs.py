"""Programs of the atomics tests, shared by the CPU, codegen and GPU tests."""

import tilelang.language as T


def ticket(n_blocks, threads=64):
    """Each block takes a ticket (the counter's old value) once, and every thread sees it."""
    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), Out: T.Tensor((n_blocks, threads), "int32")):
        with T.Kernel(n_blocks, threads=threads) as bx:
            t = T.atomic_add(C[0], 1, return_prev=True)
            for i in T.Parallel(threads):
                Out[bx, i] = t
    return main


def slots(n, threads=32):
    """Elements of a T.Parallel loop with X > 0 take consecutive slots of a counter."""
    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Pos: T.Tensor((n,), "int32"),
             Cnt: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=threads):
            for i in T.Parallel(n):
                if X[i] > 0:
                    Pos[i] = T.atomic_add(Cnt[0], 1, return_prev=True)
                else:
                    Pos[i] = -1
    return main


def simt_histogram(n, bins, threads=64):
    """A SIMT-style kernel (it reads the thread index): every thread adds its own elements."""
    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), H: T.Tensor((bins,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            for s in T.serial(T.ceildiv(n, threads)):
                if s * threads + tx < n:
                    T.atomic_add(H[X[s * threads + tx]], 1, memory_order="relaxed")
    return main


def max_min_prev(G, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((G,), dtype), M: T.Tensor((2,), dtype), Old: T.Tensor((G, 2), dtype)):
        with T.Kernel(G, threads=32) as bx:
            Old[bx, 0] = T.atomic_max(M[0], X[bx], return_prev=True, memory_order="acq_rel")
            Old[bx, 1] = T.atomic_min(M[1], X[bx], return_prev=True)
    return main


def load_store(G):
    """Block b publishes its id with a release store; the reads use acquire loads."""
    @T.prim_func
    def main(Flag: T.Tensor((G,), "int32"), Seen: T.Tensor((G,), "int32")):
        with T.Kernel(G, threads=32) as bx:
            T.atomic_store(Flag[bx], bx + 1, memory_order="release")
            Seen[bx] = T.atomic_load(Flag[bx], memory_order="acquire")
    return main


def addx(lanes, M, N, dtype, order=None):
    """``B[i, j:j+lanes] += A[i, j:j+lanes]`` from every one of G blocks."""
    G = 3

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(G, threads=64):
            for i, j in T.Parallel(M, N // lanes):
                if lanes == 2:
                    T.atomic_addx2(B[i, j * 2], A[i, j * 2], memory_order=order)
                else:
                    T.atomic_addx4(B[i, j * 4], A[i, j * 4], memory_order=order)
    return main


def addx_prev(lanes, dtype, ramp=False):
    """P[0:lanes] = the previous values of D[0:lanes], to which V[0:lanes] is added."""
    @T.prim_func
    def main(D: T.Tensor((lanes,), dtype), V: T.Tensor((lanes,), dtype),
             P: T.Tensor((lanes,), dtype)):
        with T.Kernel(1, threads=1):
            if ramp:
                P[0:lanes] = T.atomic_addx2(D[T.Ramp(0, 1, 2)], V[T.Ramp(0, 1, 2)],
                                            return_prev=True)
            else:
                d = D[0:lanes]
                P[0:lanes] = (T.atomic_addx2 if lanes == 2 else T.atomic_addx4)(
                    d, V[0:lanes], return_prev=True)
    return main
