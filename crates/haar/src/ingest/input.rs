//! Inputs as bytes: a file mapped under the SIGBUS guard or read into a pooled buffer, a
//! caller's buffer lent as it is, a stream read to its end.
//!
//! Owns the checks that a file did not change while its bytes were taken (length, modification
//! time, the guard's fault flag) and the messages that refuse it. It must not know GRIB or any
//! store: framing and keying are [`super::keying`]'s, archiving is [`super::pipeline`]'s.

use std::borrow::Cow;
use std::io::Read;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::Input;
use super::guarded_map::GuardedMap;

/// Bytes per read(2): large enough that syscalls cost nothing measurable, small enough that
/// the file position shows a read in progress (the CLI's truncation test watches it).
const READ_CHUNK: usize = 8 << 20;

/// Reusable input buffers: anonymous mappings advised as huge pages. A file is read into the
/// smallest free buffer that holds it, and the buffer comes back when the file is stored, so
/// later files are read into pages that are already resident (first touch of fresh memory
/// costs more than the copy itself).
#[derive(Default)]
pub(crate) struct Buffers(Mutex<Vec<memmap2::MmapMut>>);

impl Buffers {
    fn take(&self, len: usize) -> std::io::Result<memmap2::MmapMut> {
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let best = (free.iter().enumerate())
            .filter(|(_, m)| m.len() >= len)
            .min_by_key(|(_, m)| m.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        let m = memmap2::MmapOptions::new().len(len).map_anon()?;
        #[cfg(target_os = "linux")]
        let _ = m.advise(memmap2::Advice::HugePage);
        Ok(m)
    }

    fn give(&self, m: memmap2::MmapMut) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(m);
    }
}

/// An input's bytes. A file is either mapped (no copy; a truncation reads zeros instead of
/// faulting, and [`Bytes::changed`] says so afterwards) or read with read(2) into a private
/// buffer, checked once read, so a file rewritten meanwhile cannot change bytes under ecCodes.
pub(crate) struct Bytes<'a> {
    data: Data<'a>,
    len: usize,
}

enum Data<'a> {
    /// A file mapped under the SIGBUS guard.
    Mapped(GuardedMap),
    /// A file read into a pooled buffer, returned to its pool on drop.
    Pooled(Option<memmap2::MmapMut>, Arc<Buffers>),
    /// Read whole (not a regular file, e.g. a pipe; an empty file; a stream), or a buffer
    /// handed over by the caller.
    Owned(Vec<u8>),
    /// The caller's buffer, lent for the whole ingestion.
    Borrowed(&'a [u8]),
}

impl Deref for Bytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.data {
            Data::Mapped(m) => m,
            Data::Pooled(m, _) => &m.as_ref().expect("held until drop")[..self.len],
            Data::Owned(v) => v,
            Data::Borrowed(b) => b,
        }
    }
}

impl Bytes<'_> {
    /// True if the file changed since it was opened, so these bytes must not be archived
    /// (only mapped bytes can; read bytes were checked once read, buffers cannot change).
    pub(crate) fn changed(&self) -> bool {
        matches!(&self.data, Data::Mapped(m) if m.changed())
    }

    /// The bytes at `offset..offset + len`, for a store to copy: a mapped file's are read
    /// into `scratch` with pread(2) (its pages are never faulted into this process; the key
    /// workers only touched the messages' headers), anything else is lent as it is. An error
    /// means the file shrank under the read.
    pub(crate) fn range<'s>(
        &'s self,
        offset: usize,
        len: usize,
        scratch: &'s mut Vec<u8>,
    ) -> std::io::Result<&'s [u8]> {
        match &self.data {
            Data::Mapped(m) => {
                scratch.resize(len, 0);
                m.read_at(offset as u64, scratch)?;
                Ok(&scratch[..])
            }
            _ => Ok(&self[offset..offset + len]),
        }
    }

    fn owned(v: Vec<u8>) -> Bytes<'static> {
        let len = v.len();
        Bytes {
            data: Data::Owned(v),
            len,
        }
    }
}

impl Drop for Bytes<'_> {
    fn drop(&mut self) {
        if let Data::Pooled(m, pool) = &mut self.data
            && let Some(m) = m.take()
        {
            pool.give(m);
        }
    }
}

/// The refusal of an input file that changed while haar used its bytes.
pub(crate) fn changed_while_read(name: &str) -> String {
    format!(
        "{name}: changed while being read (truncated, extended or rewritten meanwhile); nothing from it is archived; archive it again once no one is writing it"
    )
}

