"""Tensors of the simulated torch: a shape, a dtype and a storage. Device storage is a block of
the caching allocator; host storage is a placeholder (no data is ever computed or kept: a
host-to-device copy copies chunks of one small buffer, the simulated driver keeps no data)."""
import builtins
import math

from . import _cuda_runtime as _crt


class dtype:
    def __init__(self, name, itemsize, is_floating_point):
        self.name, self.itemsize, self.is_floating_point = name, itemsize, is_floating_point

    def __repr__(self):
        return "torch." + self.name


float32 = float = dtype("float32", 4, True)
float16 = half = dtype("float16", 2, True)
bfloat16 = dtype("bfloat16", 2, True)
float8_e4m3fn = dtype("float8_e4m3fn", 1, True)
int64 = long = dtype("int64", 8, False)
int32 = int = dtype("int32", 4, False)
int8 = dtype("int8", 1, False)
uint8 = dtype("uint8", 1, False)
bool = dtype("bool", 1, False)

_DTYPES = [float32]


def get_default_dtype():
    return _DTYPES[-1]


def set_default_dtype(d):
    _DTYPES[-1] = d


class device:
    """`torch.device`; also a context manager that sets the default device (torch >= 2.0)."""

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, builtins.int):
            type, index = "cuda", type
        elif ":" in type:
            type, i = type.split(":")
            index = builtins.int(i)
        self.type, self.index = type, index

    def __eq__(self, other):
        other = device(other) if not isinstance(other, device) else other
        return self.type == other.type and (self.index is None or other.index is None or self.index == other.index)

    def __hash__(self):
        return hash(self.type)

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")

    def __str__(self):
        return self.type + (f":{self.index}" if self.index is not None else "")

    def __enter__(self):
        _DEVICES.append(self)
        return self

    def __exit__(self, *exc):
        _DEVICES.pop()
        return False


_DEVICES = [device("cpu")]


def _device(d):
    if d is None:
        return _DEVICES[-1]
    return d if isinstance(d, device) else device(d)


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(size)


class _Storage:
    __slots__ = ("ptr", "nbytes", "device")

    def __init__(self, nbytes, dev):
        self.nbytes, self.device, self.ptr = nbytes, dev, 0
        if dev.type == "cuda" and nbytes > 0:
            self.ptr = _crt.malloc(nbytes)

    def __del__(self):
        if self.ptr:
            try:
                _crt.free(self.ptr)
            except Exception:  # interpreter shutdown
                pass


class Tensor:
    def __init__(self, storage, shape, dt, offset=0, value=None):
        self._storage, self.shape, self.dtype, self._offset, self._value = storage, tuple(shape), dt, offset, value

    @property
    def device(self):
        return self._storage.device

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def data(self):
        return self

    @data.setter
    def data(self, other):
        self._storage, self.shape, self.dtype, self._offset = other._storage, other.shape, other.dtype, other._offset

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)

    def element_size(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.numel() * self.dtype.itemsize

    def data_ptr(self):
        return self._storage.ptr + self._offset

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def to(self, *args, **kwargs):
        dev, dt = kwargs.get("device"), kwargs.get("dtype")
        for a in args:
            if isinstance(a, dtype):
                dt = a
            elif a is not None:
                dev = a
        target = self.device if dev is None else _device(dev)
        if target.type == "cuda" and target.index is None:
            target = device("cuda", _crt.get_device())
        dt = dt or self.dtype
        if target == self.device and dt is self.dtype and (target.index == self.device.index):
            return self
        out = empty(self.shape, dtype=dt, device=target)
        return out.copy_(self)

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def cpu(self):
        return self.to("cpu")

    def copy_(self, src, non_blocking=False):
        n = min(self.nbytes, src.nbytes)
        if self.is_cuda and not src.is_cuda:
            _crt.memcpy_h2d(self.data_ptr(), n)
        elif self.is_cuda:
            _crt.memcpy_d2d(self.data_ptr(), src.data_ptr(), n)
        self._value = src._value
        return self

    def zero_(self):
        if self.is_cuda:
            _crt.memset(self.data_ptr(), 0, self.nbytes)
        self._value = 0
        return self

    def fill_(self, v):
        if self.is_cuda:
            _crt.memset(self.data_ptr(), 0, self.nbytes)
        self._value = v
        return self

    def uniform_(self, *args, **kwargs):
        return self

    def view(self, *shape):
        shape = _shape(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.numel() // max(known, 1) if s == -1 else s for s in shape)
        return Tensor(self._storage, shape, self.dtype, self._offset, self._value)

    reshape = view

    def __getitem__(self, idx):
        return Tensor(self._storage, self.shape, self.dtype, self._offset, self._value)

    def item(self):
        return self._value

    def __matmul__(self, other):
        return empty((self.shape[0], other.shape[-1]), dtype=self.dtype, device=self.device)

    def __repr__(self):
        return f"tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def empty(*size, dtype=None, device=None, pin_memory=False, requires_grad=False):
    shape = _shape(size)
    dt = dtype or get_default_dtype()
    dev = _device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = globals()["device"]("cuda", _crt.get_device())
    return Tensor(_Storage(math.prod(shape) * dt.itemsize, dev), shape, dt)


def zeros(*size, dtype=None, device=None, **kwargs):
    return empty(*size, dtype=dtype, device=device).zero_()


def ones(*size, dtype=None, device=None, **kwargs):
    return empty(*size, dtype=dtype, device=device).fill_(1)


def full(size, value, dtype=None, device=None):
    return empty(size, dtype=dtype, device=device).fill_(value)


def empty_like(t, dtype=None, device=None):
    return empty(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def zeros_like(t, dtype=None, device=None):
    return empty_like(t, dtype, device).zero_()


def tensor(data, dtype=None, device=None):
    """A host tensor holding `data` (a number or a flat list), moved to `device` if given."""
    n = len(data) if isinstance(data, (list, tuple)) else None
    is_float = any(isinstance(x, builtins.float) for x in (data if n is not None else [data]))
    dt = dtype or (float32 if is_float else int64)
    t = Tensor(_Storage((n or 1) * dt.itemsize, globals()["device"]("cpu")), (n,) if n is not None else (), dt,
               value=data)
    return t if device is None else t.to(device)


def arange(start, end=None, step=1, dtype=None, device=None):
    """Computed on the device when `device` is CUDA: no copy from host."""
    if end is None:
        start, end = 0, start
    n = max(0, (end - start + step - 1) // step)
    return empty(n, dtype=dtype or int64, device=device)
