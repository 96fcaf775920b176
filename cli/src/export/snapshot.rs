//! The memory_viz snapshot's types, as PyTorch's `torch.cuda.memory._snapshot()` names
//! them: segments of blocks, one trace per device, frames. `export` fills them; `frames`
//! gives blocks and trace entries their call sites' frames.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TraceEntry {
    /// `alloc`, `free_completed`, or `oom` (an allocation failed; `size` is what was asked).
    pub action: &'static str,
    pub addr: i64,
    pub size: i64,
    pub stream: i64,
    pub time_us: i64,
    pub frames: Vec<Frame>,
    pub category: String,
    /// For `oom`: the free memory the device last reported, as torch records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Block {
    pub address: i64,
    pub size: i64,
    pub requested_size: i64,
    pub state: &'static str,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    pub device: i64,
    pub address: i64,
    pub total_size: i64,
    pub allocated_size: i64,
    pub active_size: i64,
    pub requested_size: i64,
    pub stream: i64,
    pub segment_type: &'static str,
    pub segment_pool_id: (i64, i64),
    pub is_expandable: bool,
    pub frames: Vec<Frame>,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    pub device_traces: Vec<Vec<TraceEntry>>,
    pub allocator_settings: BTreeMap<String, String>,
    pub categories: Vec<String>,
}
