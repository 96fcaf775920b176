from sglang.srt.distributed.parallel_state import (get_tp_group, graph_capture, init_distributed_environment,  # noqa
                                                   initialize_model_parallel, set_custom_all_reduce,
                                                   tensor_model_parallel_all_reduce,
                                                   tensor_model_parallel_all_reduce_min)
