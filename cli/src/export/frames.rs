//! The call sites' frames in the memory_viz snapshot: each `alloc` trace entry that is one of
//! the top allocations carries its site's frames, and the blocks of memory still live are
//! split by call site.

use super::snapshot::{Block, Frame, Segment};
use crate::analysis::{DeviceGroup, Member};
use crate::model::{Failure, SiteRec};
use std::collections::BTreeMap;

/// Frames a memory_viz block carries at most.
const VIZ_FRAMES: usize = 32;

/// memory_viz frames of a site: Python frames (file, line, function), then the native
/// frames outside culedger, CUDA and libc (object, offset, symbol), innermost first.
fn frames(site: &SiteRec) -> Vec<Frame> {
    let py = site.python.iter().map(|f| Frame { filename: f.file.clone(), line: f.line, name: f.function.clone() });
    let native = site.native.iter().filter(|f| !f.internal).map(|f| Frame {
        filename: f.object.clone(),
        line: 0,
        name: f.symbol.clone().unwrap_or_else(|| f.offset.clone()),
    });
    py.chain(native).take(VIZ_FRAMES).collect()
}

/// Frames of the allocation a timeline sample recorded: the top allocation of `owner`
/// (`pid N`) made by the record `(t_ms, seq)`, in `category`, when it has a site.
pub fn frames_of_allocation(g: &DeviceGroup, owner: &str, order: (i64, i64), category: &str) -> Option<Vec<Frame>> {
    let pid: i64 = owner.strip_prefix("pid ")?.parse().ok()?;
    let m = g.members.iter().find(|m| m.pid() == pid)?;
    let a = m.dev.top_allocations.iter().find(|a| (a.t_ms, a.seq.unwrap_or(-1)) == order && a.category == category)?;
    let site = m.report.sites.iter().find(|s| Some(s.id) == a.site)?;
    Some(frames(site))
}

/// The frames of a failed allocation's call site, when recorded.
pub fn frames_of_failure(m: &Member, f: &Failure) -> Option<Vec<Frame>> {
    let site = m.report.sites.iter().find(|s| Some(s.id) == f.site)?;
    Some(frames(site))
}

/// The call sites of each (process, category) on a device, in the order the writer first
/// saw them (site ids are handed out in that order), each with the bytes it held at its
/// peak: a synthesised rise that no top allocation explains takes the frames of the site
/// whose bytes it reaches, so the trace's allocations carry real frames wherever the
/// report names a site for their category.
pub struct SiteCursor {
    /// (pid, category) -> [(bytes still to hand out, frames)], in site order.
    sites: BTreeMap<(i64, String), Vec<Placed>>,
}

impl SiteCursor {
    pub fn new(g: &DeviceGroup) -> SiteCursor {
        let mut sites: BTreeMap<(i64, String), Vec<(i64, Placed)>> = BTreeMap::new();
        for m in &g.members {
            for s in m.dev.sites.iter().filter(|s| s.peak_bytes > 0) {
                let Some(site) = m.report.sites.iter().find(|x| x.id == s.site) else { continue };
                sites.entry((m.pid(), s.category.clone())).or_default().push((s.site, (s.peak_bytes, frames(site))));
            }
        }
        let sites = sites
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_by_key(|(id, _)| *id);
                (k, v.into_iter().map(|(_, p)| p).collect())
            })
            .collect();
        SiteCursor { sites }
    }

    /// The frames for a rise of `bytes` in `pid`'s `category`.
    pub fn frames(&mut self, pid: i64, category: &str, bytes: i64) -> Option<Vec<Frame>> {
        let queue = self.sites.get_mut(&(pid, category.to_string()))?;
        // Sites whose bytes are handed out give way to the next one; the last one stays.
        while queue.len() > 1 && queue[0].0 <= 0 {
            queue.remove(0);
        }
        let (left, frames) = queue.first_mut()?;
        *left -= bytes;
        Some(frames.clone())
    }
}

/// Live bytes of a call site to place in blocks, with the site's frames.
type Placed = (i64, Vec<Frame>);

/// Split the synthesised blocks of each (process, category) into the live bytes of its call
/// sites, each block with the frames of its site; bytes no site accounts for keep the
/// synthetic frame. Blocks still tile their segment.
pub fn attach_frames(segments: &mut [Segment], g: &DeviceGroup) {
    // (pid, category) -> [(bytes, frames)] still to place, largest first.
    let mut todo: BTreeMap<(i64, String), Vec<Placed>> = BTreeMap::new();
    for m in &g.members {
        for s in m.dev.sites.iter().filter(|s| s.live_bytes > 0) {
            let Some(site) = m.report.sites.iter().find(|x| x.id == s.site) else { continue };
            todo.entry((m.pid(), s.category.clone())).or_default().push((s.live_bytes, frames(site)));
        }
    }
    for v in todo.values_mut() {
        v.sort_by_key(|(b, _)| std::cmp::Reverse(*b));
        v.reverse(); // popped from the end: largest first
    }
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|&i| segments[i].address);
    for i in order {
        let seg = &mut segments[i];
        let Some(key) = seg.frames.first().and_then(|f| parse_owner(&f.name)) else { continue };
        let Some(queue) = todo.get_mut(&key) else { continue };
        let Some(template) = seg.blocks.first().cloned() else { continue };
        let (mut addr, end) = (seg.address, seg.address + seg.total_size);
        let mut blocks = Vec::new();
        while addr < end {
            let Some((left, fr)) = queue.last_mut() else { break };
            let size = (*left).min(end - addr);
            blocks.push(Block { address: addr, size, requested_size: size, frames: fr.clone(), ..template.clone() });
            addr += size;
            *left -= size;
            if *left == 0 {
                queue.pop();
            }
        }
        if addr < end {
            let size = end - addr;
            blocks.push(Block { address: addr, size, requested_size: size, ..template });
        }
        seg.blocks = blocks;
    }
}

/// `pid 4102 other` -> (4102, "other"), as `export::Synth` names its owners.
fn parse_owner(name: &str) -> Option<(i64, String)> {
    let (pid, cat) = name.strip_prefix("pid ")?.split_once(' ')?;
    Some((pid.parse().ok()?, cat.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NativeRec, PyFrameRec};

    #[test]
    fn owners_parse() {
        assert_eq!(parse_owner("pid 4102 kv_pool"), Some((4102, "kv_pool".into())));
        assert_eq!(parse_owner("device unknown"), None);
    }

    #[test]
    fn frames_skip_internal_native_ones() {
        let s = SiteRec {
            id: 1,
            python: vec![PyFrameRec { file: "a.py".into(), function: "f".into(), line: 3, line_is_current: true }],
            native: vec![
                NativeRec { object: "libculedger.so".into(), symbol: None, offset: "0x1".into(), internal: true },
                NativeRec { object: "libx.so".into(), symbol: None, offset: "0x2".into(), internal: false },
            ],
        };
        let f = frames(&s);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].filename.as_str(), f[0].line, f[0].name.as_str()), ("a.py", 3, "f"));
        assert_eq!((f[1].filename.as_str(), f[1].name.as_str()), ("libx.so", "0x2"));
    }
}
