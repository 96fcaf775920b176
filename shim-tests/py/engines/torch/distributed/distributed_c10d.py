"""torch/distributed/distributed_c10d.py of the simulated torch: the world group of a
`file://` rendezvous. Collectives exchange Python values through files in that directory (like
a FileStore), in call order; device tensors carry only a small shadow value. A rank that fails
writes a marker so the others raise instead of waiting forever."""
import os
import pickle
import time

TIMEOUT_S = float(os.environ.get("SIM_DIST_TIMEOUT_S", "120"))


class ReduceOp:
    SUM, MIN, MAX = "sum", "min", "max"


class ProcessGroup:
    def __init__(self, ranks, backend):
        self.ranks, self.backend = list(ranks), backend


_state = {}


def init_process_group(backend="nccl", init_method=None, world_size=-1, rank=-1, timeout=None):
    assert init_method and init_method.startswith("file://"), "the simulated torch needs a file:// rendezvous"
    d = init_method[len("file://"):]
    os.makedirs(d, exist_ok=True)
    _state.update(dir=d, rank=rank, world=world_size, seq=0, backend=backend,
                  group=ProcessGroup(range(world_size), backend))


def is_initialized():
    return bool(_state)


def get_rank(group=None):
    return _state["rank"]


def get_world_size(group=None):
    return _state["world"]


def get_backend(group=None):
    return (group or _state["group"]).backend


def new_group(ranks=None, backend=None):
    return ProcessGroup(ranks if ranks is not None else range(_state["world"]), backend or _state["backend"])


def mark_dead():
    if _state:
        open(os.path.join(_state["dir"], f"dead.{_state['rank']}"), "w").close()


def _exchange(value):
    """Every rank's `value` for this collective, in rank order."""
    key = f"c{_state['seq']:06d}"
    _state["seq"] += 1
    d, me, n = _state["dir"], _state["rank"], _state["world"]
    tmp = os.path.join(d, f".{key}.{me}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(value, f)
    os.replace(tmp, os.path.join(d, f"{key}.{me}"))
    deadline = time.monotonic() + TIMEOUT_S
    out = []
    for r in range(n):
        path = os.path.join(d, f"{key}.{r}")
        while not os.path.exists(path):
            if os.path.exists(os.path.join(d, f"dead.{r}")):
                raise RuntimeError(f"rank {r} exited during a collective")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank {r} did not reach collective {key} in {TIMEOUT_S:.0f} s")
            time.sleep(0.002)
        with open(path, "rb") as f:
            out.append(pickle.load(f))
    return out


def barrier(group=None):
    _exchange(None)


def all_gather_object(object_list, obj, group=None):
    object_list[:] = _exchange(obj)


def broadcast_object_list(object_list, src=0, group=None, device=None):
    object_list[:] = _exchange(list(object_list) if get_rank() == src else None)[src]


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    vals = _exchange(tensor._value)
    tensor._value = {ReduceOp.SUM: sum, ReduceOp.MIN: min, ReduceOp.MAX: max}[op](vals)


def destroy_process_group(group=None):
    _state.clear()
