"""A kernel's call path: a Python function generated once per kernel that accepts the common call
in a few comparisons per argument, and hands every other call to :class:`ArgumentBinder`.

The generated ``launch(fn, args)`` unrolls, for each input, the test the call must pass: a
tensor of the parameter's torch dtype, of the signature's shape, on the kernel's device type and
contiguous (all on one CUDA device, each at a 16-byte-aligned address); a Python scalar of the
parameter's kind within its range.
Tensors with declared strides (``T.StridedTensor``) take the binder unless those are the
row-major strides of a static shape; a kernel with a packed sub-byte tensor parameter
(``T.float4_e2m1fn`` ...) always takes the binder, which passes a view of the logical type.
The signature holds the static shapes; for a kernel with size variables it is the last one the
binder validated (with the output shapes bound from it), replaced as one tuple so that a
concurrent call never pairs input shapes with another signature's output shapes.  When every
test passes, the outputs are allocated and ``fn`` is called; otherwise the binder runs all
checks and raises the precise ``KernelArgumentError`` (or converts what it accepts: numpy
arrays, numpy scalars, one-element tensors for scalars, ...).

A CUDA kernel whose tensors all have static shapes tests less in Python: a tensor at a
16-byte-aligned address, and the scalars' ranges.  Its host code checks each tensor's dtype,
rank, shape, strides and device, and that all are on one device, before it launches anything;
the ``TypeError`` or ``ValueError`` it raises sends the call to the binder, which names what
was wrong.  (CPU kernels run in the host function itself, so their calls keep every test.)
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import OutOfBoundsError
from .params import ArgumentBinder, _row_major

_INT64_MAX = 2**63 - 1  # the packed API carries integers as int64


class _Devices(dict):
    """``get_device()`` index -> the ``torch.device`` outputs are allocated on."""

    def __init__(self, device_type: str):
        super().__init__()
        self.device_type = device_type

    def __missing__(self, index: int) -> torch.device:
        device = torch.device(self.device_type, index)
        self[index] = device
        return device


def _result(outs: list, was_numpy: bool = False) -> Any:
    """What a call returns: None, the one output, or a tuple of them."""
    if was_numpy:
        outs = [o.numpy() for o in outs]
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


def _like_source(plan: list, output: tuple) -> tuple[int, bool] | None:
    """An input tensor ``k`` of the output's dtype and shape (the same constants and size
    variables) whose ``empty_like`` is the output, and whether it gives row-major strides by
    itself: it copies the strides of a contiguous input, which are the row-major ones unless a
    size is 0 or 1 (then ``memory_format=torch.contiguous_format`` is needed)."""
    dtype, shape, _static, _exprs = output
    if None in shape:  # a size given by an expression: evaluated by the binder
        return None
    for (k, tensor, in_dtype, _s, _kind, _lo, _hi, p) in plan:
        if tensor and in_dtype is dtype and list(p.shape) == list(shape) and \
                p.strides is None and p.pack == 1:
            exact = all(isinstance(s, int) and s > 1 for s in shape)
            return k, exact
    return None


def make_launcher(binder: ArgumentBinder,
                  with_grad: Callable[[tuple], Any] | None = None) -> Callable[[Callable, tuple], Any]:
    """``launch(fn, args)``: check ``args`` as ``binder`` would, allocate the outputs, call
    ``fn`` with all arguments in parameter order, and return the outputs.  A call with a tensor
    that requires grad, while grad mode is on, is ``with_grad(args)``'s."""
    plan = binder._plan
    n_in = len(plan)
    cuda = binder.device_type == "cuda"
    tensors = [k for (k, tensor, *_rest) in plan if tensor]
    dynamic = any(expect[3] is None for expect in plan if expect[1]) or \
        any(not static for (_d, _s, static, _e) in binder._outputs)
    ns: dict[str, Any] = {"Tensor": torch.Tensor, "empty": torch.empty,
                          "empty_like": torch.empty_like, "contiguous": torch.contiguous_format,
                          "OutOfBoundsError": OutOfBoundsError, "devices": _Devices(binder.device_type)}
    # the signature: the shape of each input tensor (by input position; None for scalars and for
    # sizes not yet seen), then the shape of each output
    initial = tuple(expect[3] if expect[1] else None for expect in plan) + \
        tuple(shape if static else None for (_d, shape, static, _e) in binder._outputs)
    state = [initial]
    ns["state"] = state
    # A CUDA kernel of static shapes leaves to its host code the checks it makes itself (dtype,
    # rank, shape, strides, device and one device for all), before anything is launched: a
    # call those refuse is retried through the binder, which names what was wrong.
    host_checked = cuda and bool(tensors) and not dynamic and binder.direct and \
        not binder.scalar_sized_outputs

    tests = []
    for (k, tensor, dtype, _shape, kind, lo, hi, p) in plan:
        a = f"a{k}"
        if tensor and p.strides is not None and p.strides != _row_major(p.shape):
            tests.append("False")  # declared strides are checked (and bound) by the binder
        elif tensor:
            # a tensor with no elements takes the binder, which gives it the strides TVM checks
            empty = "" if all(isinstance(d, int) and d > 0 for d in p.shape) else \
                f" and {a}.numel()"
            aligned = f" and not {a}.data_ptr() % {p.gpu_alignment}" if cuda else ""
            checks = ""
            if not host_checked:
                ns[f"dt{k}"] = dtype
                where = f"{a}.is_cuda" if cuda else f"{a}.is_cpu"
                checks = (f" and {a}.dtype is dt{k} and {a}.shape == sig[{k}] and {where} and "
                          f"{a}.is_contiguous()")
            guard = f" and not (grad and {a}.requires_grad)" if with_grad is not None else ""
            tests.append(f"isinstance({a}, Tensor){guard}{checks}{empty}{aligned}")
        elif kind == "bool":
            tests.append(f"type({a}) is bool")
        elif kind in ("int", "float"):
            ns[f"lo{k}"], ns[f"hi{k}"] = lo, (min(hi, _INT64_MAX) if kind == "int" else hi)
            tests.append(f"type({a}) is {kind} and lo{k} <= {a} <= hi{k}")
        else:  # no range known: the binder decides
            tests.append("False")
    outs = []
    for j, (dtype, _shape, _static, _exprs) in enumerate(binder._outputs):
        ns[f"odt{j}"] = dtype
        outs.append(f"o{j}")
    order = [f"a{k}" for k in range(n_in)]
    for pos, j in binder._insert:
        order.insert(pos, f"o{j}")

    lines = ["def launch(fn, args):"]
    lines.append(f"    if len(args) == {n_in}:")
    if n_in:
        lines.append(f"        {', '.join(f'a{k}' for k in range(n_in))}, = args")
    lines.append("        sig = state[0]")
    if with_grad is not None and tensors:
        ns["grad_enabled"] = torch.is_grad_enabled
        lines.append("        grad = grad_enabled()")
    condition = "(" + "\n                and ".join(tests or ["True"]) + ")"
    if cuda:  # data_ptr() raises for a tensor without storage (sparse, ...): the binder's
        lines.append("        try:")
        lines.append(f"            ok = {condition}")
        lines.append("        except RuntimeError:")
        lines.append("            ok = False")
        lines.append("        if ok:")
    else:
        lines.append(f"        if {condition}:")
    body = "            "
    if host_checked:
        device = f"a{tensors[0]}.device"  # elsewhere than the GPU: refused by the host code
    elif cuda and tensors:
        first = tensors[0]
        lines.append(f"{body}dev = a{first}.get_device()")
        same = [f"a{k}.get_device() == dev" for k in tensors[1:]]
        if same:
            lines.append(f"{body}if {' and '.join(same)}:")
            body += "    "
        device = "devices[dev]"
    else:
        ns["device"] = torch.device(binder.device_type)
        device = "device"
    for j in range(len(outs)):
        alloc = f"empty(*sig[{n_in + j}], dtype=odt{j}, device={device})"
        like = _like_source(plan, binder._outputs[j])
        if like is not None:  # cheaper: no shape, dtype or device to parse
            k, exact = like
            keep = "" if exact else ", memory_format=contiguous"
            alloc = f"(empty_like(a{k}{keep}) if type(a{k}) is Tensor else {alloc})"
        lines.append(f"{body}o{j} = {alloc}")
    lines.append(f"{body}try:")
    lines.append(f"{body}    fn({', '.join(order)})")
    lines.append(f"{body}except OutOfBoundsError as err:  # raised inside the kernel")
    lines.append(f"{body}    raise OutOfBoundsError(str(err)) from None")
    if host_checked:  # the host code's argument checks, which run before the launch
        lines.append(f"{body}except (TypeError, ValueError):")
        lines.append(f"{body}    return checked(fn, args)")
    ret = "None" if not outs else outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
    lines.append(f"{body}return {ret}")
    lines.append("    return checked(fn, args)")
    empty_out = any(static and 0 in shape for (_d, shape, static, _e) in binder._outputs)
    if not binder.direct or binder.scalar_sized_outputs or empty_out:
        # packed sub-byte tensors are passed as views, outputs sized by a scalar's value
        # need it evaluated, and an empty output needs its strides set: always the binder
        lines = ["def launch(fn, args):", "    return checked(fn, args)"]

    def checked(fn: Callable, args: tuple) -> Any:
        """The call through the binder: every check, then (for size variables) the signature
        this call validated becomes the one the fast path compares against."""
        if with_grad is not None and torch.is_grad_enabled() and \
                any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return with_grad(args)
        full, outs_, was_numpy = binder.bind(args)
        if dynamic:
            sig = tuple(tuple(full_arg.shape) if expect[1] else None
                        for expect, full_arg in zip(plan, (full[i] for i in binder.inputs))) + \
                tuple(tuple(o.shape) for o in outs_)
            state[0] = sig
        try:
            fn(*full)
        except OutOfBoundsError as err:
            raise OutOfBoundsError(str(err)) from None
        return _result(outs_, was_numpy)

    ns["checked"] = checked
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<tilelang launcher {binder.kernel_name}>", "exec"), ns)
    launch = ns["launch"]
    launch.source = source
    return launch


__all__ = ["make_launcher"]
