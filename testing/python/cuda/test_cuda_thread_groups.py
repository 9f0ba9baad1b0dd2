"""Two thread groups of one block hand a shared tile over through a named barrier (GPU).

Also run under ``compute-sanitizer --tool racecheck`` by ``tools/sanitize_kernels.py``."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


def hand_off(n: int, rounds: int = 1):
    """Warp group 0 copies a 64x64 tile of A into shared memory (adding the round), warp group
    1 copies it out to B; ``rounds`` repeats the hand-off on the same tile."""

    @T.prim_func
    def main(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        with T.Kernel(n // 64, threads=256) as bx:
            S = T.alloc_shared((64, 64), "float32")
            for r in T.serial(rounds):
                with T.ws(0):
                    T.copy(A[bx * 64, 0], S)
                with T.ws(1):
                    T.copy(S, B[bx * 64, 0])

    return main


@pytest.mark.parametrize("rounds", [1, 3])
def test_group_hand_off_is_correct(rounds):
    k = tilelang.compile(hand_off(512, rounds), target="cuda")
    body = k.get_kernel_source().split("main_kernel", 1)[1]
    assert body.count("((uint)3), ((uint)256)") == 2  # the named barrier, once in each group
    if rounds == 1:  # no block-wide barrier between the roles (one publishes mbarrier inits)
        assert "__syncthreads" not in body.split("if (((int)threadIdx.x) < 128)", 1)[1]
    a = torch.randn(512, 64, device="cuda")
    b = torch.zeros_like(a)
    k(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, a)
