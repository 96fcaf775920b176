"""sglang/srt/server_args.py (simulated): the launch arguments the simulation honours."""
import argparse
import os
import dataclasses


@dataclasses.dataclass
class ServerArgs:
    model_path: str = "sim/llama"
    tp_size: int = 2
    mem_fraction_static: float = 0.88
    disable_custom_all_reduce: bool = True
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int = 32
    max_running_requests: int = None
    max_total_tokens: int = None
    # Simulation knobs.
    model_mib: int = 4096
    layers: int = 32
    context_length: int = 8192
    attention_workspace_mib: int = 384
    graph_workspace_mib: int = 0
    enable_symm_mem: bool = False
    speculative_algorithm: str = None
    speculative_draft_model_mib: int = 0
    speculative_draft_model_path: str = None
    draft_before_sizing: bool = False
    dist_init_dir: str = None
    truth_dir: str = None
    serve_until: str = None


def prepare_server_args(argv):
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", default="sim/llama")
    p.add_argument("--tp-size", "--tp", type=int, default=2)
    p.add_argument("--mem-fraction-static", type=float, default=0.88)
    p.add_argument("--allreduce", choices=["nccl", "custom"], default=None,
                   help="custom: SGLang's custom all-reduce forced on; nccl: --disable-custom-all-reduce")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=32)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--model-mib", type=int, default=4096, help="weights per rank, MiB (simulation)")
    p.add_argument("--layers", type=int, default=32, help="decoder layers (simulation)")
    p.add_argument("--context-length", type=int, default=8192)
    p.add_argument("--attention-workspace-mib", type=int, default=384)
    p.add_argument("--graph-workspace-mib", type=int, default=0,
                   help="simulation: what the capture of the largest batch takes from the graph pool at a "
                        "largest batch of 32; it scales with the largest batch captured (--cuda-graph-max-bs)")
    p.add_argument("--enable-symm-mem", action="store_true",
                   help="NCCL symmetric memory; SGLANG_SYMM_MEM_PREALLOC_GB_SIZE GiB are allocated after the "
                        "graph capture (pynccl_allocator.py prealloc_symmetric_memory_pool)")
    p.add_argument("--speculative-algorithm", default=None, choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"])
    p.add_argument("--speculative-draft-model-mib", type=int, default=0,
                   help="simulation: the draft model's weights per rank, MiB")
    p.add_argument("--speculative-draft-model-path", default=None,
                   help="the draft model's directory (SGLang's flag); the simulation loads per rank its weight "
                        "files' size (*.safetensors) divided by --tp, unless --speculative-draft-model-mib says")
    p.add_argument("--draft-before-sizing", action="store_true",
                   help="simulation: the order of sglang 0.5.23 (the scheduler builds the draft worker before "
                        "init_memory_pools, so the draft weights are counted); without it the order of the "
                        "versions before (EAGLEWorker built after the target's pool)")
    p.add_argument("--dist-init-dir", default=None, help="rendezvous directory (default: a fresh temporary one)")
    p.add_argument("--truth-dir", default=None, help="write the ground truth there (ENGINE_SIM_TRUTH_DIR)")
    p.add_argument("--serve-until", default=None,
                   help="once started, the ranks keep serving until this file exists (simulation: a server "
                        "that stays up, for the live views; at most 10 minutes)")
    a = p.parse_args(argv)
    if a.speculative_draft_model_path and not a.speculative_draft_model_mib:
        # What each rank loads of the draft: its weight files split over the tensor-parallel ranks.
        total = sum(e.stat().st_size for e in os.scandir(a.speculative_draft_model_path)
                    if e.name.endswith(".safetensors") and e.is_file())
        a.speculative_draft_model_mib = -(-total // a.tp_size) >> 20
    disable_ca = a.disable_custom_all_reduce or a.allreduce != "custom"
    return ServerArgs(a.model_path, a.tp_size, a.mem_fraction_static, disable_ca, a.disable_cuda_graph,
                      a.cuda_graph_max_bs, a.max_running_requests, a.max_total_tokens, a.model_mib, a.layers,
                      a.context_length, a.attention_workspace_mib, a.graph_workspace_mib, a.enable_symm_mem,
                      a.speculative_algorithm, a.speculative_draft_model_mib, a.speculative_draft_model_path,
                      a.draft_before_sizing,
                      a.dist_init_dir, a.truth_dir, a.serve_until)
