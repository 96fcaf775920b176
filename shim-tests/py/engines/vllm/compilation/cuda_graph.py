"""vllm/compilation/cuda_graph.py (simulated): CUDAGraphWrapper captures a runnable per size
into one graph pool."""
import torch


class CUDAGraphWrapper:
    def __init__(self, runnable):
        self.runnable = runnable
        self.graph_pool = torch.cuda.graph_pool_handle()
        self.concrete_cudagraph_entries = {}

    def __call__(self, num_tokens):
        self.runnable(num_tokens)  # warm-up run outside the capture
        cudagraph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cudagraph, pool=self.graph_pool):
            output = self.runnable(num_tokens)
        self.concrete_cudagraph_entries[num_tokens] = (cudagraph, output)
        return output