/// A store write that failed because its source, a mapped input, vanished under it: where user
/// code gets SIGBUS (caught by the guard), the kernel's copy in write(2) reports EFAULT. The
/// input changed, not the store (a failed append leaves the writer as it was).
pub(crate) fn source_vanished(e: &haar_store::Error) -> bool {
    matches!(e, haar_store::Error::Io { source, .. } if haar_store::store::os_error(source) == Some(libc::EFAULT))
}

/// What an input is called in reports and messages.
pub(crate) fn name(input: &Input<'_>) -> String {
    match input {
        Input::File(p) => p.display().to_string(),
        Input::Buffer { name, .. } | Input::Stream { name, .. } => name.clone(),
    }
}

/// The input's size as far as it is known before reading it (0 for a stream or a file that
/// cannot be examined), for progress.
pub(crate) fn size_hint(input: &Input<'_>) -> u64 {
    match input {
        Input::File(p) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        Input::Buffer { bytes, .. } => bytes.len() as u64,
        Input::Stream { .. } => 0,
    }
}

/// Takes an input's bytes; files are mapped when `map` (the store can take fields back, so a
/// change noticed after storing them costs nothing), else read.
pub(crate) fn load<'a>(
    input: Input<'a>,
    name: &str,
    pool: &Arc<Buffers>,
    map: bool,
) -> Result<Bytes<'a>, String> {
    match input {
        Input::File(path) => load_file(&path, pool, map),
        Input::Buffer {
            bytes: Cow::Borrowed(b),
            ..
        } => Ok(Bytes {
            data: Data::Borrowed(b),
            len: b.len(),
        }),
        Input::Buffer {
            bytes: Cow::Owned(v),
            ..
        } => Ok(Bytes::owned(v)),
        Input::Stream { mut reader, .. } => {
            let mut v = Vec::new();
            (reader.read_to_end(&mut v)).map_err(|e| format!("{name}: cannot read: {e}"))?;
            Ok(Bytes::owned(v))
        }
    }
}

/// Fills `buf` from `file` in chunks of at most [`READ_CHUNK`]; the bytes read (fewer at end
/// of file).
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let end = buf.len().min(got + READ_CHUNK);
        match file.read(&mut buf[got..end]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads a whole input file. A regular file must have the same length and modification time
/// after the read as before it and end where its length said: otherwise someone truncated,
/// extended or rewrote it meanwhile, the bytes may mix two versions, and the file is refused.
fn load_file(path: &Path, pool: &Arc<Buffers>, map: bool) -> Result<Bytes<'static>, String> {
    let name = path.display();
    let cannot = |e: std::io::Error| format!("{name}: cannot read: {e}");
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let before = file.metadata().map_err(cannot)?;
    if map && before.is_file() && before.len() > 0 {
        let copy = file.try_clone().map_err(cannot)?;
        if let Some(m) = GuardedMap::new(copy, &before) {
            let len = m.len();
            return Ok(Bytes {
                data: Data::Mapped(m),
                len,
            });
        }
    }
    if !before.is_file() || before.len() == 0 {
        let mut v = Vec::new();
        file.read_to_end(&mut v).map_err(cannot)?;
        return Ok(Bytes::owned(v));
    }
    let len = usize::try_from(before.len()).map_err(|_| format!("{name}: too large to read"))?;
    let mut buf = pool
        .take(len)
        .map_err(|e| format!("{name}: cannot allocate {len} bytes to read it into: {e}"))?;
    let read = read_full(&mut file, &mut buf[..len]).and_then(|got| {
        // One byte more: a file that grew meanwhile does not end at `len`.
        let extra = if got == len {
            read_full(&mut file, &mut [0u8; 1])?
        } else {
            0
        };
        Ok((got, extra, file.metadata()?))
    });
    let (got, extra, after) = match read {
        Ok(r) => r,
        Err(e) => {
            pool.give(buf);
            return Err(cannot(e));
        }
    };
    let same = got == len
        && extra == 0
        && after.len() == before.len()
        && after.modified().ok() == before.modified().ok();
    if !same {
        pool.give(buf);
        return Err(format!(
            "{name}: changed while being read (it was {len} bytes when opened, {got}{} bytes could be read, it is {} bytes now: truncated, extended or rewritten meanwhile); nothing from it is archived; archive it again once no one is writing it",
            if extra > 0 { "+" } else { "" },
            after.len()
        ));
    }
    Ok(Bytes {
        data: Data::Pooled(Some(buf), pool.clone()),
        len,
    })
}
