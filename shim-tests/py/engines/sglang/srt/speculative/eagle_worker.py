"""sglang/srt/speculative/eagle_worker.py (simulated): EAGLEWorker(TpModelWorker), the draft
worker of speculative decoding: its own ModelRunner (is_draft_worker=True) loads the draft
model's weights. Before sglang 0.5.23 the scheduler built it after the target worker, whose
ModelRunner had already sized and allocated the KV pool (python/sglang/srt/speculative/
eagle_worker.py EAGLEWorker.__init__ -> TpModelWorker.__init__(is_draft_worker=True), e.g.
@00559eac): the draft weights arrive after the sizing query (SemiAnalysisAI/InferenceX issue
2128). In 0.5.23 (managers/scheduler.py Scheduler.init_model_worker, then init_memory_pools ->
init_target_memory_pool) it is built before the target's pool, whose sizing query
(mem_cache/kv_cache_configurator.py KVCacheConfigurator._profile_available_bytes) then sees the
draft weights: "If using speculative decoding, draft weights are now counted"."""
from simtruth import truth

from sglang.srt.managers.tp_worker import TpModelWorker


class EAGLEWorker(TpModelWorker):
    def __init__(self, server_args, gpu_id, tp_rank, target_worker):
        self.target_worker = target_worker
        with truth.category("weights"):
            super().__init__(server_args=server_args, gpu_id=gpu_id, tp_rank=tp_rank, is_draft_worker=True)
