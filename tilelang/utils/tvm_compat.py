"""``expr.dtype`` on TVM 0.27 scalar expressions, and other behaviour of the TVM that the public
TileLang ships (see :func:`install`).

Programs written for the public TileLang read ``x.dtype`` of a scalar expression (a loaded
element, a variable, ``a + b``) and compare it with a dtype (``val.dtype == T.uint8``).  TVM
0.27 keeps an expression's type in ``.ty`` (a ``PrimType``) and has ``.dtype`` only on buffer
variables; this adds it for every expression of a scalar type, as a dtype object."""

from __future__ import annotations

import tvm

from .dtype import canonical_dtype


def _scalar_dtype(expr):
    ty = expr.ty
    if not isinstance(ty, tvm.ir.PrimType):
        raise AttributeError(f"{type(expr).__name__} of type {ty} has no dtype")
    return canonical_dtype(str(ty.dtype), "dtype")


def _buffer_map(func) -> dict:
    """``func.buffer_map`` of the public TileLang (TVM before 0.27): each tensor parameter
    mapped to its buffer; 0.27's tensor parameters are the buffers themselves."""
    from tvm.tirx.buffer import is_buffer_var

    return {p: p for p in func.params if is_buffer_var(p)}


def _post_order_visit(node, fn) -> None:
    """``fn`` on every node under ``node`` (statements and expressions), children first."""
    import tvm_ffi

    tvm_ffi.structural_walk(node, [(tvm.ir.Expr, fn), (tvm.tirx.Stmt, fn)])


def _stmt_functor_module():
    """``tvm.tirx.stmt_functor`` of TVM before 0.27 (its ``post_order_visit``)."""
    import sys
    import types

    mod = types.ModuleType("tvm.tirx.stmt_functor")
    mod.post_order_visit = _post_order_visit
    sys.modules[mod.__name__] = mod
    return mod


def _typed_int_operand(method):
    """``method`` (a bitwise operator of TVM expressions) with a Python int operand made a
    constant of the expression's integer type when it fits there: TVM makes it an int32 first,
    so ``u32 & 0xFFFFFFFF`` failed ("cannot make uint from negative value -1")."""

    def typed(self, other):
        ty = getattr(self, "ty", None)
        if isinstance(other, int) and not isinstance(other, bool) \
                and isinstance(ty, tvm.ir.PrimType):
            t = tvm.DataType(str(ty.dtype))
            if t.lanes == 1 and str(t).startswith(("int", "uint")):
                low = 0 if str(t).startswith("uint") else -(1 << (t.bits - 1))
                if low <= other < low + (1 << t.bits):
                    other = tvm.tirx.const(other, str(t))
        return method(self, other)

    typed._tilelang = True
    return typed


def _is_float(x) -> bool:
    ty = getattr(x, "ty", None)
    if isinstance(x, float):
        return True
    return isinstance(ty, tvm.ir.PrimType) and tvm.DataType(str(ty.dtype)).type_code in (
        tvm.DataTypeCode.FLOAT, tvm.DataTypeCode.BFLOAT)


def _python_float_mod(method, reflected: bool):
    """``method`` (``%`` of TVM expressions), with Python's meaning for floating-point
    operands: the remainder takes the divisor's sign (``-1.0 % 3.0 == 2.0``), computed exactly
    from ``fmod`` in the wider operand's type, as ``+`` promotes (a zero keeps the dividend's
    sign).  TVM's own ``%`` accepts integers only."""

    def mod(self, other):
        if not (_is_float(self) or _is_float(other)):
            return method(self, other)
        a, b = (other, self) if reflected else (self, other)
        floats = [str(v.ty.dtype) for v in (a, b) if isinstance(v, tvm.ir.Expr) and _is_float(v)]
        dtype = max(floats, key=lambda t: tvm.DataType(t).bits, default="float32")
        a, b = (tvm.tirx.const(v, dtype) if isinstance(v, (int, float))
                else v if str(v.ty.dtype) == dtype else tvm.tirx.Cast(dtype, v) for v in (a, b))
        r = tvm.tirx.fmod(a, b)  # pure: the backends compute it once
        zero = tvm.tirx.const(0, dtype)
        flip = tvm.tirx.And(tvm.tirx.NE(r, zero),
                            tvm.tirx.NE(tvm.tirx.LT(r, zero), tvm.tirx.LT(b, zero)))
        return tvm.tirx.Select(flip, r + b, r)

    mod._tilelang = True
    return mod


