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


FLASH_ATTENTION = ["example_mha_fwd.py", "example_mha_fwd_bhsd.py", "example_gqa_fwd_bshd.py"]


# dtype x causal x dim, pairwise (every pair of values meets once), with sequence lengths that
# end inside a 64-wide tile and one that does not.
@pytest.mark.parametrize("dtype,causal,dim,seq_len", [
    ("float16", False, 64, 97), ("float16", True, 128, 150),
    ("bfloat16", False, 128, 128), ("bfloat16", True, 64, 70)])
@pytest.mark.parametrize("name", FLASH_ATTENTION)
def test_flash_attention_variants(name, dtype, causal, dim, seq_len):
    args = ["--target", "cpu", "--batch", "2", "--seq_len", str(seq_len), "--dim", str(dim),
            "--dtype", dtype]
    load(f"flash_attention/{name}").main(args + (["--causal"] if causal else []))


@pytest.mark.parametrize("heads,groups", [(4, 4), (6, 3), (3, 1)])
def test_gqa_example_group_sizes(heads, groups):
    """Multi-query (one K/V head), a middle grouping and plain multi-head attention."""
    load("flash_attention/example_gqa_fwd_bshd.py").main(
        ["--target", "cpu", "--heads", str(heads), "--groups", str(groups), "--seq_len", "90",
         "--causal"])


def test_gqa_example_refuses_uneven_groups():
    gqa = load("flash_attention/example_gqa_fwd_bshd.py")
    with pytest.raises(ValueError, match="heads=6 is not a multiple of groups=4"):
        gqa.flashattn(1, 6, 64, 64, False, groups=4)
