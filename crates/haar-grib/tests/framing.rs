//! Framing properties: exact offsets and errors on hand-made inputs, agreement
//! between the slice and streaming framers, and no panic on any input (random
//! bytes and mutations of real ecCodes sample messages).

use haar_grib::frame::tests_support::{minimal_grib1, minimal_grib2};
use haar_grib::{FrameError, MessageReader, messages};
use proptest::prelude::*;
use std::io::Read;

/// Frame with both framers and check they agree; returns the slice framer's view
/// as (index, offset, len, edition) or the error's (index, offset).
/// (index, offset, length, edition) of a framed message.
type Framed = (usize, u64, usize, u8);
/// (index, offset) of a framing error.
type FrameFault = (Option<usize>, Option<u64>);

fn frame_both(buf: &[u8]) -> Vec<Result<Framed, FrameFault>> {
    let a: Vec<_> = messages(buf)
        .map(|r| {
            r.map(|m| (m.index, m.offset, m.bytes.len(), m.edition))
                .map_err(|e| (e.index(), e.offset()))
        })
        .collect();
    // Stream through a reader that returns short reads, to exercise refills.
    let b: Vec<_> = MessageReader::new(Trickle { data: buf, pos: 0 })
        .map(|r| {
            r.map(|m| {
                assert_eq!(
                    &buf[m.offset as usize..m.offset as usize + m.bytes.len()],
                    &m.bytes[..]
                );
                (m.index, m.offset, m.bytes.len(), m.edition)
            })
            .map_err(|e| (e.index(), e.offset()))
        })
        .collect();
    assert_eq!(a, b, "slice and stream framers disagree");
    a
}

/// A reader that hands out at most 7 bytes at a time.
struct Trickle<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(7).min(self.data.len() - self.pos);
        out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(format!("/usr/share/eccodes/samples/{name}"))
        .expect("ecCodes samples are installed")
}

#[test]
fn mixed_editions_with_padding() {
    let mut buf = b"\0\0\0\x0cpad".to_vec();
    buf.extend(minimal_grib1(100));
    buf.extend(b"GRI"); // a false start
    buf.extend(minimal_grib2(200));
    buf.extend(vec![0u8; 13]);
    buf.extend(sample("GRIB2.tmpl"));
    buf.extend(sample("GRIB1.tmpl"));
    buf.extend(b"trailing garbage");
    let got = frame_both(&buf);
    let g2 = sample("GRIB2.tmpl").len();
    let g1 = sample("GRIB1.tmpl").len();
    assert_eq!(
        got,
        vec![
            Ok((0, 7, 100, 1)),
            Ok((1, 110, 200, 2)),
            Ok((2, 323, g2, 2)),
            Ok((3, 323 + g2 as u64, g1, 1)),
        ]
    );
    let mut it = messages(&buf);
    it.by_ref().for_each(drop);
    assert_eq!(it.skipped_bytes(), 7 + 3 + 13 + 16);
}

#[test]
fn no_grib_is_not_grib() {
    for buf in [
        &b""[..],
        b"hello world",
        b"GRIB\0\0\0\x09 unknown edition",
        b"CDF\x01netcdf",
    ] {
        let got: Vec<_> = messages(buf).collect();
        assert_eq!(got.len(), 1);
        assert!(
            matches!(got[0], Err(FrameError::NotGrib { len }) if len == buf.len() as u64),
            "{got:?}"
        );
        let got: Vec<_> = MessageReader::new(buf).collect();
        assert!(
            matches!(got[..], [Err(FrameError::NotGrib { .. })]),
            "{got:?}"
        );
    }
}

