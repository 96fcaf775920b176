//! Shared setup of the scenario tests.
#![allow(dead_code)]

use culedger_scenarios::Sim;

pub const MIB: u64 = 1 << 20;
pub const DEVICES: u64 = 4;
pub const TOTAL_MIB: u64 = 8192;
pub const CTX_MIB: u64 = 256;
pub const GRAPH_MIB: u64 = 16;
pub const IPC_OPEN_MIB: u64 = 2;

/// A machine with known, small parameters (4 devices of 8 GiB, 256 MiB per context).
pub fn machine(test: &str) -> Sim {
    let mut sim = Sim::new(test);
    sim.env("FAKECUDA_DEVICES", DEVICES.to_string())
        .env("FAKECUDA_TOTAL_MIB", TOTAL_MIB.to_string())
        .env("FAKECUDA_CTX_MIB", CTX_MIB.to_string())
        .env("FAKECUDA_GRAPH_MIB", GRAPH_MIB.to_string())
        .env("FAKECUDA_IPC_OPEN_MIB", IPC_OPEN_MIB.to_string());
    sim
}

/// cudaError_t values used in assertions (driver_types.h).
pub mod err {
    pub const INVALID_VALUE: u64 = 1;
    pub const MEMORY_ALLOCATION: u64 = 2;
    pub const INSUFFICIENT_DRIVER: u64 = 35;
    pub const INVALID_MEMCPY_DIRECTION: u64 = 21;
    pub const INVALID_DEVICE: u64 = 101;
    pub const INVALID_RESOURCE_HANDLE: u64 = 400;
    pub const PEER_ACCESS_ALREADY_ENABLED: u64 = 704;
    pub const HOST_MEMORY_ALREADY_REGISTERED: u64 = 712;
    pub const HOST_MEMORY_NOT_REGISTERED: u64 = 713;
    pub const STREAM_CAPTURE_UNSUPPORTED: u64 = 900;
}
