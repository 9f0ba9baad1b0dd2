"""Hand-written mbarrier/TMA programs shared by the pass-level and GPU tests."""

import tilelang.language as T


def producer_consumer(M=512, N=64, bm=64, dtype="float16"):
    """B = A + 1, streamed through two shared tiles: thread 0 loads tile 2i into S0 and 2i+1
    into S1 with TMA (full barriers: the load's bytes and every thread's arrival), every thread
    adds and stores, then arrives on the tile's empty barrier so that the next load may
    overwrite it."""
    rounds = M // bm // 2

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128) as bx:
            S0 = T.alloc_shared((bm, N), dtype)
            S1 = T.alloc_shared((bm, N), dtype)
            F = T.alloc_fragment((bm, N), dtype)
            full = T.alloc_barrier([128, 128])
            empty = T.alloc_barrier([128, 128])
            for i in T.serial(rounds):
                T.mbarrier_wait_parity(empty[0], (i & 1) ^ 1)
                T.tma_copy(A[2 * i * bm, 0], S0, barrier=full[0])
                T.mbarrier_arrive(full[0])
                T.mbarrier_wait_parity(empty[1], (i & 1) ^ 1)
                T.tma_copy(A[(2 * i + 1) * bm, 0], S1, barrier=full[1])
                T.barrier_arrive(full[1])
                T.mbarrier_wait_parity(full[0], i & 1)
                T.copy(S0, F)
                T.mbarrier_arrive(empty[0])
                for r, c in T.Parallel(bm, N):
                    F[r, c] = F[r, c] + T.cast(1, dtype)
                T.copy(F, B[2 * i * bm, 0])
                T.barrier_wait(full[1], i & 1)
                T.copy(S1, F)
                T.barrier_arrive(empty[1])
                for r, c in T.Parallel(bm, N):
                    F[r, c] = F[r, c] + T.cast(1, dtype)
                T.copy(F, B[(2 * i + 1) * bm, 0])

    return main
