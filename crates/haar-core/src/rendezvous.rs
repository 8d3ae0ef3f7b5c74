//! Rendezvous (highest-random-weight) hashing of keys onto named lanes (design §7).
//!
//! Pure and deterministic across processes, machines and versions: the ranking depends only
//! on lane names and the key's canonical text, so every client agrees on where a field lives
//! without any coordination, and removing a lane moves only the keys that ranked it first.

use crate::Key;

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finaliser: spreads the bits of the combined hash.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The canonical text of a key for placement: pairs sorted by keyword, `k=v` joined by `,`.
pub fn canonical(key: &Key) -> String {
    key.sorted().to_string()
}

/// Score of `lane` for a key whose canonical hash is `key_hash`.
pub fn score(lane: &str, key_hash: u64) -> u64 {
    splitmix64(fnv1a64(lane.as_bytes()) ^ key_hash)
}

/// Indices of `lanes` ranked for `key`, best first (ties broken by lane name).
pub fn rank<S: AsRef<str>>(lanes: &[S], key: &Key) -> Vec<usize> {
    let h = fnv1a64(canonical(key).as_bytes());
    let mut idx: Vec<(u64, usize)> = lanes
        .iter()
        .enumerate()
        .map(|(i, l)| (score(l.as_ref(), h), i))
        .collect();
    idx.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| lanes[a.1].as_ref().cmp(lanes[b.1].as_ref()))
    });
    idx.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Key {
        Key::new()
            .with("class", "od")
            .with("date", format!("2026{:04}", i))
    }

    #[test]
    fn ranking_is_a_permutation_and_stable() {
        let lanes = ["a:1", "b:2", "c:3", "d:4"];
        for i in 0..100 {
            let r = rank(&lanes, &key(i));
            let mut s = r.clone();
            s.sort();
            assert_eq!(s, [0, 1, 2, 3]);
            assert_eq!(r, rank(&lanes, &key(i)));
        }
    }

    #[test]
    fn order_of_keywords_does_not_matter() {
        let a = Key::new().with("x", "1").with("y", "2");
        let b = Key::new().with("y", "2").with("x", "1");
        assert_eq!(rank(&["p", "q", "r"], &a), rank(&["p", "q", "r"], &b));
    }

    #[test]
    fn spreads_evenly_and_removal_moves_only_that_lanes_keys() {
        let lanes = ["n1:7000", "n2:7000", "n3:7000", "n4:7000"];
        let mut count = [0usize; 4];
        let n = 4000;
        for i in 0..n {
            count[rank(&lanes, &key(i))[0]] += 1;
        }
        for c in count {
            assert!(
                c > n as usize / 4 * 8 / 10 && c < n as usize / 4 * 12 / 10,
                "{count:?}"
            );
        }
        let fewer = ["n1:7000", "n2:7000", "n4:7000"];
        for i in 0..n {
            let before = lanes[rank(&lanes, &key(i))[0]];
            let after = fewer[rank(&fewer, &key(i))[0]];
            if before != "n3:7000" {
                assert_eq!(before, after, "key {i} moved although its lane stayed");
            }
        }
    }

    #[test]
    fn reference_values_are_frozen() {
        // Placement must not change between versions: these values are part of the format.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        // Computed independently (Python) from the formulas in design §7.
        let k = Key::new().with("date", "20261121").with("class", "od");
        assert_eq!(canonical(&k), "class=od,date=20261121");
        let h = fnv1a64(canonical(&k).as_bytes());
        assert_eq!(score("n1:7000", h), 0x4700_0ccd_7667_36fa);
        assert_eq!(
            rank(&["n1:7000", "n2:7000", "n3:7000", "n4:7000"], &k),
            [3, 1, 2, 0]
        );
    }
}
