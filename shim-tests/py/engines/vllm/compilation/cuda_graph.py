"""vllm/compilation/cuda_graph.py (simulated): CUDAGraphWrapper captures a runnable per size
into one graph pool; every wrapper is registered (_all_instances) so that
GPUModelRunner.profile_cudagraph_memory can point them at a throwaway pool and clear what it
captured there (clear_all_graphs)."""
import torch


class CUDAGraphWrapper:
    _all_instances = []

    def __init__(self, runnable, workspace_bytes=None):
        self.runnable = runnable
        # Simulation: what the capture of the largest size takes from the graph pool beside
        # the run's activations (the attention backends' CUDA-graph metadata sized by the
        # largest batch); the smaller sizes, captured after it, reuse the pool.
        self.workspace_bytes = workspace_bytes or (lambda n: 0)
        self.graph_pool = torch.cuda.graph_pool_handle()
        self.concrete_cudagraph_entries = {}
        self.workspace = None
        CUDAGraphWrapper._all_instances.append(self)

    def __call__(self, num_tokens):
        self.runnable(num_tokens)  # warm-up run outside the capture
        cudagraph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cudagraph, pool=self.graph_pool):
            if self.workspace is None and self.workspace_bytes(num_tokens):
                self.workspace = torch.empty(self.workspace_bytes(num_tokens), dtype=torch.uint8, device="cuda")
            output = self.runnable(num_tokens)
        self.concrete_cudagraph_entries[num_tokens] = (cudagraph, output)
        return output

    @classmethod
    def clear_all_graphs(cls):
        """Drops every wrapper's graphs and what they hold (their pool's memory is then free)."""
        for w in cls._all_instances:
            w.concrete_cudagraph_entries.clear()
            w.workspace = None
