//! The engine's sizing formula evaluated on the run (`culedger_analysis::sizing`: numbers
//! only) in the CLI's words: bytes in GiB and fractions as a run gave them, where the run's
//! value comes from, the pack's reserve filled in, a rank's GPU; and the evaluation's entry
//! points with the reconciliation's words (`recon::Words`) bound.

use crate::analysis::DeviceGroup;
use crate::explain::recon::Words;
use crate::load::Run;
use culedger_analysis::engines::Sizing;

pub use culedger_analysis::sizing::*;

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes in GiB, to two decimals (three below 0.01).
pub fn gib(b: i64) -> String {
    let g = b as f64 / GIB;
    if g != 0.0 && g.abs() < 0.01 {
        format!("{g:.3}")
    } else {
        format!("{g:.2}")
    }
}

/// A fraction as a run gave it: two decimals (`0.90`), more only where the value has them
/// (`0.995`, not `1.00`), at most four.
pub fn fraction(p: f64) -> String {
    let four = format!("{p:.4}");
    let trimmed = four.trim_end_matches('0');
    if trimmed.len() <= four.len() - 2 { format!("{p:.2}") } else { trimmed.to_string() }
}

/// Where the run's value of the parameter comes from, in words: `--mem-fraction-static 0.9 on
/// the command line of pid 5100`, `... on the command line`, `the default 0.9 (its note)`.
pub fn value_source(ev: &Evaluation) -> String {
    let v = ev.value;
    match &ev.value_source {
        ValueSource::Process { flag, pid } => format!("{flag} {v} on the command line of pid {pid}"),
        ValueSource::Command { flag } => format!("{flag} {v} on the command line"),
        ValueSource::Default { note } => format!("the default {v} ({note})"),
    }
}

/// A rank's GPU in words.
pub trait RankWords {
    /// Its GPU's number as nvidia-smi gives it (`0 MIG 1` for a MIG device), or its UUID's
    /// name where the host's numbering is not known (`crate::analysis::gpu_token`).
    fn gpu_number(&self) -> String;
    /// Its GPU in words: `GPU 3`, `GPU-8f2e1a0b`.
    fn gpu_words(&self) -> String;
}

impl RankWords for RankSizing {
    fn gpu_number(&self) -> String {
        crate::analysis::id_token(self.rank.device, self.rank.mig_index, Some(&self.rank.gpu))
    }

    fn gpu_words(&self) -> String {
        crate::analysis::gpu_words(&self.gpu_number())
    }
}

/// The pack's reserve in words.
pub trait ReserveWords {
    /// The reserve at `p` in words (`(1 - 0.90) x 95.00 GiB`) and bytes, for rank `r`.
    fn reserve(&self, r: &RankSizing, p: f64) -> (String, i64);
}

impl ReserveWords for Evaluation {
    fn reserve(&self, r: &RankSizing, p: f64) -> (String, i64) {
        let mut words = self.sizing.reserve.replace("{parameter}", &fraction(p));
        for (name, v) in self.reserve_inputs(r) {
            words = words.replace(&format!("{{{name}}}"), &format!("{} GiB", gib(v)));
        }
        (words, self.reserve_bytes(r, p))
    }
}

/// [`culedger_analysis::sizing::evaluate`], each rank's process named in the CLI's words.
pub fn evaluate(run: &Run, gs: &[DeviceGroup], pack: &str, s: &Sizing) -> Option<Evaluation> {
    culedger_analysis::sizing::evaluate(run, gs, pack, s, &Words)
}

#[cfg(test)]
mod tests {
    use super::fraction;

    /// A run at 0.995 is told its own value, not "1.00" (the vLLM refusal test runs at 0.995).
    #[test]
    fn a_fraction_is_shown_as_the_run_gave_it() {
        assert_eq!(fraction(0.9), "0.90");
        assert_eq!(fraction(0.86), "0.86");
        assert_eq!(fraction(0.995), "0.995");
        assert_eq!(fraction(0.9125), "0.9125");
        assert_eq!(fraction(1.0), "1.00");
    }
}
