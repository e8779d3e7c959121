//! The key layout under the mirror's prefix. Every name is fixed-width decimal, so names sort in number order:
//!
//! | key                                   | object                                                        |
//! |---------------------------------------|---------------------------------------------------------------|
//! | `{prefix}/manifest/{epoch:020}`       | the claim of an epoch (its creation with `Create` is the claim) |
//! | `{prefix}/manifest/{epoch:020}.{u:010}` | the holder's update `u` (1, 2…), written after a snapshot     |
//! | `{prefix}/wal/{slot:020}`             | the segment in slot `slot`: slots are dense, 0, 1, 2…         |
//! | `{prefix}/snapshot/{slot:020}`        | the state just before `wal/{slot}`                            |

use object_store::path::Path;

use crate::types::Epoch;

/// The paths of one mirror.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    prefix: Path,
}

/// The name of a manifest: its epoch and update number (0 for the claim).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) struct ManifestName {
    pub epoch: Epoch,
    pub update: u32,
}

impl Layout {
    pub(crate) fn new(prefix: Path) -> Self {
        Self { prefix }
    }

    pub(crate) fn prefix(&self) -> &Path {
        &self.prefix
    }

    pub(crate) fn dir(&self, name: &str) -> Path {
        self.prefix.clone().join(name)
    }

    pub(crate) fn manifest(&self, name: ManifestName) -> Path {
        let leaf = if name.update == 0 {
            format!("{:020}", name.epoch)
        } else {
            format!("{:020}.{:010}", name.epoch, name.update)
        };
        self.dir("manifest").join(leaf)
    }

    pub(crate) fn wal(&self, slot: u64) -> Path {
        self.dir("wal").join(format!("{slot:020}"))
    }

    pub(crate) fn snapshot(&self, slot: u64) -> Path {
        self.dir("snapshot").join(format!("{slot:020}"))
    }

    /// Chunk `chunk` ≥ 1 of the snapshot at `slot` (chunk 0 is [`Layout::snapshot`]).
    pub(crate) fn snapshot_chunk(&self, slot: u64, chunk: u32) -> Path {
        self.dir("snapshot").join(format!("{slot:020}.{chunk:010}"))
    }

    /// The manifest a listed location names, if it is one.
    pub(crate) fn parse_manifest(&self, location: &Path) -> Option<ManifestName> {
        let leaf = self.leaf_in(location, "manifest")?;
        let (epoch, update) = match leaf.split_once('.') {
            None => (leaf, None),
            Some((e, u)) => (e, Some(u)),
        };
        let epoch = parse_fixed(epoch, 20)?;
        let update = match update {
            None => 0,
            Some(u) => u32::try_from(parse_fixed(u, 10)?).ok().filter(|u| *u > 0)?,
        };
        Some(ManifestName { epoch, update })
    }

    /// The slot a listed location under `dir` (`wal` or `snapshot`) names, if it does. A snapshot's chunk names
    /// its slot too, so that collection deletes it with its snapshot.
    pub(crate) fn parse_slot(&self, location: &Path, dir: &str) -> Option<u64> {
        let leaf = self.leaf_in(location, dir)?;
        match leaf.split_once('.') {
            Some((slot, chunk)) if dir == "snapshot" => {
                parse_fixed(chunk, 10).filter(|c| *c > 0 && *c <= u64::from(u32::MAX))?;
                parse_fixed(slot, 20)
            }
            _ => parse_fixed(leaf, 20),
        }
    }

    fn leaf_in<'a>(&self, location: &'a Path, dir: &str) -> Option<&'a str> {
        if location.prefix_match(&self.dir(dir))?.count() != 1 {
            return None;
        }
        location.filename()
    }
}

fn parse_fixed(digits: &str, width: usize) -> Option<u64> {
    if digits.len() != width || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_in_number_order() {
        let layout = Layout::new(Path::from("jobs/j1"));
        let claim = ManifestName { epoch: 7, update: 0 };
        let update = ManifestName { epoch: 7, update: 3 };
        assert_eq!(layout.manifest(claim).as_ref(), "jobs/j1/manifest/00000000000000000007");
        assert_eq!(layout.manifest(update).as_ref(), "jobs/j1/manifest/00000000000000000007.0000000003");
        assert_eq!(layout.parse_manifest(&layout.manifest(claim)), Some(claim));
        assert_eq!(layout.parse_manifest(&layout.manifest(update)), Some(update));
        assert!(layout.manifest(claim) < layout.manifest(update));
        assert!(layout.manifest(update) < layout.manifest(ManifestName { epoch: 8, update: 0 }));
        assert_eq!(layout.wal(42).as_ref(), "jobs/j1/wal/00000000000000000042");
        assert_eq!(layout.parse_slot(&layout.wal(42), "wal"), Some(42));
        assert_eq!(layout.parse_slot(&layout.snapshot(42), "wal"), None);
        assert_eq!(layout.snapshot_chunk(42, 3).as_ref(), "jobs/j1/snapshot/00000000000000000042.0000000003");
        assert_eq!(layout.parse_slot(&layout.snapshot_chunk(42, 3), "snapshot"), Some(42));
        assert_eq!(layout.parse_slot(&layout.snapshot(42), "snapshot"), Some(42));
        assert_eq!(layout.parse_slot(&Path::from("jobs/j1/wal/00000000000000000042.0000000003"), "wal"), None);
        assert_eq!(
            layout.parse_slot(&Path::from("jobs/j1/snapshot/00000000000000000042.0000000000"), "snapshot"),
            None
        );
        assert_eq!(layout.parse_slot(&Path::from("jobs/j1/wal/42"), "wal"), None);
        assert_eq!(layout.parse_manifest(&Path::from("jobs/j1/manifest/00000000000000000007.0000000000")), None);
    }

    #[test]
    fn an_empty_prefix_is_the_root() {
        let layout = Layout::new(Path::default());
        assert_eq!(layout.wal(1).as_ref(), "wal/00000000000000000001");
        assert_eq!(layout.parse_slot(&layout.wal(1), "wal"), Some(1));
    }
}
