"""A compiled kernel's parameters and the checks applied to the arguments of every call."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
import tvm
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..errors import KernelArgumentError, KernelArgumentTypeError
from ..ops.loops import elem_bytes
from ..utils.dtype import elements_per_byte, packed_torch_dtypes, torch_dtype
from .packed_view import logical_view


@dataclass
class TensorParam:
    """A tensor parameter: ``shape`` holds ints, ``str`` names of size variables, or ``None``
    for a size given by an expression (checked by the kernel itself).  ``strides`` is ``None``
    for a row-major tensor, else the declared strides (``T.StridedTensor``) in the same form.
    Shape and strides count elements of ``dtype``; a sub-byte ``dtype`` packs ``pack``
    elements per byte of the torch tensor (its last dimension is ``pack`` times shorter, its
    other strides ``pack`` times smaller)."""

    name: str
    dtype: str
    shape: list
    torch_dtype: Any
    dim_types: list = field(default_factory=list)  # the integer type of each size: "int32", ...
    strides: list | None = None
    stride_types: list = field(default_factory=list)
    pack: int = 1
    #: for each size given by an expression, its Python arithmetic over size-variable names
    #: (``"m * 2 + 1"``), else ``None``: what sizes an output allocated by the call
    shape_exprs: list | None = None

    def storage_shape(self, shape: Sequence[int]) -> list[int]:
        """The shape of the torch tensor holding a tensor of logical ``shape``."""
        shape = list(shape)
        if self.pack > 1 and shape:
            shape[-1] //= self.pack
        return shape

    @property
    def gpu_alignment(self) -> int:
        """The address alignment, in bytes, a GPU kernel relies on for this tensor: 16
        (``GPU_ALIGNMENT``) when its strides are constants with the innermost 1 (row-major
        tensors included), where the kernel may prove a wide access, ``cp.async`` or TMA box
        aligned to the start; one element when a declared stride is a variable or the innermost
        is not 1, since no offset from the start is then known aligned and every access is
        narrow."""
        if self.strides and not (self.strides[-1] == 1 and
                                 all(isinstance(s, int) for s in self.strides)):
            return elem_bytes(self.dtype)
        return GPU_ALIGNMENT

    @property
    def max_elements(self) -> int:
        """How many elements the kernel's index arithmetic can address in this tensor: offsets
        are 64-bit only when every size is int64 (see ``T.Tensor``)."""
        wide = self.dim_types and all(t == "int64" for t in self.dim_types)
        return 2**63 - 1 if wide else 2**31 - 1


@dataclass
class ScalarParam:
    """A scalar parameter; ``dtype`` is its element type, or ``"handle"`` for a ``T.ptr``
    (an address: called with a tensor, which passes its data pointer, or an integer)."""

    name: str
    dtype: str


POINTER = "handle"

#: The address alignment a GPU kernel relies on for a tensor parameter of constant strides, the
#: innermost 1: 16 bytes, the width of its widest vector access and of a ``cp.async``, and the
#: alignment TMA requires.  (The CPU backend assumes element alignment only: see
#: ``tilelang/transform/param_alignment.py``.)
GPU_ALIGNMENT = 16


def _sizes(exprs) -> list:
    """Declared sizes or strides as ints, size-variable names, or None for expressions."""
    out = []
    for s in exprs:
        if isinstance(s, tirx.IntImm):
            out.append(int(s))
        elif isinstance(s, tirx.Var):
            out.append(s.name)
        else:
            out.append(None)
    return out


_ARITH = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//", tirx.FloorMod: "%"}


def size_expr(e) -> str | None:
    """``e`` (integer arithmetic over size variables) as Python arithmetic over their names,
    or ``None`` for anything else."""
    if isinstance(e, tirx.IntImm):
        return str(int(e))
    if isinstance(e, tirx.Var):
        return e.name
    if isinstance(e, tirx.Cast) and "int" in str(e.dtype):
        return size_expr(e.value)
    op = _ARITH.get(type(e))
    fn = {tirx.Min: "min", tirx.Max: "max"}.get(type(e))
    if op is None and fn is None:
        return None
    a, b = size_expr(e.a), size_expr(e.b)
    if a is None or b is None:
        return None
    return f"({a} {op} {b})" if op else f"{fn}({a}, {b})"


def expr_names(expr: str) -> set[str]:
    """The size-variable names a ``size_expr`` text reads."""
    return set(compile(expr, "<size>", "eval").co_names) - {"min", "max"}


def eval_size(expr: str, sizes: dict) -> int:
    """The value of a ``size_expr`` text with the bound ``sizes``."""
    return int(eval(expr, {"__builtins__": {}, "min": min, "max": max}, sizes))  # noqa: S307


def params_of(func: tirx.PrimFunc) -> list:
    out = []
    for p in func.params:
        if is_buffer_var(p):
            strides = _sizes(p.strides) if len(p.strides) else None
            pack = elements_per_byte(p.dtype)
            if pack > 1 and not len(p.shape):
                raise KernelArgumentError(
                    f"parameter {p.name!r}: a {p.dtype} tensor needs at least one dimension "
                    f"(its last dimension packs {pack} elements per byte)")
            shape = _sizes(p.shape)
            exprs = [size_expr(e) if d is None else None for d, e in zip(shape, p.shape)] \
                if None in shape else None
            out.append(TensorParam(p.name, p.dtype, shape, torch_dtype(p.dtype),
                                   [str(s.ty) for s in p.shape], strides,
                                   [str(s.ty) for s in p.strides], pack, exprs))
        elif isinstance(p.ty, tvm.ir.PointerType):
            out.append(ScalarParam(p.name, POINTER))
        else:
            out.append(ScalarParam(p.name, str(p.ty)))
    return out


def fmt(shape: Sequence) -> str:
    return "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"


def _expectation(k: int, param) -> tuple:
    """What a call's fast path (``tilelang/jit/launcher.py``) compares the ``k``-th input
    against, computed once per kernel: ``(k, is_tensor, torch dtype, static shape, scalar kind,
    low, high, param)``.  An argument the fast path does not accept takes the full check
    (``ArgumentBinder.bind``), which raises the precise error (or accepts what the fast path
    leaves to it: numpy arrays, numpy scalars, ...)."""
    if isinstance(param, TensorParam):
        shape = None  # no torch.Size equals None: size variables always take the full check
        if all(isinstance(s, int) for s in param.shape) and \
                _product(param.shape) <= param.max_elements and param.pack == 1 and \
                (param.strides is None or param.strides == _row_major(param.shape)):
            shape = tuple(param.shape)  # packed or strided tensors: the full check only
        return (k, True, param.torch_dtype, shape, None, None, None, param)
    kind = lo = hi = None
    if param.dtype == POINTER:  # converted to an address by the binder
        pass
    elif param.dtype == "bool":
        kind = "bool"
    elif param.dtype.startswith(("int", "uint")):
        info = np.iinfo(param.dtype)
        kind, lo, hi = "int", int(info.min), int(info.max)
    else:
        try:
            fmax = _float_max(param.dtype)
            kind, lo, hi = "float", -fmax, fmax
        except (TypeError, ValueError, AttributeError):  # no known range: full check only
            pass
    return (k, False, None, None, kind, lo, hi, param)


class ArgumentBinder:
    """Checks the inputs of a call, binds size variables, allocates the outputs.

    ``bind`` runs every check (type, dtype, rank, shape, size-variable agreement and range,
    element count, device, contiguity, address alignment on the GPU, scalar ranges); what
    each parameter expects is computed once here, for the launcher that accepts a call
    passing them in a few comparisons per argument and hands any other call to ``bind``.
    """

    def __init__(self, kernel_name: str, params: list, out_idx: list[int], device_type: str):
        self.kernel_name = kernel_name
        self.params = params
        self.out_idx = out_idx
        self.inputs = [i for i in range(len(params)) if i not in out_idx]
        self.device_type = device_type
        if len(set(out_idx)) != len(out_idx):
            twice = next(params[i].name for i in out_idx if out_idx.count(i) > 1)
            raise KernelArgumentError(f"{kernel_name}: out_idx names parameter {twice!r} twice")
        for i in out_idx:
            p = params[i]
            if not isinstance(p, TensorParam):
                raise KernelArgumentError(f"{kernel_name}: out_idx names scalar parameter "
                                          f"{p.name!r}; only tensors can be outputs")
            if any(s is None and (p.shape_exprs is None or p.shape_exprs[d] is None)
                   for d, s in enumerate(p.shape)):
                raise KernelArgumentError(
                    f"{kernel_name}: output {p.name!r} has shape {fmt(p.shape)} with a size "
                    "that is not integer arithmetic (+ - * // % min max) over size variables")
            if p.strides is not None and p.strides != _row_major(p.shape):
                raise KernelArgumentError(
                    f"{kernel_name}: output {p.name!r} has strides {fmt(p.strides)}, which "
                    "are not those of a row-major tensor of its shape; the call allocates "
                    "outputs row-major, so pass a strided tensor as an argument instead")
            if p.pack > 1 and isinstance(p.shape[-1], int) and p.shape[-1] % p.pack:
                raise KernelArgumentError(
                    f"{kernel_name}: output {p.name!r} of {p.dtype} has a last dimension of "
                    f"{p.shape[-1]}, not a multiple of the {p.pack} elements a byte packs")
        known = {s for i in self.inputs if isinstance(params[i], TensorParam)
                 for s in params[i].shape if isinstance(s, str)}
        #: integer scalar inputs whose values sizes may use: (argument position, name)
        self._size_scalars = [(k, params[i].name) for k, i in enumerate(self.inputs)
                              if isinstance(params[i], ScalarParam)
                              and params[i].dtype.startswith(("int", "uint"))]
        scalar_names = {name for _, name in self._size_scalars}
        known |= scalar_names
        #: whether an output's size depends on a scalar's value (the launcher's fast path,
        #: which keys on tensor shapes only, must then leave every call to ``bind``)
        self.scalar_sized_outputs = False
        for i in out_idx:
            p = params[i]
            used = {s for s in p.shape if isinstance(s, str)}
            for e in p.shape_exprs or []:
                used |= expr_names(e) if e is not None else set()
            self.scalar_sized_outputs |= bool(used & scalar_names)
            for s in sorted(used - known):
                raise KernelArgumentError(
                    f"{kernel_name}: size {s!r} of output {p.name!r} appears in no input "
                    "tensor or integer scalar, so it cannot be bound at call time")
        self._plan = [_expectation(k, params[i]) for k, i in enumerate(self.inputs)]
        self._outputs = [(params[i].torch_dtype, tuple(params[i].shape),
                          all(isinstance(s, int) for s in params[i].shape),
                          params[i].shape_exprs) for i in out_idx]
        # where each output goes among the arguments, inserted in ascending position
        self._insert = sorted((i, j) for j, i in enumerate(out_idx))
        self._cuda = device_type == "cuda"
        #: whether a call's arguments can go to the kernel as torch gives them (no packed
        #: sub-byte tensor needs a view of its logical element type)
        self.direct = not any(isinstance(p, TensorParam) and p.pack > 1 for p in params)
        self._devices: dict[int, torch.device] = {}  # get_device() index -> torch.device

    def bind(self, args: Sequence) -> tuple[list, list, bool]:
        """All arguments in parameter order, the outputs, and whether inputs were numpy."""
        if len(args) != len(self._plan):
            names = ", ".join(self.params[i].name for i in self.inputs)
            raise KernelArgumentError(
                f"{self.kernel_name} takes {len(self.inputs)} arguments ({names}), got {len(args)}")
        values = None  # a copy of args, made when an argument is converted
        sizes: dict[str, int] = {}
        was_numpy = False
        cuda = self._cuda
        index = None  # the device index (get_device()) of the tensors seen so far
        computed = []  # (parameter, shape) of inputs with dimensions computed from sizes
        for (k, tensor, _dtype, _shape, _kind, _lo, _hi, p), a in zip(self._plan, args):
            if tensor:
                if isinstance(a, np.ndarray):
                    was_numpy = True
                    a = self._numpy(p, a)
                    if values is None:
                        values = list(args)
                    values[k] = a
                view = self._check_tensor(p, a, sizes)
                if p.shape_exprs is not None:
                    computed.append((p, logical_layout(p.dtype, a)[0]))
                if view is not a:
                    if values is None:
                        values = list(args)
                    values[k] = view
                if cuda:
                    d = a.get_device()
                    if index is None:
                        index = d
                    elif d != index:
                        raise KernelArgumentError(
                            f"{self.kernel_name}: parameter {p.name!r} is on {a.device}, but "
                            f"earlier arguments are on cuda:{index}; all tensors must be on one "
                            "device")
                continue
            if values is None:
                values = list(args)
            values[k] = self._scalar(p, a)
        full = list(args) if values is None else values
        device = self._device(index)
        if self._size_scalars:
            for k, name in self._size_scalars:
                sizes[name] = int(full[k])
        for p, shape in computed:
            self._check_computed(p, shape, sizes)
        outs = self.output_shapes(sizes)
        passed = list(outs)
        for j, i in enumerate(self.out_idx):
            p, shape = self.params[i], outs[j]
            if p.pack > 1 and shape[-1] % p.pack:
                raise KernelArgumentError(
                    f"{self.kernel_name}: output {p.name!r} of {p.dtype} would have a last "
                    f"dimension of {shape[-1]}, not a multiple of the {p.pack} elements a "
                    "byte packs")
            outs[j] = torch.empty(p.storage_shape(shape), dtype=p.torch_dtype, device=device)
            passed[j] = outs[j] if p.pack == 1 else \
                logical_view(outs[j], p.dtype, shape, _row_major(shape))
            if p.pack == 1 and outs[j].numel() == 0:  # row-major strides, as for an input
                passed[j] = outs[j].as_strided(outs[j].shape, _row_major(list(shape)))
        for pos, j in self._insert:
            full.insert(pos, passed[j])
        return full, outs, was_numpy

    def output_shapes(self, sizes: dict) -> list:
        """The outputs' shapes (logical elements) for the size values ``sizes`` (name ->
        value, bound from the inputs' shapes and the size scalars)."""
        shapes = []
        for dtype, shape, static, exprs in self._outputs:
            if not static:
                shape = [s if isinstance(s, int) else sizes[s] if isinstance(s, str)
                         else eval_size(exprs[d], sizes) for d, s in enumerate(shape)]
                if any(s < 0 for s in shape):
                    raise KernelArgumentError(
                        f"{self.kernel_name}: an output's shape evaluates to {shape} for the "
                        f"sizes {sizes}: a negative size")
            shapes.append(shape)
        return shapes

    def _device(self, index: int | None) -> torch.device:
        """The device outputs are allocated on: the inputs' (``get_device()`` index), else the
        kernel's device type (the current CUDA device)."""
        device = self._devices.get(index)
        if device is None:
            if index is None or index < 0:
                device = torch.device(self.device_type)
            else:
                device = torch.device(self.device_type, index)
            self._devices[index] = device
        return device

    def _scalar(self, p: ScalarParam, a: Any):
        """The value passed for scalar ``p``: ``a`` if the parameter's type holds it exactly (an
        integer in range, a bool) or, for floats, without overflowing to infinity."""
        if p.dtype == POINTER:
            return self._pointer(p, a)
        if isinstance(a, torch.Tensor) and a.numel() == 1:
            a = a.item()
        expects = f"{self.kernel_name}: parameter {p.name!r} expects"
        if p.dtype == "bool":
            if isinstance(a, (bool, np.bool_, int, np.integer)) and a in (0, 1):
                return bool(a)
            raise KernelArgumentError(f"{expects} a bool, got {a!r}")
        numbers = (int, float, np.integer, np.floating)
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers):
            raise KernelArgumentError(f"{expects} {_a(p.dtype)} scalar, got {type(a).__name__}")
        if p.dtype.startswith(("int", "uint")):
            if not isinstance(a, (int, np.integer)):
                raise KernelArgumentError(f"{expects} an integer ({p.dtype}), got {a!r}")
            info = np.iinfo(p.dtype)
            a = int(a)
            if not info.min <= a <= info.max:
                raise KernelArgumentError(
                    f"{expects} {_a(p.dtype)} in [{info.min}, {info.max}], got {a}")
            # The packed API carries integers as int64: a uint64 past 2**63-1 travels as its
            # two's-complement bit pattern, which the kernel reads back as the same uint64.
            return a - 2**64 if a > np.iinfo(np.int64).max else a
        return self._float(p, a, expects)

    def _pointer(self, p: ScalarParam, a: Any) -> ctypes.c_void_p:
        """The address passed for pointer ``p``: a tensor's data pointer (the tensor on the
        kernel's device type), or an integer address in [0, 2**64)."""
        name = f"{self.kernel_name}: parameter {p.name!r}"
        if isinstance(a, torch.Tensor):
            if a.device.type != self.device_type:
                raise KernelArgumentError(f"{name} (a T.ptr) must point into {self.device_type} "
                                          f"memory, got a tensor on {a.device}")
            return ctypes.c_void_p(a.data_ptr())
        if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) \
                and 0 <= int(a) < 2**64:
            return ctypes.c_void_p(int(a))
        raise KernelArgumentTypeError(f"{name} (a T.ptr) expects a torch.Tensor or an integer "
                                      f"address in [0, 2**64), got {a!r}")

    def _float(self, p: ScalarParam, a: Any, expects: str) -> float:
        """``a`` as a Python float; a finite value that the parameter's float type would turn
        into infinity (or NaN) is refused.  NaN and infinities themselves pass through."""
        try:
            value = float(a)
        except OverflowError:
            value = None
        if value is not None and not np.isfinite(value):
            return value
        if value is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                narrowed = np.array(value).astype(_numpy_dtype(p.dtype)).item()
            if np.isfinite(float(narrowed)):
                return value
        raise KernelArgumentError(
            f"{expects} {_a(p.dtype)} (finite values up to +-{_float_max(p.dtype):g}), got {a!r}, "
            "which overflows it")

    def _numpy(self, p: TensorParam, a: np.ndarray) -> torch.Tensor:
        """A torch view of numpy array ``a`` that shares its memory.  A kernel may write any
        tensor it is given, so an array the kernel could only see through a copy (not
        C-contiguous, read-only) is refused rather than copied: the write would be lost."""
        name = f"{self.kernel_name}: parameter {p.name!r}"
        if not a.flags.c_contiguous:
            raise KernelArgumentError(
                f"{name} must be a C-contiguous (row-major) array; got strides {a.strides}; "
                "pass np.ascontiguousarray(...)")
        if not a.flags.writeable:
            raise KernelArgumentError(
                f"{name} is a read-only numpy array, which the kernel may write; pass a "
                "writeable copy (a.copy())")
        try:
            return torch.from_numpy(a)
        except TypeError as e:
            raise KernelArgumentError(f"{name} expects {p.dtype}; torch cannot view the numpy "
                                      f"array of dtype {a.dtype}: {e}") from None

    def _check_tensor(self, p: TensorParam, t: Any, sizes: dict, address: bool = True) -> Any:
        """Check tensor argument ``t`` of ``p``, binding its size (and stride) variables in
        ``sizes``; return what the kernel is given: ``t`` itself, a view of it with the
        declared stride of a dimension of extent 1 (whose stride means nothing), or for a
        packed sub-byte tensor a view of its logical element type.  ``address=False`` leaves
        out the address check, for the fake tensors of ``torch.compile``, which have none."""
        name = self.kernel_name
        if not isinstance(t, torch.Tensor):
            raise KernelArgumentError(f"{name}: parameter {p.name!r} expects a torch.Tensor of "
                                      f"{p.dtype} {fmt(p.shape)}, got {type(t).__name__}")
        if p.pack > 1:
            self._check_packed(p, t)
        elif t.dtype != p.torch_dtype:
            raise KernelArgumentError(f"{name}: parameter {p.name!r} expects dtype {p.dtype}, "
                                      f"got {str(t.dtype).replace('torch.', '')}")
        if t.dim() != len(p.shape):
            raise KernelArgumentError(f"{name}: parameter {p.name!r} expects {len(p.shape)} dims "
                                      f"{fmt(p.shape)}, got shape {tuple(t.shape)}")
        shape, strides = logical_layout(p.dtype, t)
        what = "shape" if p.pack == 1 else f"shape (in {p.dtype} elements)"
        for d, (want, got) in enumerate(zip(p.shape, shape)):
            if isinstance(want, int):
                if want != got:
                    raise KernelArgumentError(
                        f"{name}: parameter {p.name!r} expects {what} {fmt(p.shape)}, got "
                        f"{tuple(shape)} (dim {d} is {got}, expected {want})"
                        + self._packed_note(p, t))
            elif isinstance(want, str):
                self._bind_size(p, want, got, f"dim {d}", p.dim_types[d], sizes)
        if p.strides is not None:
            fixed = False
            for d, (want, got) in enumerate(zip(p.strides, strides)):
                if isinstance(want, int) and want != got:
                    if shape[d] <= 1:  # any stride walks a dimension of one element
                        strides[d], fixed = want, True
                        continue
                    raise KernelArgumentError(
                        f"{name}: parameter {p.name!r} expects strides {fmt(p.strides)}"
                        f"{'' if p.pack == 1 else f' (in {p.dtype} elements)'}, got "
                        f"{tuple(strides)} (stride {d} is {got}, expected {want})")
                if isinstance(want, str):
                    self._bind_size(p, want, got, f"stride {d}", p.stride_types[d], sizes)
            if fixed and p.pack == 1:
                t = t.as_strided(t.shape, strides, t.storage_offset())
        count = _product(shape) if p.strides is None else _span(shape, strides)
        if count > p.max_elements:
            what = "has" if p.strides is None else "spans"
            raise KernelArgumentError(
                f"{name}: parameter {p.name!r} {what} {count} elements, more than its 32-bit "
                f"index arithmetic can address ({p.max_elements}); declare its sizes "
                "T.dynamic(..., \"int64\") so that offsets are computed in 64 bits")
        if t.device.type != self.device_type:
            raise KernelArgumentError(f"{name}: parameter {p.name!r} must be on the "
                                      f"{self.device_type} device, got a tensor on {t.device}")
        if p.strides is None and not t.is_contiguous():
            raise KernelArgumentError(
                f"{name}: parameter {p.name!r} must be contiguous (row-major); got strides "
                f"{t.stride()}; call .contiguous(), or declare it T.StridedTensor")
        if address and self.device_type != "cpu" and t.data_ptr() % p.gpu_alignment:
            raise KernelArgumentError(
                f"{name}: parameter {p.name!r} must start at a {p.gpu_alignment}-byte-aligned "
                f"address (its wide loads and stores, cp.async and TMA copies need it); got "
                f"address {t.data_ptr():#x}, a view at storage offset {t.storage_offset()}; "
                "pass a copy (.clone()) or a view that starts on such a boundary")
        if p.pack > 1:
            return logical_view(t, p.dtype, shape, strides)
        if p.strides is None and t.numel() == 0:
            # torch gives an empty tensor arbitrary strides; TVM checks the row-major ones
            return t.as_strided(t.shape, _row_major(shape) or [0] * len(shape))
        return t

    def _check_computed(self, p: TensorParam, shape: Sequence[int], sizes: dict) -> None:
        """The dimensions of ``p`` given by an expression of bound sizes (``m * 2``) must
        equal it (those of sizes bound only inside the kernel are checked there)."""
        for d, e in enumerate(p.shape_exprs):
            if e is None or not expr_names(e) <= sizes.keys():
                continue
            want = eval_size(e, sizes)
            if want != shape[d]:
                dims = [str(s) if s is not None else _unwrapped(p.shape_exprs[i])
                        for i, s in enumerate(p.shape)]
                declared = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
                bound = ", ".join(f"{n} = {sizes[n]}" for n in sorted(expr_names(e)))
                raise KernelArgumentError(
                    f"{self.kernel_name}: parameter {p.name!r} expects shape {declared}, got "
                    f"{tuple(shape)} (dim {d} is {shape[d]}, expected "
                    f"{_unwrapped(e)} = {want} with {bound})")

    def _check_packed(self, p: TensorParam, t: torch.Tensor) -> None:
        """A tensor holding packed sub-byte elements: bytes, the last dimension contiguous."""
        name = f"{self.kernel_name}: parameter {p.name!r}"
        allowed = packed_torch_dtypes(p.dtype)
        if t.dtype not in allowed:
            names = ", ".join(str(d).replace("torch.", "") for d in allowed)
            raise KernelArgumentError(
                f"{name} holds {p.dtype} elements, {p.pack} packed per byte; it expects a "
                f"tensor of {names}, got {str(t.dtype).replace('torch.', '')}")
        if t.dim() == 0:
            raise KernelArgumentError(f"{name} expects {len(p.shape)} dims {fmt(p.shape)}, got "
                                      "a 0-d tensor")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise KernelArgumentError(
                f"{name} holds packed {p.dtype} elements: its last dimension must be "
                f"contiguous (stride 1), got strides {t.stride()}")

    @staticmethod
    def _packed_note(p: TensorParam, t: torch.Tensor) -> str:
        if p.pack == 1:
            return ""
        return (f"; the {str(t.dtype).replace('torch.', '')} tensor of shape {tuple(t.shape)} "
                f"packs {p.pack} {p.dtype} elements per byte of its last dimension")

    def _bind_size(self, p: TensorParam, var: str, got: int, where: str, ty: str,
                   sizes: dict) -> None:
        """Bind size (or stride) variable ``var`` to ``got``, or raise if it does not fit its
        type or an earlier argument bound it to another value."""
        name = self.kernel_name
        limit = np.iinfo(ty).max
        if got > limit:
            raise KernelArgumentError(
                f"{name}: parameter {p.name!r} has {var} = {got} in {where}, which does "
                f"not fit {var}'s type {ty} (at most {limit}); declare it "
                f'T.dynamic("{var}", "int64")')
        bound = sizes.setdefault(var, got)
        if bound != got:
            raise KernelArgumentError(
                f"{name}: parameter {p.name!r} has {var} = {got} in {where}, but an "
                f"earlier argument bound {var} = {bound}")


