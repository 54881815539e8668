//! pakfile: read "PAK1" archives.
//!
//! Layout: the 4 bytes `PAK1`, an entry count (1 byte), a directory of that
//! many entries, then the data blob (every byte after the directory):
//!
//! ```text
//! entry = name_len (1 byte) | name (UTF-8) | offset (u32 BE) | len (u32 BE)
//! ```
//!
//! `offset` and `len` locate the entry's bytes inside the blob.

use std::fmt;

pub const MAGIC: &[u8; 4] = b"PAK1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    BadMagic,
    Truncated,
    BadName,
    OutOfRange { entry: usize },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadMagic => write!(f, "not a PAK1 archive"),
            Error::Truncated => write!(f, "directory is truncated"),
            Error::BadName => write!(f, "entry name is not UTF-8"),
            Error::OutOfRange { entry } => write!(f, "entry {} lies outside the data blob", entry),
        }
    }
}

impl std::error::Error for Error {}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() - self.pos < n {
            return Err(Error::Truncated);
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Parse a whole archive. Malformed input yields an `Error`.
pub fn parse(buf: &[u8]) -> Result<Vec<Entry>, Error> {
    let mut r = Reader { buf, pos: 0 };
    if r.take(4).map_err(|_| Error::BadMagic)? != MAGIC {
        return Err(Error::BadMagic);
    }
    let count = r.u8()? as usize;
    let mut dir = Vec::with_capacity(count);
    for _ in 0..count {
        let name_len = r.u8()? as usize;
        let name = std::str::from_utf8(r.take(name_len)?).map_err(|_| Error::BadName)?;
        let offset = r.u32()?;
        let len = r.u32()?;
        dir.push((name.to_string(), offset, len));
    }
    let blob = &buf[r.pos..];
    let mut entries = Vec::with_capacity(count);
    for (i, (name, offset, len)) in dir.into_iter().enumerate() {
        if offset + len > blob.len() as u32 {
            return Err(Error::OutOfRange { entry: i });
        }
        let data = blob[offset as usize..(offset + len) as usize].to_vec();
        entries.push(Entry { name, data });
    }
    Ok(entries)
}
