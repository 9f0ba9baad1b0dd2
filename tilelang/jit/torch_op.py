"""A compiled kernel as a torch custom operator, so that ``torch.compile`` traces a call to it
as one node of the graph instead of breaking the graph.

Each kernel becomes ``torch.ops.tilelang.k_<hash>``, a name drawn when the kernel is made (unique
per kernel object; the name is all that Dynamo sees and guards on).  Its schema takes the
kernel's inputs in order and returns its ``out_idx`` outputs; tensor parameters the program may
write (see :mod:`tilelang.jit.effects`) are declared mutated (``Tensor(a!)``).  Its fake
implementation checks the inputs like a call does and allocates the outputs from the parameter
shapes, with size variables bound from the input shapes, so symbolic sizes flow through.

The operator is registered on first use: when ``torch.compile`` first traces a call of the
kernel, or when :func:`register` is called; a plain call never touches it.
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any, Sequence

import torch

from ..errors import TileLangError
from .params import ScalarParam, TensorParam

NAMESPACE = "tilelang"

_library: list = []  # the torch.library.Library fragment, made on first registration
_registered: dict[str, Any] = {}  # op name -> OpOverload
_kernels: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def writes(kernel) -> list[str]:
    """Names of the non-output tensor parameters the kernel may write."""
    known = getattr(kernel, "_writes", None)
    if known is None:
        from .effects import written_params

        known = written_params(kernel.prim_func)
        kernel._writes = known
    outs = {kernel.params[i].name for i in kernel.out_idx}
    return [n for n in known if n not in outs]


def new_name(kernel) -> str:
    """A fresh operator name ``k_<hash>`` for ``kernel``, remembered (weakly) so that the
    operator can be registered under it later; no torch registration happens here."""
    name = f"k_{uuid.uuid4().hex[:16]}"
    _kernels[name] = kernel
    return name


def op_name(kernel) -> str:
    """The operator name of ``kernel`` in the ``tilelang`` namespace."""
    return kernel.torch_op_name


def schema(kernel) -> str:
    """The operator schema: the kernel's inputs in order, its outputs as the result."""
    mutated = set(writes(kernel))
    args = []
    for i, p in enumerate(kernel.params):
        if i in kernel.out_idx:
            continue
        if isinstance(p, TensorParam):
            alias = f"(a{len(args)}!)" if p.name in mutated else ""
            args.append(f"Tensor{alias} {_ident(p.name, i)}")
        elif p.dtype == "handle":  # memory behind an address: no schema can declare its use
            raise TileLangError(f"{kernel.name}: parameter {p.name!r} is a T.ptr, which a torch "
                                "operator (torch.compile, as_torch_op) cannot take; call the "
                                "kernel outside torch.compile, or pass a T.Tensor")
        else:
            args.append(f"{_scalar_type(p)} {_ident(p.name, i)}")
    n = len(kernel.out_idx)
    ret = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"({', '.join(args)}) -> {ret}"


def register(kernel) -> Any:
    """The ``torch.ops.tilelang`` operator of ``kernel`` (an ``OpOverload``), registered with
    CPU and CUDA implementations and a fake implementation on first request."""
    name = kernel.torch_op_name
    op = _registered.get(name)
    if op is not None:
        return op
    if not _library:
        _library.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    lib = _library[0]
    lib.define(f"{name}{schema(kernel)}")

    def run(*args):
        return kernel(*args)  # None, one tensor or a tuple, as the schema says

    def fake(*args):
        outs = _fake_outputs(kernel, args)
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    lib.impl(name, run, "CPU")
    lib.impl(name, run, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    _registered[name] = op
    return op


def _assume_constant_result(fn):
    """``torch.compiler.assume_constant_result`` without importing ``torch._dynamo`` (over a
    second, which ``import tilelang`` would pay): that decorator only sets this mark, which
    Dynamo reads when it traces a call (a test checks that the two agree)."""
    fn._dynamo_marked_constant = True
    return fn


@_assume_constant_result
def _registered_name(name: str) -> str:
    """Run by ``torch.compile`` while it traces (not traced itself): registers the operator of
    the kernel named ``name``.  It takes the name, a constant that Dynamo guards on, so a
    compiled graph is never reused for another kernel."""
    register(_kernels[name])
    return name


def call(kernel, args: Sequence) -> Any:
    """Call ``kernel`` through its operator; what ``JITKernel.__call__`` does under
    ``torch.compile``."""
    packet = getattr(getattr(torch.ops, NAMESPACE), _registered_name(kernel.torch_op_name))
    out = packet(*args)
    return None if isinstance(out, tuple) and not out else out


def _fake_outputs(kernel, args: Sequence) -> list:
    """Check the inputs as a call would and allocate outputs of the shapes a call returns."""
    binder = kernel._binder
    if len(args) != len(binder.inputs):
        return binder.bind(args)[1]  # raises the arity error
    sizes: dict[str, Any] = {}
    device = None
    for i, a in zip(binder.inputs, args):
        p = kernel.params[i]
        if isinstance(p, TensorParam):
            binder._check_tensor(p, a, sizes, address=False)  # a traced tensor has no address
            device = device or a.device
    device = device or torch.device(binder.device_type)
    for k, name in binder._size_scalars:  # sizes given by scalar arguments
        sizes[name] = args[k]
    return [torch.empty(kernel.params[i].storage_shape(shape), dtype=kernel.params[i].torch_dtype,
                        device=device)
            for i, shape in zip(kernel.out_idx, binder.output_shapes(sizes))]


def _ident(name: str, i: int) -> str:
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return clean if clean and not clean[0].isdigit() and clean != "self" else f"arg{i}"


def _scalar_type(p: ScalarParam) -> str:
    if p.dtype == "bool":
        return "bool"
    if p.dtype.startswith(("int", "uint")):
        return "SymInt"
    return "float"


__all__ = ["call", "op_name", "register", "schema", "writes"]
