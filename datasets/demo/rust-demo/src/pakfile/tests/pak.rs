use pakfile::{parse, Error};

/// An archive with the given (name, offset, len) directory and blob.
fn archive(dir: &[(&str, u32, u32)], blob: &[u8]) -> Vec<u8> {
    let mut out = b"PAK1".to_vec();
    out.push(dir.len() as u8);
    for (name, offset, len) in dir {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
    }
    out.extend_from_slice(blob);
    out
}

#[test]
fn reads_entries() {
    let buf = archive(&[("hello.txt", 0, 5), ("world.txt", 5, 6), ("empty", 11, 0)], b"hello world");
    let entries = parse(&buf).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].name, "hello.txt");
    assert_eq!(entries[0].data, b"hello");
    assert_eq!(entries[1].data, b" world");
    assert!(entries[2].data.is_empty());
}

#[test]
fn entries_may_overlap() {
    let buf = archive(&[("a", 0, 4), ("b", 2, 4)], b"abcdef");
    let entries = parse(&buf).unwrap();
    assert_eq!(entries[1].data, b"cdef");
}

#[test]
fn rejects_bad_magic() {
    assert_eq!(parse(b"PAK2\x00"), Err(Error::BadMagic));
    assert_eq!(parse(b"PA"), Err(Error::BadMagic));
}

#[test]
fn rejects_truncated_directory() {
    let buf = archive(&[("name", 0, 1)], b"x");
    assert_eq!(parse(&buf[..buf.len() - 4]), Err(Error::Truncated));
    assert_eq!(parse(b"PAK1\x02\x01a"), Err(Error::Truncated));
}

#[test]
fn rejects_entry_past_blob_end() {
    let buf = archive(&[("ok", 0, 3), ("long", 1, 3)], b"abc");
    assert_eq!(parse(&buf), Err(Error::OutOfRange { entry: 1 }));
    let buf = archive(&[("far", 10, 0)], b"abc");
    assert_eq!(parse(&buf), Err(Error::OutOfRange { entry: 0 }));
}

#[test]
fn rejects_non_utf8_name() {
    let buf = b"PAK1\x01\x01\xff\x00\x00\x00\x00\x00\x00\x00\x00";
    assert_eq!(parse(buf), Err(Error::BadName));
}
