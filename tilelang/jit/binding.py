"""How a call to a ``@tilelang.jit`` function becomes the key of its compiled kernel.

The arguments are bound to the function's signature (Python's own errors for a missing or
repeated argument), defaults are applied and ``**kwargs`` are flattened, so that every call
form of the same values (positional, by keyword, in any order, defaults left out or written
out) gives one key.  Keyword arguments the signature does not take are kept by name: the eager
style reads them as ``T.const`` sizes.  Values become hashable (lists and tuples as tuples,
dicts as their sorted items); a value that cannot is refused with a ``TypeError``.

Tensor parameters (the eager style's) are not compile-time values: they are left out of the
first part of the key and returned separately.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

MODES = ("auto", "lazy", "eager")


def key_value(value: Any) -> Any:
    """``value`` as a hashable compile-time key: a list or tuple as a tuple, a dict as its
    items sorted by key, a set as a frozenset, any other value as itself if it hashes."""
    if isinstance(value, (list, tuple)):
        return tuple(key_value(v) for v in value)
    if isinstance(value, dict):
        items = sorted(((key_value(k), key_value(v)) for k, v in value.items()), key=repr)
        return (dict, tuple(items))
    if isinstance(value, (set, frozenset)):
        return frozenset(key_value(v) for v in value)
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"Unsupported unhashable JIT compile-time cache key value {value!r} "
                        f"(of type {type(value).__name__}): a kernel is cached by the values "
                        f"of its compile-time arguments; pass numbers, strings, dtypes, or "
                        f"lists, tuples and dicts of them") from None
    return value


class CallBinding:
    """The signature of a JIT function with the names of its tensor parameters: binds a
    call's arguments and makes its cache key (``jit_function.func`` in the public API)."""

    def __init__(self, fn: Callable, tensor_params: Sequence[str] = (), mode: str = "auto"):
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.tensor_params = tuple(tensor_params)
        self._var_keyword = next((n for n, p in self.signature.parameters.items()
                                  if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        self.mode = "auto"
        self.set_mode(mode)

    @property
    def takes_var_keyword(self) -> bool:
        """Whether the function takes ``**kwargs`` (then no keyword argument is extra)."""
        return self._var_keyword is not None

    def set_mode(self, mode: str) -> None:
        """``"lazy"`` (the function returns a ``T.prim_func``; a call returns the kernel),
        ``"eager"`` (the function is the kernel; a call runs it) or ``"auto"``."""
        if mode not in MODES:
            raise ValueError(f"{self.fn.__name__}: unknown JIT mode {mode!r}; expected one of "
                             f"{MODES}")
        self.mode = mode

    def bind(self, args: tuple, kwargs: dict, partial: bool = False) -> tuple[dict, dict]:
        """(each parameter's value by name in signature order, defaults applied and
        ``**kwargs`` flattened; the keyword arguments the signature does not take).  With
        ``partial``, parameters may be left unbound."""
        params = self.signature.parameters
        extra = {} if self._var_keyword else {k: v for k, v in kwargs.items() if k not in params}
        taken = {k: v for k, v in kwargs.items() if k not in extra}
        bound = (self.signature.bind_partial if partial else self.signature.bind)(*args, **taken)
        if not partial:
            bound.apply_defaults()
        else:
            for name, p in params.items():
                if name not in bound.arguments and p.default is not inspect.Parameter.empty:
                    bound.arguments[name] = p.default
        values: dict[str, Any] = {}
        for name in params:
            if name not in bound.arguments:
                continue
            if name == self._var_keyword:
                values.update(bound.arguments[name])
            else:
                values[name] = bound.arguments[name]
        return values, extra

    def _parse_phase1_key(self, *args: Any, **kwargs: Any) -> tuple[tuple, dict, dict]:
        """(the key of the compile-time values, the tensor arguments by name, the compile-time
        values by name with defaults applied and ``**kwargs`` flattened)."""
        values, extra = self.bind(args, kwargs)
        tensors = {n: v for n, v in values.items() if n in self.tensor_params}
        compile_kwargs = {n: v for n, v in values.items() if n not in self.tensor_params}
        named = self._named(values) | extra.keys()
        key = [key_value(v) for n, v in compile_kwargs.items() if n not in named]
        by_name = sorted((n, key_value(v)) for n, v in compile_kwargs.items() if n in named)
        by_name += sorted((n, key_value(v)) for n, v in extra.items())
        if by_name:
            key.append(tuple(by_name))
        compile_kwargs.update(extra)
        return tuple(key), tensors, compile_kwargs

    def parse_args(self, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        """((compile-time key, tensor key), the tensor arguments by name).  The tensor key is
        the shapes, strides, dtypes and devices of the tensors (``None`` when there are none,
        as for a function returning a ``T.prim_func``)."""
        p1_key, tensors, _ = self._parse_phase1_key(*args, **kwargs)
        return (p1_key, tensors_key(tensors)), tensors

    def _named(self, values: dict) -> set:
        """The names in ``values`` that came through ``**kwargs`` (keyed by name)."""
        if self._var_keyword is None:
            return set()
        return set(values) - set(self.signature.parameters)


def tensors_key(tensors: dict) -> tuple | None:
    """What a kernel compiled for these tensors depends on: each one's shape, strides, dtype
    and device type (``None`` for no tensors)."""
    if not tensors:
        return None
    return tuple((n, tensor_key(t)) for n, t in tensors.items())


def tensor_key(t: Any) -> tuple:
    """A torch tensor's shape, strides, dtype and device type; other objects by identity."""
    import torch

    if isinstance(t, torch.Tensor):  # strides too: T.StridedTensor binds sizes from them
        return (tuple(t.shape), t.stride(), t.dtype, t.device.type)
    return (type(t), id(t))


__all__ = ["CallBinding", "MODES", "key_value", "tensor_key", "tensors_key"]
