//! What culedger could not account: lost records, calls without a context, entry points
//! handed out unwrapped, warnings.

use super::*;

impl Ledger {
    /// A hooked call that was forwarded but could not be recorded.
    pub fn note_loss(&self, what: &str) {
        self.health.lost_events.fetch_add(1, Ordering::Relaxed);
        self.note_warning(&format!("not recorded: {what}"));
    }

    /// A hooked call made while no context was current on the calling thread (a runtime
    /// loading its modules during its own initialisation): there was no device to charge.
    pub fn no_context(&self) {
        self.health.no_context_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Hooked calls counted by [`no_context`](Self::no_context).
    pub fn no_context_calls(&self) -> u64 {
        self.health.no_context_calls.load(Ordering::Relaxed)
    }

    /// An entry point handed out unwrapped (listed once).
    pub fn note_unwrapped(&self, symbol: &str) {
        {
            let mut list = self.health.unwrapped.lock();
            if list.len() < UNWRAPPED_KEPT && !list.iter().any(|s| s == symbol) {
                list.push(symbol.to_string());
            }
        }
        self.bump();
    }

    /// A one-line warning for the report (newlines are flattened). Distinct warnings
    /// are kept up to 64; later ones are counted.
    pub fn note_warning(&self, line: &str) {
        let line = line.replace(['\n', '\r'], " ");
        {
            let mut list = self.health.warnings.lock();
            if !list.contains(&line) {
                if list.len() < WARNINGS_KEPT {
                    list.push(line);
                } else {
                    self.health.warnings_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.bump();
    }
}