def _checked_shift(method, symbol: str, reflected: bool):
    """``method`` (``<<`` or ``>>`` of TVM expressions), refusing what no type can shift with
    a :class:`DSLTypeError`/:class:`DSLError` that names the operator: a floating-point operand,
    or a constant amount outside ``0 .. bits - 1`` (a kernel computing the amount is clamped by
    the backends instead)."""
    from ..errors import DSLError, DSLTypeError

    def shift(self, other):
        value, amount = (other, self) if reflected else (self, other)
        for operand in (value, amount):
            if _is_float(operand):
                raise DSLTypeError(f"`{symbol}` needs integer operands, but got "
                                   f"{getattr(operand, 'ty', 'a float')}")
        ty = getattr(value, "ty", None)
        bits = 0  # the type both operands are promoted to: the wider one
        if isinstance(amount, tvm.tirx.IntImm):
            bits = tvm.DataType(str(amount.ty.dtype)).bits
            amount = int(amount.value)
        if isinstance(amount, int) and isinstance(ty, tvm.ir.PrimType):
            bits = max(bits, tvm.DataType(str(ty.dtype)).bits)
            if not 0 <= amount < bits:
                name = str(ty.dtype).rstrip("0123456789") + str(bits)
                raise DSLError(f"`{symbol} {amount}`: {name} values shift by 0 to "
                               f"{bits - 1} bits")
        return method(self, other)

    shift._tilelang = True
    return shift


def install() -> None:
    """Give ``tvm.ir.Expr`` a ``dtype`` property (buffer variables keep theirs),
    ``tvm.tirx.Call`` its old name (0.27 moved it to ``tvm.ir.Call``), ``PrimFunc`` its
    ``buffer_map``, ``tvm.tirx`` the ``stmt_functor.post_order_visit`` of older TVMs, and
    bitwise operators that give a Python int the other operand's integer type, ``%`` of
    floating-point values with Python's meaning, and shifts that refuse a float or a constant
    amount outside the type's width with a message naming the operator."""
    if not hasattr(tvm.tirx, "Call"):
        tvm.tirx.Call = tvm.ir.Call
    if not hasattr(tvm.tirx, "stmt_functor"):
        tvm.tirx.stmt_functor = _stmt_functor_module()
    if not hasattr(tvm.tirx.PrimFunc, "buffer_map"):
        tvm.tirx.PrimFunc.buffer_map = property(_buffer_map)
    patches = {name: _typed_int_operand
               for name in ("__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__")}
    patches["__mod__"] = lambda m: _python_float_mod(m, False)
    patches["__rmod__"] = lambda m: _python_float_mod(m, True)
    for name, symbol in (("lshift", "<<"), ("rshift", ">>")):
        patches[f"__{name}__"] = lambda m, s=symbol: _checked_shift(m, s, False)
        patches[f"__r{name}__"] = lambda m, s=symbol: _checked_shift(m, s, True)
    for name, wrap in patches.items():
        method = tvm.ir.expr.ExprOperand.__dict__[name]
        if not getattr(method, "_tilelang", False):
            setattr(tvm.ir.expr.ExprOperand, name, wrap(method))
    if "dtype" not in tvm.ir.Expr.__dict__:
        tvm.ir.Expr.dtype = property(_scalar_dtype)
    var_dtype = tvm.ir.expr.Var.__dict__.get("dtype")
    if var_dtype is not None and not getattr(var_dtype.fget, "_tilelang", False):
        buffer_dtype = var_dtype.fget

        def dtype(var):
            if isinstance(var.ty, tvm.ir.PrimType):
                return _scalar_dtype(var)
            return buffer_dtype(var)

        dtype._tilelang = True
        tvm.ir.expr.Var.dtype = property(dtype)
