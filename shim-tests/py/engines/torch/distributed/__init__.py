from .distributed_c10d import (ProcessGroup, ReduceOp, all_gather_object, all_reduce, barrier,  # noqa: F401
                               broadcast_object_list, destroy_process_group, get_backend, get_rank,
                               get_world_size, init_process_group, is_initialized, mark_dead, new_group)
