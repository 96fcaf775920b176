"""sglang/srt/model_executor/cuda_graph_runner.py (simulated): static inputs allocated in
__init__, then one graph per batch size captured into a shared graph memory pool; the custom
all-reduce registers the graph's buffers when the capture context closes."""
import torch

from sglang.srt.distributed import graph_capture, tensor_model_parallel_all_reduce

global_graph_memory_pool = None


class CudaGraphRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        max_bs = model_runner.server_args.cuda_graph_max_bs
        self.capture_bs = [bs for bs in (1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256) if bs <= max_bs]
        self.max_bs = max(self.capture_bs)
        self.max_num_token = self.max_bs
        with torch.device("cuda"):
            self.input_ids = torch.zeros((self.max_num_token,), dtype=torch.int64)
            self.req_pool_indices = torch.zeros((self.max_bs,), dtype=torch.int32)
            self.seq_lens = torch.full((self.max_bs,), 1, dtype=torch.int32)
            self.out_cache_loc = torch.zeros((self.max_num_token,), dtype=torch.int64)
            self.positions = torch.zeros((self.max_num_token,), dtype=torch.int64)
        self.graphs, self.output_buffers = {}, {}
        self.capture()

    def capture(self):
        with graph_capture():
            for bs in reversed(self.capture_bs):
                graph, output_buffers = self.capture_one_batch_size(bs)
                self.graphs[bs] = graph
                self.output_buffers[bs] = output_buffers

    def capture_one_batch_size(self, bs):
        global global_graph_memory_pool
        graph = torch.cuda.CUDAGraph()

        def run_once():
            return self.model_runner.model.forward(bs, all_reduce=tensor_model_parallel_all_reduce)

        for _ in range(2):
            torch.cuda.synchronize()
            run_once()
        with torch.cuda.graph(graph, pool=global_graph_memory_pool):
            if bs == self.max_bs and self.model_runner.server_args.graph_workspace_mib:
                # Simulation: a workspace the capture of the largest batch (captured first)
                # takes from the graph pool, as the attention backends' CUDA-graph buffers sized
                # by the largest batch do (sglang 0.5.23 layers/attention/flashinfer_backend.py
                # FlashInferAttnBackend.init_cuda_graph_state: cuda_graph_kv_indices of
                # max_num_tokens x max_context_len int32); the smaller batches reuse it.
                # --graph-workspace-mib is its size at a largest batch of 32 (the simulation's
                # default --cuda-graph-max-bs); it scales with the largest batch captured.
                size = (self.model_runner.server_args.graph_workspace_mib << 20) * self.max_bs // 32
                self.graph_workspace = torch.empty(size, dtype=torch.uint8, device="cuda")
            out = run_once()
        global_graph_memory_pool = graph.pool()
        return graph, out
