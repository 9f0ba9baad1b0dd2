"""``SolveAffineSizes``: a size variable that a tensor parameter's shape gives only through an
affine expression with a positive factor (``A: T.Tensor((n * 4,), ...)``, ``(n + 1,)``,
``(3 * n + 1,)``) is solved
from the tensor's size at the call, as in the public TileLang.

TVM binds a size variable from a dimension that *is* the variable; ``n * 4`` alone left ``n``
undefined ("variables (n,) are used, but are not passed in as API arguments").  The dimension
becomes a variable of its own (``A_dim0``), checked on the host to be ``a * n + b`` for a whole
``n >= 0`` (else ``RuntimeError`` before the launch), and ``n = (A_dim0 - b) // a`` is bound
before the body.  A variable in several affine dimensions (``A: (n * 4,)``, ``B: (n * 2,)``)
is solved from the first, in parameter order; each other one becomes a variable of its own too,
checked on the host to equal its expression of the solved value (``RuntimeError`` naming both
parameters).  A variable that some dimension or scalar parameter gives directly is left as it
is (the call binds it, and checks the dimensions computed from it).
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..ir_utils import find_all, remap_buffers, seq
from .host_assumptions import host_assert
from .passes import function_pass


def affine_in(expr, var) -> tuple[int, int] | None:
    """``(a, b)`` with ``expr == a * var + b`` when ``expr`` is integer ``+ - *`` over ``var``
    and constants (casts between integer types allowed), else ``None``."""
    if isinstance(expr, tirx.IntImm):
        return 0, int(expr)
    if isinstance(expr, tirx.Var):
        return (1, 0) if expr.same_as(var) else None
    if isinstance(expr, tirx.Cast) and str(expr.ty).startswith("int"):
        return affine_in(expr.value, var)
    if isinstance(expr, (tirx.Add, tirx.Sub, tirx.Mul)):
        x, y = affine_in(expr.a, var), affine_in(expr.b, var)
        if x is None or y is None:
            return None
        if isinstance(expr, tirx.Add):
            return x[0] + y[0], x[1] + y[1]
        if isinstance(expr, tirx.Sub):
            return x[0] - y[0], x[1] - y[1]
        if x[0] and y[0]:
            return None  # n * n
        return x[0] * y[1] + y[0] * x[1], x[1] * y[1]
    return None


def _vars_of(expr) -> list:
    """The distinct variables ``expr`` reads."""
    return list({v.__chandle__(): v for v in find_all(expr, tirx.Var)}.values())


@function_pass("tl.SolveAffineSizes")
def SolveAffineSizes(func: tirx.PrimFunc) -> tirx.PrimFunc:
    buffers = [p for p in func.params if is_buffer_var(p)]
    direct = {p.__chandle__() for p in func.params if not is_buffer_var(p)}
    uses: dict[int, list] = {}  # variable -> [(buffer, dim, var)] of the affine dims it is in
    for buf in buffers:
        for e in list(buf.shape) + list(buf.strides or []) + [buf.elem_offset]:
            if isinstance(e, tirx.Var):
                direct.add(e.__chandle__())
        for d, e in enumerate(buf.shape):
            if isinstance(e, (tirx.IntImm, tirx.Var)) or len(buf.strides or []):
                continue
            vs = _vars_of(e)
            ab = affine_in(e, vs[0]) if len(vs) == 1 else None
            if ab is not None and ab[0] > 0:
                uses.setdefault(vs[0].__chandle__(), []).append((buf, d, vs[0]))
    solved = {k: v for k, v in uses.items() if k not in direct}
    if not solved:
        return func
    sizes = {}  # (buffer, dim) -> the variable that replaces the dimension
    solving, checking = [], []
    for (buf, d, var), *others in solved.values():
        ty = str(var.ty)
        a, b = affine_in(buf.shape[d], var)
        size = sizes[buf.__chandle__(), d] = tirx.Var(f"{buf.name}_dim{d}", ty)
        rest = size - tirx.const(b, ty)
        ok = tirx.And(rest >= tirx.const(0, ty),
                      tirx.floormod(rest, tirx.const(a, ty)) == tirx.const(0, ty))
        solving.append(host_assert(ok, f"parameter {buf.name!r}: dim {d} must be "
                                   f"{buf.shape[d]} for a whole {var.name} >= 0"))
        solving.append(tirx.Bind(var, tirx.floordiv(rest, tirx.const(a, ty))))
        for other, od, _ in others:
            got = sizes[other.__chandle__(), od] = tirx.Var(f"{other.name}_dim{od}", ty)
            checking.append(host_assert(
                got == other.shape[od], f"parameter {other.name!r}: dim {od} must be "
                f"{other.shape[od]}, with {var.name} from dim {d} of {buf.name!r} "
                f"({buf.shape[d]})"))
    replaced = {}
    for buf in buffers:
        shape = [sizes.get((buf.__chandle__(), d), e) for d, e in enumerate(buf.shape)]
        if any(not x.same_as(e) for x, e in zip(shape, buf.shape)):
            replaced[buf.__chandle__()] = tirx.decl_buffer(shape, buf.dtype, buf.name,
                                                           scope=buf.scope())
    prologue = solving + checking
    new = remap_buffers(func, lambda b: replaced.get(b.__chandle__()))
    return tirx.PrimFunc(new.params, seq(prologue + [new.body]), new.ret_type, new.attrs,
                         new.span)
