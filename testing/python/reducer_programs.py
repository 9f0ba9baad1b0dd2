"""Programs of the reducer tests, shared by the CPU, codegen and GPU tests."""

import tilelang.language as T


def row_reduce(M, N, op="sum", dtype="float32", threads=128, replication="all"):
    """B[i] = op over j of A[i, j], through a reducer updated in a 2-D T.Parallel loop."""
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            r = T.alloc_reducer(M, dtype, op=op, replication=replication)
            if op == "sum":
                T.clear(r)
            elif op == "max":
                T.fill(r, -T.infinity(dtype))
            else:
                T.fill(r, T.infinity(dtype))
            a = T.alloc_fragment((M, N), dtype)
            T.copy(A, a)
            for i, j in T.Parallel(M, N):
                if op == "sum":
                    r[i] += a[i, j]
                elif op == "max":
                    r[i] = T.max(r[i], a[i, j])
                else:
                    r[i] = T.min(r[i], a[i, j])
            T.finalize_reducer(r)
            T.copy(r, B)
    return main


def gemv(M, K, block_M=32, block_K=64, threads=128):
    """The public gemv-with-reducer pattern: o = a @ x, accumulated over K tiles."""
    @T.prim_func
    def main(a: T.Tensor((M, K), "float16"), x: T.Tensor((K,), "float16"),
             o: T.Tensor((M,), "float16")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bm:
            acc = T.alloc_reducer(block_M, "float32", replication="all")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                a_s = T.alloc_shared((block_M, block_K), "float16")
                T.copy(a[bm * block_M, k * block_K], a_s)
                a_f = T.alloc_fragment((block_M, block_K), "float16")
                T.copy(a_s, a_f)
                x_f = T.alloc_fragment(block_K, "float16")
                T.copy(x[k * block_K], x_f)
                for i, j in T.Parallel(block_M, block_K):
                    acc[i] += a_f[i, j] * x_f[j]
            T.finalize_reducer(acc)
            T.copy(acc, o[bm * block_M])
    return main


def centered(M, N, threads=128):
    """A reducer read back inside T.Parallel after the finalize: O = G - rowsum(G)."""
    @T.prim_func
    def main(G: T.Tensor((M, N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            g = T.alloc_fragment((M, N), "float32")
            out = T.alloc_fragment((M, N), "float32")
            T.copy(G, g)
            s = T.alloc_reducer((M,), "float32")
            T.clear(s)
            for i, j in T.Parallel(M, N):
                s[i] += g[i, j]
            T.finalize_reducer(s, batch=4)
            for i, j in T.Parallel(M, N):
                out[i, j] = g[i, j] - s[i]
            T.copy(out, O)
    return main
