"""torch/nn/parameter.py of the simulated torch."""
from .._tensor import Tensor


class Parameter(Tensor):
    """A tensor registered on a module; shares the storage of `data` (no allocation)."""

    def __init__(self, data=None, requires_grad=True):
        super().__init__(data._storage, data.shape, data.dtype, data._offset, data._value)