#[test]
fn truncated_names_message_and_offset() {
    let mut buf = minimal_grib2(64);
    let second = minimal_grib1(300);
    buf.extend(&second[..150]);
    let got: Vec<_> = messages(&buf).collect();
    assert!(got[0].is_ok());
    match &got[1] {
        Err(FrameError::Truncated {
            index,
            offset,
            declared_len,
            available,
        }) => {
            assert_eq!(
                (*index, *offset, *declared_len, *available),
                (1, 64, 300, 150)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[1].as_ref().unwrap_err().to_string(),
        "GRIB message 2 (1-based) at byte offset 64 is truncated: it declares 300 bytes but only 150 remain"
    );
    frame_both(&buf);
}

#[test]
fn bad_end_marker_then_resume() {
    let mut first = minimal_grib2(80);
    first[76] = b'8';
    let mut buf = first;
    buf.extend(minimal_grib2(90));
    let got = frame_both(&buf);
    assert_eq!(got, vec![Err((Some(0), Some(0))), Ok((1, 80, 90, 2))]);
    assert!(matches!(
        messages(&buf).next(),
        Some(Err(FrameError::BadEndMarker {
            index: 0,
            offset: 0
        }))
    ));
}

#[test]
fn impossible_length_is_reported() {
    let mut m = minimal_grib2(64);
    m[8..16].copy_from_slice(&5u64.to_be_bytes());
    assert!(matches!(
        messages(&m).next(),
        Some(Err(FrameError::BadLength {
            index: 0,
            offset: 0,
            declared_len: 5
        }))
    ));
    frame_both(&m);
}

/// Large GRIB1 (ECMWF convention): the 24-bit length has bit 0x800000 set and
/// counts 120-byte units; section 4's length (< 120) gives the correction.
#[test]
fn large_grib1_length_correction() {
    let units: u64 = 3;
    let sec4_len: u64 = 40;
    let true_len = units * 120 - sec4_len + 4; // 324
    let mut m = vec![0u8; true_len as usize];
    m[..4].copy_from_slice(b"GRIB");
    m[4..7].copy_from_slice(&(0x80_0000 | units as u32).to_be_bytes()[1..]);
    m[7] = 1;
    // Section 1: 28 bytes, flags (octet 8) = 0x80: a section 2 follows.
    m[8..11].copy_from_slice(&28u32.to_be_bytes()[1..]);
    m[8 + 7] = 0x80;
    // Section 2 at 36: 32 bytes. Section 4 at 68.
    m[36..39].copy_from_slice(&32u32.to_be_bytes()[1..]);
    m[68..71].copy_from_slice(&(sec4_len as u32).to_be_bytes()[1..]);
    let n = m.len();
    m[n - 4..].copy_from_slice(b"7777");
    m.extend(minimal_grib2(50));
    let got = frame_both(&m);
    assert_eq!(
        got,
        vec![Ok((0, 0, true_len as usize, 1)), Ok((1, true_len, 50, 2))]
    );
}

#[test]
fn real_samples_frame_whole() {
    let dir = std::fs::read_dir("/usr/share/eccodes/samples").unwrap();
    let mut n = 0;
    for entry in dir {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.contains("grib") && !name.starts_with("GRIB") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let got = frame_both(&data);
        assert_eq!(
            got.len(),
            1,
            "{name}: {got:?} (file of {} bytes)",
            data.len()
        );
        // Some samples (sh_ml_grib1) carry zero padding after the message.
        let len = got[0].as_ref().map(|m| m.2).unwrap();
        assert!(data[len..].iter().all(|&b| b == 0), "{name}");
        n += 1;
    }
    assert!(n > 50, "expected the ecCodes GRIB samples, found {n}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        frame_both(&data);
    }

    #[test]
    fn random_bytes_with_magic_never_panic(
        pre in proptest::collection::vec(any::<u8>(), 0..40),
        edition in 0u8..4,
        len in any::<[u8; 8]>(),
        post in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut data = pre;
        data.extend(b"GRIB");
        data.extend(&len[..3]);
        data.push(edition);
        data.extend(&len);
        data.extend(post);
        frame_both(&data);
    }

    #[test]
    fn mutated_real_messages_never_panic(
        which in 0usize..4,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let names = ["GRIB1.tmpl", "GRIB2.tmpl", "reduced_gg_pl_32_grib1.tmpl", "regular_ll_sfc_grib2.tmpl"];
        let mut data = sample(names[which]);
        data.extend(sample(names[(which + 1) % 4]));
        // Mutations concentrate on the headers, where framing looks.
        for (at, byte) in flips {
            let i = at.index(data.len().min(64));
            data[i] = byte;
        }
        if do_cut {
            let n = cut.index(data.len());
            data.truncate(n);
        }
        let got = frame_both(&data);
        // Whatever happened, each message found is a whole, well-ended frame.
        for m in messages(&data).flatten() {
            prop_assert!(m.bytes.starts_with(b"GRIB") && m.bytes.ends_with(b"7777"));
        }
        prop_assert!(!got.is_empty());
    }
}
