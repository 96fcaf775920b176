"""torch/cuda/graphs.py of the simulated torch: CUDA graph capture into a private pool."""
import ctypes
import gc

from simtruth import truth

from .. import _cuda_runtime as _crt

cudaStreamCaptureModeGlobal = 0


def graph_pool_handle():
    return _crt.rt().c10.c10sim_create_pool(None, None)


class CUDAGraph:
    def __init__(self):
        self._graph = ctypes.c_void_p()
        self._exec = ctypes.c_void_p()
        self._pool = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        r = _crt.rt()
        self._pool = pool if pool is not None else graph_pool_handle()
        # The allocator serves the capture from the graph's private pool (beginAllocateToPool).
        r.c10.c10sim_allocate_to_pool(self._pool)
        truth.capturing.add(_crt.get_device())
        r.call("cudaStreamBeginCapture", ctypes.c_void_p(_crt.current_stream()), cudaStreamCaptureModeGlobal)

    def capture_end(self):
        r = _crt.rt()
        r.call("cudaStreamEndCapture", ctypes.c_void_p(_crt.current_stream()), ctypes.byref(self._graph))
        r.c10.c10sim_allocate_to_pool(0)
        truth.capturing.discard(_crt.get_device())
        r.call("cudaGraphInstantiate", ctypes.byref(self._exec), self._graph, 0)

    def replay(self):
        _crt.rt().call("cudaGraphLaunch", self._exec, ctypes.c_void_p(_crt.current_stream()))

    def pool(self):
        return self._pool


class graph:
    """`with torch.cuda.graph(g, pool=..., stream=...)`: like PyTorch, synchronizes, collects
    garbage and empties the cache before capturing on a side stream."""

    default_capture_stream = None

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        from . import Stream
        if graph.default_capture_stream is None:
            graph.default_capture_stream = Stream()
        self.cuda_graph, self.pool = cuda_graph, pool
        self.capture_stream = stream if stream is not None else graph.default_capture_stream

    def __enter__(self):
        from . import empty_cache, synchronize
        synchronize()
        gc.collect()
        empty_cache()
        self.prev = _crt.current_stream()
        _crt.set_current_stream(self.capture_stream.cuda_stream)
        self.cuda_graph.capture_begin(pool=self.pool)

    def __exit__(self, *exc):
        self.cuda_graph.capture_end()
        _crt.set_current_stream(self.prev)
        return False
