//! The read-only `fields/` view (design §15.1): one directory per schema level, one file per
//! field, built from `list` and read with `retrieve_lent` (the pool mapping itself on pmem).
//! Owns the name encoding and the view's inode numbers; it must not write to the store.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use haar::Key;
use haar::{FieldBytes, FieldStore};

use crate::files::Errno;

/// How old the tree may get before a look at `fields/` rebuilds it.
const REFRESH: Duration = Duration::from_secs(1);

/// A level's key as one path component: `k=v,k=v`, with `%`, `/` and NUL escaped.
pub fn component(key: &Key) -> String {
    let mut s = String::new();
    for (i, (k, v)) in key.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        escape_into(&mut s, k);
        s.push('=');
        escape_into(&mut s, v);
    }
    s
}

fn escape_into(s: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '%' => s.push_str("%25"),
            '/' => s.push_str("%2F"),
            '\0' => s.push_str("%00"),
            c => s.push(c),
        }
    }
}

/// One node of the view.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A directory: its parent and its children by name.
    Dir {
        /// Parent's view inode (the view's root is its own parent here).
        parent: u64,
        /// Children by name.
        children: BTreeMap<String, u64>,
    },
    /// A field: its full key and length.
    Field {
        /// The key as stored.
        key: Key,
        /// Length in bytes.
        length: u64,
    },
}

/// The view: a tree of inodes numbered from `base`, rebuilt from `list` when stale.
pub struct Fields {
    store: Box<dyn FieldStore>,
    base: u64,
    /// Inode of each path (stable across rebuilds while the mount lives).
    inos: HashMap<String, u64>,
    entries: HashMap<u64, Entry>,
    built: Option<Instant>,
}

impl Fields {
    /// A view over `store` whose root is inode `base` (others follow it).
    pub fn new(store: Box<dyn FieldStore>, base: u64) -> Fields {
        let mut f = Fields {
            store,
            base,
            inos: HashMap::new(),
            entries: HashMap::new(),
            built: None,
        };
        f.inos.insert(String::new(), base);
        f.entries.insert(
            base,
            Entry::Dir {
                parent: base,
                children: BTreeMap::new(),
            },
        );
        f
    }

    /// Whether `ino` belongs to this view.
    pub fn owns(&self, ino: u64) -> bool {
        ino >= self.base
    }

    fn ino_of(&mut self, path: &str) -> u64 {
        let next = self.base + self.inos.len() as u64;
        *self.inos.entry(path.to_string()).or_insert(next)
    }

    /// Rebuilds the tree from `list` if it is older than a second.
    pub fn refresh(&mut self) -> Result<(), Errno> {
        if self.built.is_some_and(|t| t.elapsed() < REFRESH) {
            return Ok(());
        }
        let all = haar::open::requests(None)
            .ok()
            .and_then(|r| r.into_iter().next())
            .ok_or(libc::EIO)?;
        let listed = self.store.list(&all).map_err(|e| {
            let (op, uid, pid) = crate::metrics::requester();
            tracing::error!(
                op,
                uid,
                pid,
                errno = "EIO",
                "cannot list the store for fields/: {e}"
            );
            libc::EIO
        })?;
        let mut entries: HashMap<u64, Entry> = HashMap::new();
        let root = self.base;
        entries.insert(
            root,
            Entry::Dir {
                parent: root,
                children: BTreeMap::new(),
            },
        );
        for f in listed {
            if f.db.get(crate::format::DB_KEYWORD).is_some() {
                continue;
            }
            let names = [
                component(&f.db.without_empty()),
                component(&f.index.without_empty()),
                component(&f.datum.without_empty()),
            ];
            let mut parent = root;
            let mut path = String::new();
            for (level, name) in names.iter().enumerate() {
                path.push('/');
                path.push_str(name);
                let ino = self.ino_of(&path);
                if let Some(Entry::Dir { children, .. }) = entries.get_mut(&parent) {
                    children.insert(name.clone(), ino);
                }
                if level == 2 {
                    entries.insert(
                        ino,
                        Entry::Field {
                            key: f.key(),
                            length: f.data.length,
                        },
                    );
                } else {
                    entries.entry(ino).or_insert_with(|| Entry::Dir {
                        parent,
                        children: BTreeMap::new(),
                    });
                }
                parent = ino;
            }
        }
        self.entries = entries;
        self.built = Some(Instant::now());
        Ok(())
    }

    /// The entry of view inode `ino`.
    pub fn entry(&self, ino: u64) -> Result<&Entry, Errno> {
        self.entries.get(&ino).ok_or(libc::ENOENT)
    }

    /// Subdirectories of a directory entry (for its link count).
    pub fn subdirs(&self, e: &Entry) -> u32 {
        match e {
            Entry::Dir { children, .. } => children
                .values()
                .filter(|c| matches!(self.entries.get(c), Some(Entry::Dir { .. })))
                .count() as u32,
            Entry::Field { .. } => 0,
        }
    }

    /// The child `name` of directory `ino`.
    pub fn lookup(&mut self, ino: u64, name: &str) -> Result<u64, Errno> {
        if ino == self.base {
            self.refresh()?;
        }
        match self.entry(ino)? {
            Entry::Dir { children, .. } => children.get(name).copied().ok_or(libc::ENOENT),
            Entry::Field { .. } => Err(libc::ENOTDIR),
        }
    }

    /// The bytes of field `ino`: lent by the store where it can (a pmem pool's mapping),
    /// else retrieved into a buffer.
    pub fn open(&self, ino: u64) -> Result<FieldBytes, Errno> {
        let Entry::Field { key, .. } = self.entry(ino)? else {
            return Err(libc::EISDIR);
        };
        let fail = |e: haar::Error| {
            let (op, uid, pid) = crate::metrics::requester();
            tracing::error!(op, uid, pid, errno = "EIO", "cannot read {key}: {e}");
            libc::EIO
        };
        if let Some(lent) = self.store.retrieve_lent(key) {
            return match lent.map_err(fail)? {
                Some((_, bytes)) => Ok(bytes),
                // Wiped since the listing.
                None => Err(libc::ENOENT),
            };
        }
        let mut out = None;
        self.store
            .retrieve(&haar::frontend::single_key_request(key), &mut |_, b, _| {
                out = Some(b.to_vec());
                Ok(())
            })
            .map_err(fail)?;
        out.map(FieldBytes::Owned).ok_or(libc::ENOENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_escape_what_a_path_cannot_hold() {
        let k = Key::new().with("class", "od").with("expver", "a/b%c");
        assert_eq!(component(&k), "class=od,expver=a%2Fb%25c");
    }
}