def logical_layout(dtype: str, t: Any) -> tuple[list, list | None]:
    """The shape and strides (in elements of ``dtype``) of the tensor argument ``t`` holds:
    its own, or for a sub-byte ``dtype`` those of the elements its bytes pack (the last
    dimension ``pack`` times longer, the other strides ``pack`` times larger).  ``t`` may be a
    placeholder without strides (``T.Tensor(shape, dtype)``): strides are then None."""
    shape = [int(s) for s in t.shape]
    stride = getattr(t, "stride", None)
    strides = list(stride()) if callable(stride) else None
    pack = elements_per_byte(dtype)
    is_packed = isinstance(t, torch.Tensor) and t.element_size() == 1 and pack > 1 and shape
    if is_packed:
        shape[-1] *= pack
        strides = [s * pack for s in strides[:-1]] + [1]
    return shape, strides


def _row_major(shape: Sequence) -> list | None:
    """The strides of a row-major tensor of ``shape`` (None if a size is not a constant)."""
    if not all(isinstance(s, int) for s in shape):
        return None
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return out[::-1]


def _span(shape: Sequence[int], strides: Sequence[int]) -> int:
    """How many elements a tensor of ``shape`` and ``strides`` reaches, from its first."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides))


def _product(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a float element type (``ml_dtypes`` for bfloat16 and float8)."""
    import ml_dtypes

    name = {"float8_e4m3": "float8_e4m3fn"}.get(dtype, dtype)
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def _float_max(dtype: str) -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(_numpy_dtype(dtype)).max)


def _a(dtype: str) -> str:
    """``dtype`` with its indefinite article ("an int8", "a float16")."""
    return ("an " if dtype.startswith("int") else "a ") + dtype


def _unwrapped(expr: str) -> str:
    """``expr`` without one pair of parentheses around the whole of it (``"((n * 2) + 1)"``
    is ``"(n * 2) + 1"``)."""
    depth = 0
    for i, ch in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(expr) - 1:
            return expr  # the first parenthesis closes before the end
    return expr[1:-1] if expr.startswith("(") and expr.endswith(")") else expr
