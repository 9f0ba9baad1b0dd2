"""Test inputs for a kernel's parameters (``tilelang.TensorSupplyType``) and comparisons."""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch

from ..utils.dtype import is_float


class TensorSupplyType(Enum):
    Auto = "auto"  # uniform(-1, 1) floats, whole-number float8s, small integers
    Integer = "integer"
    Uniform = "uniform"
    Normal = "normal"
    Randn = "randn"
    Zero = "zero"
    One = "one"


def make_tensor(shape, dtype: str, tdtype, device, kind: TensorSupplyType) -> torch.Tensor:
    """A tensor of ``shape`` for a parameter of ``dtype`` filled as ``kind`` says; ``Auto`` as
    the public TileLang fills it (uniform floats in [-1, 1], float8 whole numbers in
    [-128, 128), integers in [-2, 3), unsigned in [0, 3))."""
    if kind == TensorSupplyType.Zero:
        return torch.zeros(shape, dtype=tdtype, device=device)
    if kind == TensorSupplyType.One:
        return torch.ones(shape, dtype=tdtype, device=device)
    if not is_float(dtype) or kind == TensorSupplyType.Integer:
        if dtype == "bool":
            return torch.randint(0, 2, shape, device=device).to(tdtype)
        lo, hi = (0, 3) if dtype.startswith("uint") else (-2, 3)
        return torch.randint(lo, hi, shape, device=device).to(tdtype)
    if kind == TensorSupplyType.Auto:
        if dtype.startswith("float8"):  # whole numbers in [-128, 128), rounded to float8
            return torch.randint(-128, 128, shape, device=device).to(torch.float32).to(tdtype)
        return torch.empty(shape, device=device, dtype=torch.float32).uniform_(-1.0, 1.0) \
            .to(tdtype)
    if kind == TensorSupplyType.Uniform:
        return torch.rand(shape, device=device, dtype=torch.float32).to(tdtype)
    return torch.randn(shape, device=device, dtype=torch.float32).to(tdtype)


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
            max_mismatched_ratio: float, name: str = "output") -> None:
    """Raise ``AssertionError`` when more than ``max_mismatched_ratio`` of the elements differ
    beyond ``atol + rtol * |ref|``."""
    a = out.detach().to("cpu", torch.float64)
    b = torch.as_tensor(ref).detach().to("cpu", torch.float64)
    if a.shape != b.shape:
        raise AssertionError(f"{name}: shape {tuple(a.shape)} differs from the reference "
                             f"{tuple(b.shape)}")
    both_nan = torch.isnan(a) & torch.isnan(b)
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    bad = ~((a - b).abs() <= atol + rtol * b.abs()) & ~both_nan & ~same_inf
    n_bad = int(bad.sum())
    total = max(1, a.numel())
    if n_bad > max_mismatched_ratio * total:
        idx = bad.nonzero()[0].tolist() if n_bad else []
        diff = (a - b).abs()
        diff[both_nan | same_inf] = 0
        raise AssertionError(
            f"{name}: {n_bad} of {total} elements ({100.0 * n_bad / total:.2f}%) differ beyond "
            f"atol={atol}, rtol={rtol}; max abs diff {float(diff.max()):.4g}; first at index "
            f"{idx}: got {float(a[tuple(idx)]):.6g}, expected {float(b[tuple(idx)]):.6g}")


def as_list(x: Any) -> list:
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def reference_outputs(reference: Any, kernel: Any, inputs: list) -> list:
    """``reference``'s outputs for ``kernel``'s ``inputs``, computed before the kernel runs, on
    copies of the tensors the kernel writes in place (the others as given)."""
    from ..jit.torch_op import writes

    written = set(writes(kernel))
    names = [kernel.params[i].name for i in kernel._binder.inputs]
    return as_list(reference(*[x.clone() if name in written and hasattr(x, "clone") else x
                               for name, x in zip(names, inputs)]))


def torch_assert_close(*args: Any, **kwargs: Any) -> None:
    """``tilelang.testing.torch_assert_close`` (the public TileLang also exports it here)."""
    from ..testing import torch_assert_close as check

    check(*args, **kwargs)
