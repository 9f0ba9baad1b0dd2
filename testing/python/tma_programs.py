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


def stacked_slices_sum(cols: int, blocks: int = 1, swizzled: bool = False):
    """Y[b] = the sum over 16 steps of X[0:2, 64 rows of the step, :], streamed by a pipelined
    loop through a tile of two stacked 64 x ``cols`` slices; ``blocks`` blocks in one cluster,
    every one loading the same slices; ``swizzled``: the tile in the TMA/GMMA swizzle."""
    from tilelang.layout.swizzle import make_gmma_swizzled_layout

    cluster = (blocks, 1, 1) if blocks > 1 else None

    @T.prim_func
    def main(X: T.Tensor((2, 1024, cols), "float16"),
             Y: T.Tensor((blocks, 2, 64, cols), "float32")):
        with T.Kernel(blocks, threads=128, cluster_dims=cluster) as bx:
            X_s = T.alloc_shared((2, 64, cols), "float16")
            if swizzled:
                T.annotate_layout({X_s: make_gmma_swizzled_layout(X_s)})
            F = T.alloc_fragment((2, 64, cols), "float32")
            T.clear(F)
            for i in T.Pipelined(16, num_stages=2):
                T.copy(X[0:2, i * 64:(i + 1) * 64, 0:cols], X_s)
                for a, r, c in T.Parallel(2, 64, cols):
                    F[a, r, c] += X_s[a, r, c]
            T.copy(F, Y[bx, :, :, :])

    return main


def write_then_stream(stages: int = 2):
    """W = 2 A written by the block, then streamed back by a pipelined loop:
    Y = the sum of W's eight 64-row tiles.  Each thread reads rows other threads wrote."""

    @T.prim_func
    def main(A: T.Tensor((512, 64), "float16"), W: T.Tensor((512, 64), "float16"),
             Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            F = T.alloc_fragment((64, 64), "float32")
            for i, j in T.Parallel(512, 64):
                W[i, j] = A[i, j] * T.float16(2)
            T.clear(F)
            for k in T.Pipelined(8, num_stages=stages):
                T.copy(W[k * 64, 0], S)
                for i, j in T.Parallel(64, 64):
                    F[i, j] += S[i, j]
            T.copy(F, Y)

    return main


def recurrence(stages: int = 2):
    """W's 64-row tile k + 1 = tile k upside down, plus one, for k = 0..6, in place: each
    iteration reads the tile the one before wrote."""

    @T.prim_func
    def main(W: T.Tensor((512, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            for k in T.Pipelined(7, num_stages=stages):
                T.copy(W[k * 64, 0], S)
                for i, j in T.Parallel(64, 64):
                    W[(k + 1) * 64 + i, j] = S[63 - i, j] + T.float16(1)

    return main


def in_place_double(by_tile: bool):
    """X *= 2 tile by tile, in place: each iteration writes back only the tile it read."""

    @T.prim_func
    def main(X: T.Tensor((512, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            F = T.alloc_fragment((64, 64), "float16")
            for k in T.Pipelined(8, num_stages=2):
                T.copy(X[k * 64, 0], S)
                if by_tile:
                    T.copy(S, F)
                    for i, j in T.Parallel(64, 64):
                        F[i, j] = F[i, j] * T.float16(2)
                    T.copy(F, X[k * 64, 0])
                else:
                    for i, j in T.Parallel(64, 64):
                        X[k * 64 + i, j] = S[i, j] * T.float16(2)

    return main
