"""tilelang.testing: skip decorators, seeded randomness, the tolerant comparison, main()."""

import subprocess
import sys
import textwrap

import pytest
import torch

import tilelang
import tilelang.testing as tt


def test_torch_assert_close_tolerates_a_few_mismatches():
    ref = torch.zeros(1000)
    out = ref.clone()
    out[:1] = 1.0  # 0.1% of the elements
    tt.torch_assert_close(out, ref, atol=1e-3, rtol=0, max_mismatched_ratio=0.001)
    out[:2] = 1.0
    with pytest.raises(AssertionError, match="2 of 1000"):
        tt.torch_assert_close(out, ref, atol=1e-3, rtol=0, max_mismatched_ratio=0.001)


def test_torch_assert_close_checks_dtype_and_nans_on_request():
    a = torch.ones(4, dtype=torch.float16)
    with pytest.raises(AssertionError, match="dtype"):
        tt.torch_assert_close(a, torch.ones(4))
    tt.torch_assert_close(a, torch.ones(4), check_dtype=False)
    nan = torch.tensor([float("nan"), 1.0])
    tt.torch_assert_close(nan, nan.clone())
    with pytest.raises(AssertionError, match="NaN"):
        tt.torch_assert_close(nan, nan.clone(), equal_nan=False)


def test_compute_version_decorators_compare_the_visible_capability(monkeypatch):
    monkeypatch.setattr(tt, "_cuda_capability", lambda: (9, 0))
    skipped = lambda mark: bool(mark.args[0])  # noqa: E731
    assert not skipped(tt.requires_cuda_compute_version(9, 0))  # default mode: >=
    assert skipped(tt.requires_cuda_compute_version(10))
    assert not skipped(tt.requires_cuda_compute_version_eq(9, 0))
    assert skipped(tt.requires_cuda_compute_version_eq(8, 0))
    assert not skipped(tt.requires_cuda_compute_version_lt(10))
    assert skipped(tt.requires_cuda_compute_version_le(8, 9))
    assert not skipped(tt.requires_cuda_compute_version_gt(8, 9))
    monkeypatch.setattr(tt, "_cuda_capability", lambda: None)  # no GPU: everything skips
    assert skipped(tt.requires_cuda_compute_version_lt(100))
    with pytest.raises(ValueError, match="mode"):
        tt.requires_cuda_compute_version(9, 0, mode="ne")


def test_requires_package():
    assert not tt.requires_package("torch").args[0]
    assert tt.requires_package("surely_not_a_package_xyz").args[0]


def test_tvm_testing_has_requires_package_for_public_scripts():
    """Public example scripts decorate with ``tvm.testing.requires_package`` (older TVMs')."""
    import tvm.testing

    assert tvm.testing.requires_package("surely_not_a_package_xyz").args[0]


def test_set_random_seed_makes_draws_repeatable():
    tt.set_random_seed(7)
    first = torch.randn(5)
    tt.set_random_seed(7)
    assert torch.equal(first, torch.randn(5))


def test_main_runs_the_calling_file(tmp_path):
    for body, code in (("assert True", 0), ("assert False", 1)):
        f = tmp_path / f"test_probe_{code}.py"
        f.write_text(textwrap.dedent(f"""
            import tilelang.testing

            def test_probe():
                {body}

            if __name__ == "__main__":
                tilelang.testing.main()
        """))
        res = subprocess.run([sys.executable, str(f), "-q", "-p", "no:cacheprovider"],
                             capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == code, res.stdout + res.stderr


calls = []


def regression_probe():
    tt.process_func(lambda n: calls.append(n), repeat=2, warmup=1, n=3)
    tt.process_func(lambda n: calls.append(n), "sliding_window", repeat=1, warmup=0, n=4)


def test_regression_runs_the_callers_regression_functions(capsys):
    """The second positional argument of process_func names the record (as the public
    regression scripts pass it), keyword arguments go to the function."""
    calls.clear()
    tt.regression()
    assert calls == [3, 3, 3, 4]  # one warm-up, two timed; then one timed
    out = capsys.readouterr().out
    assert "regression_probe: " in out and "regression_probe: sliding_window: " in out


def test_math_helpers():
    assert tilelang.cdiv(10, 3) == 4 and tilelang.math.cdiv(9, 3) == 3
    assert [tilelang.math.next_power_of_2(n) for n in (0, 1, 5, 64, 65)] == [1, 1, 8, 64, 128]
    assert tilelang.math.prev_power_of_2(65) == 64


def test_top_level_reexports():
    from tilelang import tvm

    import tvm as real_tvm

    assert tvm is real_tvm
    assert tilelang.DataType("bfloat16").bits == 16


def test_public_aliases():
    import logging

    import tvm

    from tilelang.utils.tensor import torch_assert_close

    torch_assert_close(torch.ones(3), torch.ones(3))
    assert tvm.tirx.PrimExpr is tvm.tirx.Expr
    tilelang.set_log_level("ERROR")
    assert logging.getLogger("tilelang").level == logging.ERROR
    tilelang.set_log_level("WARNING")
