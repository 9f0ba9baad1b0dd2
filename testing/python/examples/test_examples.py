"""Every example runs on the CPU and checks itself against torch."""

import pytest

from programs import example as load


def test_gemm_example():
    load("gemm/example_gemm.py").main(["--target", "cpu", "--m", "130", "--n", "100",
                                       "--k", "70"])


def test_elementwise_example():
    load("elementwise/example_elementwise_add.py").main(["--target", "cpu", "--m", "100",
                                                         "--n", "70"])


def test_softmax_example():
    load("softmax/example_softmax.py").main(["--target", "cpu", "--m", "77", "--n", "96"])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_len,dim", [(128, 64), (150, 64), (97, 128)])
def test_flash_attention_example(seq_len, dim, causal):
    args = ["--target", "cpu", "--batch", "1", "--heads", "2", "--seq_len", str(seq_len),
            "--dim", str(dim)]
    load("flash_attention/example_mha_fwd.py").main(args + (["--causal"] if causal else []))
