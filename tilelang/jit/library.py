"""Exported kernels: a compiled library plus a JSON record, loaded back without compiling.

``kernel.export_library("k.so")`` writes the shared library ``k.so`` and ``k.so.json``, the
kernel's record: its name, target, parameters (dtypes, shapes with size-variable names),
``out_idx``, the parameters it writes, and its device source.  ``tilelang.load("k.so")`` loads
the library with the TVM runtime and returns a ``JITKernel`` that checks arguments, allocates
outputs and binds size variables exactly as the compiled one did; no pass or compiler runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

from ..errors import TileLangError
from ..utils.dtype import torch_dtype
from .params import ScalarParam, TensorParam

FORMAT = 1
SUFFIX = ".json"


@dataclasses.dataclass
class KernelRecord:
    """What a kernel needs besides its library to be called: serializable as JSON."""

    name: str
    target: dict
    params: list
    out_idx: list[int]
    writes: list[str]
    device_source: str | None = None
    library: dict | None = None  # size and sha256 of the library file, checked by load

    def to_json(self) -> str:
        params = []
        for p in self.params:
            d = dataclasses.asdict(p)
            d.pop("torch_dtype", None)
            d["kind"] = "tensor" if isinstance(p, TensorParam) else "scalar"
            params.append(d)
        body = dataclasses.asdict(self) | {"params": params, "format": FORMAT}
        return json.dumps(body, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str) -> "KernelRecord":
        try:
            body = json.loads(text)
            if body.pop("format", None) != FORMAT:
                raise ValueError(f"unknown record format (this tilelang reads format {FORMAT})")
            params = []
            for d in body.pop("params"):
                kind = d.pop("kind")
                if kind == "tensor":
                    params.append(TensorParam(**d, torch_dtype=torch_dtype(d["dtype"])))
                else:
                    params.append(ScalarParam(**d))
            return cls(params=params, **body)
        except (ValueError, KeyError, TypeError) as err:
            raise TileLangError(f"tilelang.load: {where} is not a kernel record: {err}") from err


def record_of(kernel) -> KernelRecord:
    """The record of a compiled kernel."""
    from . import torch_op

    return KernelRecord(name=kernel.name, target=json.loads(str(kernel.target)),
                        params=list(kernel.params), out_idx=list(kernel.out_idx),
                        writes=torch_op.writes(kernel),
                        device_source=kernel.get_kernel_source())


def export(kernel, path: str) -> None:
    """Write ``kernel``'s library to ``path`` and its record to ``path + ".json"``."""
    record = record_of(kernel)
    host = getattr(kernel.rt_mod, "mod", kernel.rt_mod)
    if getattr(host, "kind", None) == "library":  # loaded from a .so: that file is the library
        source = getattr(kernel, "library_path", None)
        if (source is None or not os.path.exists(source)) and kernel.prim_func is not None:
            from . import compile as build  # its library is gone (an autotuner's scratch copy)

            return export(build(kernel.prim_func, out_idx=kernel.out_idx, target=kernel.target,
                                pass_configs=kernel.pass_configs), path)
        if source is None:
            raise TileLangError(f"export_library: kernel {kernel.name!r} was loaded from a "
                                "library whose path is unknown; export the compiled kernel")
        if os.path.abspath(source) != os.path.abspath(path):
            shutil.copyfile(source, path)
    else:
        kernel.rt_mod.export_library(path)
    from .cache import library_record

    record.library = library_record(path)
    with open(path + SUFFIX, "w") as f:
        f.write(record.to_json())


def load(path: str | os.PathLike) -> Any:
    """The kernel exported to ``path`` by ``JITKernel.export_library``, ready to call."""
    import tvm

    from .kernel import JITKernel

    path = os.fspath(path)
    meta = path + SUFFIX
    for p in (path, meta):
        if not os.path.exists(p):
            raise TileLangError(f"tilelang.load: {p} does not exist (export_library writes the "
                                f"library and its record {os.path.basename(meta)})")
    with open(meta) as f:
        record = KernelRecord.from_json(f.read(), meta)
    _check_library(path, record.library)
    try:
        rt_mod = tvm.runtime.load_module(path)
    except Exception as err:  # noqa: BLE001 - TVM's loader errors, e.g. no CUDA runtime here
        raise TileLangError(f"tilelang.load: {path} (a {record.target.get('kind')} kernel) "
                            f"cannot be loaded here: {str(err).splitlines()[-1]}") from err
    kernel = JITKernel(None, rt_mod, tvm.target.Target(record.target), record.out_idx,
                       device_source=record.device_source, name=record.name,
                       params=record.params)
    kernel._writes = list(record.writes)
    kernel.library_path = path
    return kernel


def _check_library(path: str, stored: dict | None) -> None:
    """A library that is not the exported one (truncated by a copy, altered) would crash the
    process that loads it: its size and sha256 must match the record's."""
    from .cache import library_damage

    why = library_damage(path, stored) if stored is not None else None  # older records: none
    if why:
        raise TileLangError(f"tilelang.load: {path} is not the library that was exported "
                            f"({why}); export the kernel again")


__all__ = ["KernelRecord", "export", "load", "record_of"]
