"""``T.alloc_reducer``, ``T.reducer_init``, ``T.reducer_update`` and ``T.finalize_reducer``
(semantics: ``tilelang.ops.reducer``)."""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm.script import tirx as _T

from ..errors import DSLError, TileOpError
from ..ops import reducer as _ops
from ..ops import region as R
from ..utils.dtype import canonical_dtype
from .allocate import _shape, alloc_fragment

REPLICATIONS = (None, "all", "none")
# the reducers allocated while programs are parsed, and their ops
_allocated: dict = {}


class ReducerDtypeError(DSLError, AssertionError):
    """A bitwise reducer of a non-integer dtype (the public API raises an AssertionError)."""


def alloc_reducer(shape: Sequence | int, dtype: Any, op: str = "sum",
                  replication: str | None = None):
    """A reducer of ``shape`` combining with ``op`` (``"sum"``, ``"max"``, ``"min"``, or for
    integer dtypes ``"bitand"``, ``"bitor"``, ``"bitxor"``): ``replication="all"`` (the
    default) gives every thread its own copy; ``"none"`` a plain fragment.  Open an epoch with
    ``T.reducer_init``, contribute with ``T.reducer_update``, combine with
    ``T.finalize_reducer``."""
    opname = "T.alloc_reducer"
    if op not in _ops.OPS:
        raise DSLError(f"{opname}: op must be one of {', '.join(_ops.OPS)}, got {op!r}")
    if replication not in REPLICATIONS:
        raise DSLError(f"{opname}: replication must be 'all' or 'none', got "
                       f"{replication!r}")
    dt = canonical_dtype(dtype, opname)
    if op in _ops.BITWISE and not dt.is_integer:
        raise ReducerDtypeError(f"{opname}: op={op!r} needs an integer dtype, got {dt}")
    if replication == "none":
        buf = alloc_fragment(shape, dtype)
    else:
        buf = _T.alloc_buffer(_shape(shape, opname), dt, scope="local",
                              annotations={_ops.REDUCER: op})
    _allocated[buf] = op
    return buf


def _reducer(reducer: Any, opname: str):
    if not R.is_buffer(reducer) or reducer not in _allocated:
        raise TileOpError(f"{opname}: expects a buffer from T.alloc_reducer, got {reducer!r}")
    return reducer


def reducer_init(reducer: Any, value: Any = None):
    """Open an epoch of ``reducer``: the combine starts from the op's identity and counts
    ``value`` (evaluated here) once.  A ``value`` expression must have the reducer's dtype;
    Python numbers are converted."""
    opname = "T.reducer_init"
    buf = _reducer(reducer, opname)
    if value is not None and not isinstance(value, (int, float)):
        vt = str(getattr(value, "ty", getattr(value, "dtype", "")))
        if vt != str(buf.dtype):
            raise TileOpError(f"{opname}: the starting value {value} has dtype {vt}, which "
                              f"does not match reducer {buf.name} of dtype {buf.dtype}")
    if isinstance(value, bool):
        raise TileOpError(f"{opname}: the starting value must be a number, got {value!r}")
    _T.evaluate(_ops.init(buf, _allocated[buf], value))


def reducer_update(target: Any, value: Any):
    """Combine ``value`` into the element ``target`` (``acc[i, ...]``) of a reducer, inside
    ``T.Parallel``: each loop iteration contributes once."""
    opname = "T.reducer_update"
    target = getattr(target, "scalar", target)
    if not R.is_element(target) or target.source not in _allocated:
        raise TileOpError(f"{opname}: the target must be an element of a buffer from "
                          f"T.alloc_reducer (acc[i]), got {target!r}")
    if len(target.indices) != len(target.source.shape):
        raise TileOpError(f"{opname}: {target} indexes {len(target.indices)} dims of reducer "
                          f"{target.source.name}, which has {len(target.source.shape)}")
    region = R.region_of(target, opname, "target")
    _T.evaluate(_ops.update(region, _allocated[target.source], value))


def finalize_reducer(reducer: Any, dst: Any = None, batch: int = 1):
    """Combine the threads' copies of ``reducer``; every copy then holds the result, and
    ``dst`` (of the reducer's shape) receives it when given.  ``batch`` (elements combined
    per pass, a scheduling hint) must be positive, at most the element count, and divide
    it."""
    opname = "T.finalize_reducer"
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise DSLError(f"{opname}: batch must be a positive int, got {batch!r}")
    if batch < 1:
        raise DSLError(f"{opname}: batch must be >= 1 (a positive int), got {batch}")
    buf = _reducer(reducer, opname)
    count = 1
    for s in buf.shape:
        count = count * int(s) if R.as_int(s) is not None else None
        if count is None:
            break
    if count is not None and batch > count:
        raise DSLError(f"{opname}: batch={batch} exceeds total output elements ({count}) of "
                       f"reducer {buf.name}")
    if count is not None and count % batch:
        raise DSLError(f"{opname}: batch={batch} must evenly divide the {count} elements of "
                       f"reducer {buf.name}")
    if dst is not None:
        d = R.region_of(dst, opname, "destination")
        if not R.same_shape(R.squeeze(R.extents(d)), R.squeeze(list(buf.shape))):
            raise TileOpError(f"{opname}: destination {R.describe(d)} of shape "
                              f"{R.fmt_shape(R.extents(d))} does not match reducer {buf.name} "
                              f"of shape {R.fmt_shape(buf.shape)}")
    return _ops.finalize(buf, _allocated[buf], dst)


def CheckReducerEpochs():  # noqa: N802  (a pass factory, named like the others)
    """The pass of ``tilelang.ops.reducer.check_epochs`` (every target)."""
    from ..transform.passes import function_pass

    def run(func):
        _ops.check_epochs(func.body)
        _ops.check_accumulations(func.body)
        return func

    return function_pass("tl.CheckReducerEpochs")(run)()
