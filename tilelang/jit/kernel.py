"""``JITKernel``: a compiled tile program that is called with torch tensors."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import tvm
from torch.compiler import is_compiling
from tvm import tirx
from tvm.target import Target

from ..engine.target import is_cpu
from ..transform import check_bounds  # noqa: F401  (registers the kernels' error callback)
from ..transform.passes import original_errors
from . import torch_op
from .launcher import make_launcher
from .params import ArgumentBinder, TensorParam, params_of


def normalize_out_idx(out_idx: int | Sequence[int] | None, n: int) -> list[int]:
    """``out_idx`` as a list of non-negative parameter positions (negative ones count from the
    end); ``TypeError`` for anything but ints, ``IndexError`` for one out of range."""
    if out_idx is None:
        return []
    idx = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    out = []
    for i in idx:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"out_idx: {out_idx!r} holds {i!r}; give parameter positions (int)")
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"out_idx {i} is out of range for a kernel with {n} parameters")
        out.append(j)
    return out


class _NoGradient(torch.autograd.Function):
    """Outputs of a kernel whose inputs require gradients: a backward through them raises (a
    kernel has no gradient formula) instead of leaving the inputs' gradients silently short."""

    @staticmethod
    def forward(ctx, name: str, n: int, *tensors):
        ctx.name = name
        return tuple(t.view_as(t) for t in tensors[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(f"tilelang kernel {ctx.name} has no gradient: call it in inference "
                           "(torch.no_grad()) or wrap it in your own torch.autograd.Function")


def _without_gradient(kernel, args: tuple):
    """``kernel(*args)`` for inputs that require gradients (module doc of ``_NoGradient``); a
    tensor it would write in place that is a leaf requiring gradients is refused, as torch
    refuses ``add_`` on one."""
    from ..errors import KernelArgumentError

    written = set(torch_op.writes(kernel))
    for p, a in zip((kernel.params[i] for i in kernel._binder.inputs), args):
        if p.name in written and isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf:
            raise KernelArgumentError(f"{kernel.name}: parameter {p.name!r} is written in place "
                                      "but is a leaf tensor that requires grad; pass a tensor "
                                      "without requires_grad (or call under torch.no_grad())")
    with torch.no_grad():
        out = kernel._launch(kernel._fn, args)
    outs = [out] if isinstance(out, torch.Tensor) else list(out or [])
    needing = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    tied = _NoGradient.apply(kernel.name, len(outs), *outs, *needing) if outs else ()
    return tied[0] if isinstance(out, torch.Tensor) else type(out)(tied) if out else out


class JITKernel:
    """A compiled kernel: ``kernel(*inputs)`` returns the ``out_idx`` outputs (one tensor, or
    a tuple of them), allocated on the inputs' device."""

    def __init__(self, func: tirx.PrimFunc, rt_mod: Any, target: Target,
                 out_idx: list[int], pass_configs: dict | None = None,
                 device_source: str | None = None, *, name: str | None = None,
                 params: list | None = None):
        """``func`` may be None for a loaded kernel, which then gives ``name`` and ``params``."""
        self.prim_func = func
        self.rt_mod = rt_mod
        self.device_source = device_source
        self.target = target
        self.out_idx = out_idx
        self.pass_configs = pass_configs or {}
        self.name = name or (str(func.attrs["global_symbol"]) if "global_symbol" in func.attrs
                             else "main")
        self.params = params if params is not None else params_of(func)
        self._fn = rt_mod[self.name]
        device = "cpu" if is_cpu(target) else "cuda"
        self._binder = ArgumentBinder(self.name, self.params, out_idx, device)
        self._launch = make_launcher(self._binder, lambda args: _without_gradient(self, args))
        self.torch_op_name = torch_op.new_name(self)  # the operator itself is made on first use

    def __call__(self, *args: Any):
        if is_compiling():  # traced by torch.compile: one custom-op node
            return torch_op.call(self, args)
        return self._launch(self._fn, args)

    # sources -------------------------------------------------------------------------
    def get_kernel_source(self, kernel_only: bool = False) -> str:
        """The device code: CUDA C for GPU targets, LLVM IR for the CPU.  ``kernel_only``
        (the public TileLang's switch between the kernel and kernel plus host wrapper) changes
        nothing: the host side here is TVM's packed function, which has no source."""
        if self.device_source is None:
            self.device_source = _source_of(self.rt_mod, self.target)
        return self.device_source

    @property
    def kernel_source(self) -> str:
        """The device code, as :meth:`get_kernel_source` returns it."""
        return self.get_kernel_source()

    def get_ptx(self) -> str:
        """The PTX of the kernel (compiled here with NVRTC or nvcc; no GPU needed)."""
        from ..engine.cuda import compile_source
        from ..transform import pass_config

        if is_cpu(self.target):
            raise TypeError("a CPU kernel has no PTX")
        with pass_config.scope(self.pass_configs):  # the kernel's own math mode
            return compile_source(self.get_kernel_source(), self.target, "ptx").decode()

    def export_ptx(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.get_ptx())

    def show_ptx(self) -> None:
        print(self.get_ptx())

    def get_host_source(self) -> str:
        """The host code (LLVM IR); not available for a kernel loaded from the cache."""
        return _host_module(self.rt_mod).inspect_source("ll")

    # tools -----------------------------------------------------------------------------
    def verify(self, *inputs: Any, rtol: float = 1e-2, atol: float = 1e-2) -> Any:
        """Run the kernel and the same program on the CPU reference backend on the same
        inputs; return the kernel's outputs, or raise ``KernelMismatchError`` naming the first
        differing element, both values and the grid block that writes it (see
        ``tilelang/jit/verify.py``)."""
        from .verify import verify

        return verify(self, *inputs, rtol=rtol, atol=atol)

    def get_profiler(self, tensor_supply_type: Any = None):
        from ..profiler import Profiler
        from ..utils.tensor import TensorSupplyType

        return Profiler(self, tensor_supply_type or TensorSupplyType.Auto)

    def run_once(self, func: Any = None) -> Any:
        """Call the kernel (or ``func``) once on generated inputs (see ``get_profiler``)."""
        return self.get_profiler().run_once(func)

    def export_library(self, path: str) -> None:
        """Write the compiled library to ``path`` and its record (parameters, outputs, target,
        source) to ``path + ".json"``; ``tilelang.load(path)`` rebuilds the kernel."""
        from .library import export

        export(self, path)

    def as_torch_op(self):
        """This kernel as the torch operator ``torch.ops.tilelang.k_<hash>`` (registered on
        first request); ``torch.compile`` uses it for calls it traces."""
        return torch_op.register(self)

    @property
    def input_params(self) -> list:
        return [p for i, p in enumerate(self.params) if i not in self.out_idx]

    @property
    def output_params(self) -> list[TensorParam]:
        return [self.params[i] for i in self.out_idx]

    def __repr__(self) -> str:
        return f"JITKernel({self.name}, target={self.target.kind.name}, params=" \
               f"{[p.name for p in self.params]}, out_idx={self.out_idx})"


def _host_module(rt_mod):
    return getattr(rt_mod, "mod", rt_mod)


def _source_of(rt_mod, target: Target) -> str:
    """The device source of ``rt_mod``: LLVM IR on the CPU, else the first device module's
    source; empty when the kernel has no device code (its body does nothing, e.g. only binds
    the sizes of its parameters), so that calling it only checks the arguments."""
    host = _host_module(rt_mod)
    if is_cpu(target):
        return host.inspect_source("ll")
    for m in host.imports:
        return m.inspect_source()
    return ""


def _prelude_of(func: tirx.PrimFunc) -> str:
    """The device code placed before the kernel: cuRAND's generators' header when ``func``
    uses them, then the ``T.Kernel(prelude=...)`` texts."""
    from ..device.random import CURAND_HEADER, needs_curand
    from ..ir_utils import find_all

    found = find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == "tl.prelude")
    return "\n".join(([CURAND_HEADER] if needs_curand(func.body) else []) +
                     [str(a.value.value) for a in found])


def build(func: tirx.PrimFunc, target: Target) -> tuple[Any, str | None]:
    """Run the tilelang pipeline and TVM's codegen on ``func``: the runtime module and, for
    CUDA, the kernel source that was compiled."""
    from ..engine import cuda, pipeline

    name = str(func.attrs["global_symbol"]) if "global_symbol" in func.attrs else "main"
    mod = tvm.IRModule({name: func})
    try:
        with original_errors(), cuda.building(target, _prelude_of(func)) as b:
            rt_mod = tvm.compile(mod, target=target, tir_pipeline=pipeline.NAME)
    except tvm.error.InternalError as err:  # a TVM check failed on IR we produced
        from ..errors import LoweringError

        what = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
        raise LoweringError(
            f"kernel {name}: TVM failed an internal check while building it for "
            f"{target.kind.name} ({what or type(err).__name__}); tilelang produced IR that TVM "
            f"does not handle, a tilelang bug. Set TILELANG_DUMP_IR=<folder> (with "
            f"TILELANG_DISABLE_CACHE=1) to see the IR after each pass") from err
    return rt_mod, (b.sources[-1] if b.sources else None)
