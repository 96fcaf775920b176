"""vllm/distributed/parallel_state.py (simulated): the TP GroupCoordinator, whose device
communicator (CudaCommunicator) holds a PyNcclCommunicator and, unless disabled, a
CustomAllreduce; graph_capture() lets the custom all-reduce register the graph's buffers."""
import contextlib

import torch
import torch.distributed as dist

_TP = None


class GroupCoordinator:
    def __init__(self, world_size, local_rank, use_custom_allreduce):
        self.rank, self.world_size = dist.get_rank(), world_size
        self.device = torch.device(f"cuda:{local_rank}")
        self.device_communicator = None
        if world_size > 1:
            from vllm.distributed.device_communicators.cuda_communicator import CudaCommunicator
            self.device_communicator = CudaCommunicator(device=self.device, use_custom_allreduce=use_custom_allreduce)

    def all_reduce(self, input_):
        if self.device_communicator is None:
            return input_
        return self.device_communicator.all_reduce(input_)


def init_distributed_environment(world_size, rank, distributed_init_method, local_rank, backend="nccl"):
    dist.init_process_group(backend=backend, init_method=distributed_init_method, world_size=world_size, rank=rank)


def ensure_model_parallel_initialized(vllm_config):
    global _TP
    _TP = GroupCoordinator(vllm_config.tensor_parallel_size, torch.cuda.current_device(),
                           use_custom_allreduce=not vllm_config.disable_custom_all_reduce)


def get_tp_group():
    return _TP


@contextlib.contextmanager
def graph_capture(device):
    stream = torch.cuda.Stream()
    comm = _TP.device_communicator
    ca = comm.ca_comm if comm is not None else None
    with torch.cuda.stream(stream), (ca.capture() if ca is not None else contextlib.nullcontext()):
        yield stream
