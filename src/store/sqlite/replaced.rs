//! A database file deleted or replaced while the store had it open.
//!
//! SQLite keeps using the file it opened: after `rm locks.db` or `mv new.db locks.db`, a
//! connection still reads and writes the old file (unlinked, or under no name), so its
//! holder's heartbeats keep succeeding there while other processes open a new file at the
//! path and take the same names. The store therefore compares the identity of the file at
//! the path (device and inode) with the one it opened, before every statement. When they
//! differ (or the path is gone), the leases live in the old file become **ghosts**: extending
//! one fails with [`ErrorKind::Replaced`](crate::store::ErrorKind::Replaced), which the
//! heartbeat reports as a lost lock, instead of extending a lease nobody else can see; the
//! store then opens the file at the path for every new call.
//!
//! Windows has no inode here, and SQLite opens files there without `FILE_SHARE_DELETE`, so a
//! file in use can be neither deleted nor renamed over: nothing is compared.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// The identity of a file: device and inode.
#[cfg(unix)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

/// The identity of a file: none is compared where files have no inode (see the module doc).
#[cfg(not(unix))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId;

/// The identity of the file at `path` now.
#[cfg(unix)]
pub fn file_id(path: &Path) -> io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// The identity of the file at `path` now (only whether it exists, off Unix).
#[cfg(not(unix))]
pub fn file_id(path: &Path) -> io::Result<FileId> {
    std::fs::metadata(path).map(|_| FileId)
}

/// Whether the file at `path` is no longer `opened`: another file is there, or none. A path
/// that cannot be examined for another reason (permissions) is left to the statement to
/// report.
pub fn moved(path: &Path, opened: FileId) -> bool {
    match file_id(path) {
        Ok(id) => id != opened,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Which leases a ghost was: a lock, or a semaphore's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lease {
    /// A lock (the lease table).
    Lock,
    /// A semaphore holder's permits.
    Permits,
}

/// An owner of a ghost, and the end of its lease in the old file.
type Owner = (Vec<u8>, Instant);

/// The leases that were live in files replaced under this store, until their lease ends:
/// (kind, name) → each owner with the end of its lease there.
#[derive(Debug, Default)]
pub struct Ghosts {
    leases: HashMap<(Lease, Vec<u8>), Vec<Owner>>,
}

impl Ghosts {
    /// Adds the leases of a replaced file, live for `remaining_ms` from `now`, and forgets
    /// those of earlier files whose lease ended, so they stay as many as the live leases of
    /// the last files replaced.
    pub fn add(&mut self, now: Instant, leases: Vec<(Lease, Vec<u8>, Vec<u8>, i64)>) {
        self.leases.retain(|_, owners| {
            owners.retain(|(_, until)| *until > now);
            !owners.is_empty()
        });
        for (lease, name, owner, remaining_ms) in leases {
            let remaining = Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0));
            let owners = self.leases.entry((lease, name)).or_default();
            owners.retain(|(o, _)| *o != owner);
            owners.push((owner, now + remaining));
        }
    }

    /// The owners of `name`'s ghosts whose lease has not ended (those that ended go).
    fn live(&mut self, lease: Lease, name: &[u8]) -> Option<&[Owner]> {
        if self.leases.is_empty() {
            return None;
        }
        let key = (lease, name.to_vec());
        let owners = self.leases.get_mut(&key)?;
        let now = Instant::now();
        owners.retain(|(_, until)| *until > now);
        if owners.is_empty() {
            self.leases.remove(&key);
            return None;
        }
        self.leases.get(&key).map(Vec::as_slice)
    }

    /// Whether (`lease`, `name`, `owner`) was live in a replaced file and still would be
    /// there: until then every extension of it fails, also where the file now at the path
    /// shows the lease (another file renamed over this one reads its old `-wal` file).
    pub fn contains(&mut self, lease: Lease, name: &[u8], owner: &[u8]) -> bool {
        self.live(lease, name)
            .is_some_and(|owners| owners.iter().any(|(o, _)| o == owner))
    }

    /// Whether another owner than `owner` held `name` in a replaced file, and still would:
    /// this process keeps the name busy in the new file until then, as the old file would
    /// have, since that holder believes it holds until its next call.
    pub fn held_by_another(&mut self, lease: Lease, name: &[u8], owner: &[u8]) -> bool {
        self.live(lease, name)
            .is_some_and(|owners| owners.iter().any(|(o, _)| o != owner))
    }

    /// Forgets (`lease`, `name`, `owner`): it was taken again, in the file now at the path.
    pub fn forget(&mut self, lease: Lease, name: &[u8], owner: &[u8]) {
        if self.leases.is_empty() {
            return;
        }
        let key = (lease, name.to_vec());
        if let Some(owners) = self.leases.get_mut(&key) {
            owners.retain(|(o, _)| o != owner);
            if owners.is_empty() {
                self.leases.remove(&key);
            }
        }
    }

    /// How many ghosts are remembered (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.leases.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests;
