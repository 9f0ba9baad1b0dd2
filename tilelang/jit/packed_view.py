"""A kernel argument of a sub-byte element type (``T.float4_e2m1fn``, ``T.int4``, ...) seen
through the bytes that hold it: the caller passes a packed torch tensor (``uint8``, ``int8``,
``float4_e2m1fn_x2``: several elements per byte, the last dimension packed), and the kernel
receives a DLPack tensor of the logical element type, shape and strides over the same memory.

torch has no such tensor, so the DLPack record is written here (``ctypes``) and handed to
``tvm_ffi.from_dlpack``; the packed tensor is kept alive until TVM releases the record.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import torch
import tvm
import tvm_ffi


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]

_DEVICE_TYPES = {"cpu": 1, "cuda": 2}  # DLPack's kDLCPU, kDLCUDA
_alive: dict[int, tuple] = {}  # record address -> what it points into, until TVM releases it


def _release(managed) -> None:
    _alive.pop(ctypes.addressof(managed.contents), None)


_release_cb = _DELETER(_release)  # one callback for every record, alive with the module

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def logical_view(packed: torch.Tensor, dtype: str, shape: Sequence[int],
                 strides: Sequence[int]) -> tvm_ffi.Tensor:
    """``packed``'s memory as a tensor of ``dtype`` with ``shape`` and ``strides`` (in
    elements of ``dtype``), for a kernel call; the caller has checked that they describe
    bytes of ``packed``."""
    parsed = tvm.DataType(dtype)
    ndim = len(shape)
    rec = _DLManagedTensor()
    dims = (ctypes.c_int64 * max(ndim, 1))(*shape)
    steps = (ctypes.c_int64 * max(ndim, 1))(*strides)
    t = rec.dl_tensor
    t.data = packed.data_ptr()
    t.device = _DLDevice(_DEVICE_TYPES[packed.device.type], packed.device.index or 0)
    t.ndim = ndim
    t.dtype = _DLDataType(parsed.type_code, parsed.bits, parsed.lanes)
    t.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(steps, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    rec.deleter = _release_cb
    address = ctypes.addressof(rec)
    _alive[address] = (rec, dims, steps, packed)
    try:
        return tvm_ffi.from_dlpack(_capsule_new(address, b"dltensor", None))
    except BaseException:
        _alive.pop(address, None)
        raise


__all__ = ["logical_view"]
