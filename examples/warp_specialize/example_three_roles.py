"""Three roles in one block of 384 threads, synchronized by mbarriers (sm_90a).

* warp group 0, the **producer**: loads the 64x64 tiles of A with TMA into a ring of two
  shared buffers (waits on ``empty[s]``; ``full[s]`` completes when the TMA load's bytes have
  landed and the producer's threads have arrived); it keeps few
  registers (``T.set_max_nreg(24, 0)``);
(Inside ``T.ws`` the work is spread over the group's threads by hand, from ``tx``: layout
inference of ``T.Parallel`` is per block today.)

* warp group 1, the **consumer**: waits on ``full[s]``, computes ``Y = 2 A + 1`` in fp32 into
  a shared intermediate tile, arrives on ``empty[s]`` (the slot may be reloaded) and on
  ``y_full`` (the intermediate is ready), after waiting on ``y_empty``;
* warp group 2, the **coordinator**: waits on ``y_full``, post-processes the intermediate
  (``B = relu(Y)``, and the row sums of ``B`` into ``S``), arrives on ``y_empty``.

Checked against torch on an sm_90 GPU.  Without one, it prints that it needs a GPU and exits
with status 0 (the kernel's CUDA source is still generated, with ``--source``).
"""

import argparse
import sys

import tilelang
import tilelang.language as T


def three_roles(M: int = 1024, N: int = 64, bm: int = 64):
    tiles = M // bm

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32"),
             S: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=384):
            tx = T.get_thread_binding()
            ring = T.alloc_shared((2, bm, N), "float16")
            Y = T.alloc_shared((bm, N), "float32")
            full = T.alloc_barrier([128, 128])  # producer -> consumer (TMA bytes + arrivals)
            empty = T.alloc_barrier([128, 128])  # consumer -> producer (slot free)
            y_full = T.alloc_barrier(128)  # consumer -> coordinator (Y written)
            y_empty = T.alloc_barrier(128)  # coordinator -> consumer (Y read)
            with T.ws(0):
                T.set_max_nreg(24, 0)
                for i in T.serial(tiles):
                    T.mbarrier_wait_parity(empty[i % 2], ((i // 2) & 1) ^ 1)
                    T.tma_copy(A[i * bm:(i + 1) * bm, 0:N], ring[i % 2, 0:bm, 0:N],
                               barrier=full[i % 2])
                    T.mbarrier_arrive(full[i % 2])  # the copy only expects its bytes
            with T.ws(1):
                T.set_max_nreg(240, 1)
                for i in T.serial(tiles):
                    T.mbarrier_wait_parity(full[i % 2], (i // 2) & 1)
                    T.mbarrier_wait_parity(y_empty, (i & 1) ^ 1)
                    for e in T.serial(bm * N // 128):  # element (tx - 128) + 128 e
                        r = ((tx - 128) + 128 * e) // N
                        c = ((tx - 128) + 128 * e) % N
                        Y[r, c] = T.cast(ring[i % 2, r, c], "float32") * 2.0 + 1.0
                    T.mbarrier_arrive(empty[i % 2])
                    T.mbarrier_arrive(y_full)
            with T.ws(2):
                T.set_max_nreg(240, 1)
                for i in T.serial(tiles):
                    T.mbarrier_wait_parity(y_full, i & 1)
                    for e in T.serial(bm * N // 128):
                        r = ((tx - 256) + 128 * e) // N
                        c = ((tx - 256) + 128 * e) % N
                        B[i * bm + r, c] = T.max(Y[r, c], 0.0)
                    if tx - 256 < bm:  # one thread per row: the row sum
                        r = tx - 256
                        S[i * bm + r] = 0.0
                        for c in T.serial(N):
                            S[i * bm + r] = S[i * bm + r] + T.max(Y[r, c], 0.0)
                    T.mbarrier_arrive(y_empty)

    return main


def has_sm90() -> bool:
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    except Exception:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--M", type=int, default=1024)
    ap.add_argument("--source", action="store_true", help="print the generated CUDA source")
    args = ap.parse_args(argv)
    prog = three_roles(args.M)
    if args.source:
        print(tilelang.compile(prog, target="cuda -arch=sm_90a").get_kernel_source())
    if not has_sm90():
        print("example_three_roles needs an sm_90 GPU (TMA, mbarriers, setmaxnreg); none is "
              "visible, so nothing was run.")
        return 0
    import torch

    kernel = tilelang.compile(prog, out_idx=[1, 2], target="cuda")
    a = torch.randn(args.M, 64, device="cuda", dtype=torch.float16)
    b, s = kernel(a)
    ref_b = torch.relu(a.float() * 2.0 + 1.0)
    torch.testing.assert_close(b, ref_b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, ref_b.sum(dim=1), rtol=1e-4, atol=1e-3)
    print(f"three roles: B and its row sums match torch (M={args.M})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
