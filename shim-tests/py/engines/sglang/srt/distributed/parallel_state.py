"""sglang/srt/distributed/parallel_state.py (simulated): the tensor-parallel GroupCoordinator
with its PyNcclCommunicator and, when enabled, CustomAllreduce.

Where the simulation departs from SGLang: the custom all-reduce opens its peers' buffers
lazily, at the first all-reduce it serves, and the group's all-reduce hands it every device
all-reduce once it exists, the MIN of get_available_gpu_memory(distributed=True) included. In
the simulation that first use is the sizing query of profile_max_num_token (the distributed
query of init_torch_distributed runs before initialize_model_parallel), so the driver memory the
peer mappings cost is not in the number the KV pool is sized from."""
import contextlib

import torch
import torch.distributed as dist

_TP = None
_ENABLE_CUSTOM_ALL_REDUCE = True


def set_custom_all_reduce(enable):
    global _ENABLE_CUSTOM_ALL_REDUCE
    _ENABLE_CUSTOM_ALL_REDUCE = enable


class GroupCoordinator:
    def __init__(self, group_ranks, local_rank, use_pynccl, use_custom_allreduce):
        self.ranks, self.local_rank = group_ranks, local_rank
        self.device = torch.device(f"cuda:{local_rank}")
        self.pynccl_comm = None
        if use_pynccl and len(group_ranks) > 1:
            from sglang.srt.distributed.device_communicators.pynccl import PyNcclCommunicator
            self.pynccl_comm = PyNcclCommunicator(group=None, device=self.device)
        self.ca_comm = None
        if use_custom_allreduce and len(group_ranks) > 1:
            from sglang.srt.distributed.device_communicators.custom_all_reduce import CustomAllreduce
            self.ca_comm = CustomAllreduce(group=None, device=self.device)

    def all_reduce(self, input_):
        if self.ca_comm is not None:
            return self.ca_comm.custom_all_reduce(input_)
        if self.pynccl_comm is not None:
            return self.pynccl_comm.all_reduce(input_)
        return input_

    @contextlib.contextmanager
    def graph_capture(self):
        stream = torch.cuda.Stream()
        maybe_ca = self.ca_comm.capture() if self.ca_comm is not None else contextlib.nullcontext()
        with torch.cuda.stream(stream), maybe_ca:
            yield stream


def init_distributed_environment(backend, world_size, rank, local_rank, distributed_init_method):
    dist.init_process_group(backend=backend, init_method=distributed_init_method, world_size=world_size, rank=rank)


def initialize_model_parallel(tensor_model_parallel_size):
    global _TP
    _TP = GroupCoordinator(list(range(tensor_model_parallel_size)), torch.cuda.current_device(),
                           use_pynccl=True, use_custom_allreduce=_ENABLE_CUSTOM_ALL_REDUCE)


def get_tp_group():
    return _TP


def tensor_model_parallel_all_reduce(input_):
    return _TP.all_reduce(input_) if _TP is not None else input_


def tensor_model_parallel_all_reduce_min(tensor):
    """The MIN over ranks (values travel through the rendezvous; the device all-reduce is
    still issued, for what it costs)."""
    if _TP is not None:
        _TP.all_reduce(tensor)
    if isinstance(tensor._value, list):
        tensor._value = min(tensor._value)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return tensor


@contextlib.contextmanager
def graph_capture():
    with _TP.graph_capture() as stream:
        yield stream
