//! The reconciliation in the CLI's words: the analysis crate reconciles, from what a
//! free-memory query told a process to what was free when its allocation failed (or its pool
//! was allocated), item by item (`culedger_analysis::recon`, docs/explain.md); this names the
//! query's process and writes each item's words ([`Words`]), and names an API's hidden cost
//! for sentences ([`api_words`]).

use crate::analysis::DeviceGroup;
use crate::clock::Clock;
use crate::model::Report;
use culedger_analysis::recon::ReconWords;

pub use culedger_analysis::explain::{Item, ItemKind, Recon};
pub use culedger_analysis::recon::PoolWindow;

/// A reconciliation's words.
pub struct Words;

impl ReconWords for Words {
    fn who(&self, r: &Report) -> String {
        crate::words::who(r)
    }

    fn items(&self, items: &mut [Item], c: &Clock) {
        crate::words::recon_items(items, c)
    }
}

/// The reconciliation a device's pool went through, in words: that of its earliest failed
/// allocation, else of its largest pool (`culedger_analysis::recon::failure_reconciliation`).
pub fn failure_reconciliation(g: &DeviceGroup) -> Option<PoolWindow> {
    culedger_analysis::recon::failure_reconciliation(g, &Words)
}

/// Words for the hidden cost of an API, for sentences: `peer access`, `IPC opens`, ...
pub fn api_words(api: &str) -> String {
    crate::words::api_class(&culedger_analysis::costs::ApiClass::of(api))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_words_for_sentences() {
        assert_eq!(api_words("cudaIpcOpenMemHandle"), "IPC opens");
        assert_eq!(api_words("cuIpcOpenMemHandle_v2"), "IPC opens");
        assert_eq!(api_words("cudaDeviceEnablePeerAccess"), "peer access");
        assert_eq!(api_words("cuGraphInstantiateWithFlags"), "graph instantiation");
        assert_eq!(api_words("cuFoo"), "cuFoo");
    }
}
