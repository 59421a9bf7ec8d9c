//! Region files: creation, agreement between openers, and every way a file can be wrong.
//! A bad file is an error that names the problem, never a panic, a crash or a hang.

use std::mem::offset_of;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_region::layout::{
    DeviceAccount, Header, ProcessEntry, RegionLayout, ABI_VERSION, HEADER_SIZE, TOTAL_SIZE,
};
use tessera_region::{Region, RegionError, RegionInit, MAX_DEVICES};

fn temp_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tessera-files-{tag}-{}.region", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn init(name: &str, cap0: Option<u64>) -> RegionInit {
    let mut memory_caps = [None; MAX_DEVICES];
    memory_caps[0] = cap0;
    RegionInit {
        name: name.into(),
        memory_caps,
    }
}

/// A valid region file at a fresh path.
fn valid(tag: &str) -> PathBuf {
    let path = temp_path(tag);
    drop(Region::open_or_create(&path, &init("team-a", Some(1 << 30))).unwrap());
    path
}

fn poke(path: &Path, offset: usize, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
}

fn set_len(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Opens `path` both ways (open, open_or_create): both must fail alike, as `check` says.
fn refused(path: &Path, check: impl Fn(&RegionError) -> bool) -> RegionError {
    let err = Region::open(path).expect_err("opened a bad region");
    assert!(check(&err), "unexpected error: {err:?}");
    let msg = err.to_string();
    assert!(!msg.contains('\n') && msg.len() < 400, "{msg}");
    let again = Region::open_or_create(path, &init("other", None))
        .expect_err("open_or_create accepted a bad region");
    assert!(check(&again), "open_or_create: unexpected error: {again:?}");
    err
}

#[test]
fn a_new_region_holds_its_init_and_later_openers_keep_it() {
    let path = temp_path("new");
    let mut first = init("team-a", Some(4 << 30));
    first.memory_caps[3] = Some(0);
    let a = Region::open_or_create(&path, &first).unwrap();
    assert_eq!(a.name(), "team-a");
    assert_eq!(a.path(), Some(path.as_path()));
    assert_eq!(a.memory_cap(0), Some(4 << 30));
    assert_eq!(a.memory_cap(1), None);
    assert_eq!(a.memory_cap(3), Some(0));
    assert_eq!(a.memory_cap(MAX_DEVICES), Some(0), "no account: cap 0");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), TOTAL_SIZE as u64);
    // An existing valid region keeps its own name and caps.
    let b = Region::open_or_create(&path, &init("team-b", Some(1))).unwrap();
    assert_eq!(b.name(), "team-a");
    assert_eq!(b.memory_cap(0), Some(4 << 30));
    // Caps are shared: one side's change is the other's.
    b.set_memory_cap(1, Some(123));
    assert_eq!(a.memory_cap(1), Some(123));
    b.set_memory_cap(MAX_DEVICES + 5, Some(1));
    let c = Region::open(&path).unwrap();
    assert_eq!(c.memory_cap(1), Some(123));
    assert_eq!(c.memory_used(0), 0);
    assert_eq!(c.memory_used(MAX_DEVICES), 0);
    let _ = std::fs::remove_file(path);
}

#[test]
fn concurrent_creators_agree_on_one_region() {
    let path = temp_path("race");
    let names: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let path = &path;
                s.spawn(move || {
                    let r = Region::open_or_create(path, &init(&format!("c{i}"), Some(i))).unwrap();
                    format!("{} {:?}", r.name(), r.memory_cap(0))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn bad_names_are_refused_before_any_file_is_made() {
    for bad in ["", "Team", "-a", "a_b", "a/b", &"x".repeat(64)] {
        let path = temp_path("badname");
        match Region::open_or_create(&path, &init(bad, None)) {
            Err(RegionError::BadName(n)) => assert_eq!(n, bad),
            other => panic!("{bad:?}: {other:?}"),
        }
        assert!(!path.exists());
        assert!(matches!(
            Region::anonymous(&init(bad, None)),
            Err(RegionError::BadName(_))
        ));
    }
    let msg = RegionError::BadName("A".into()).to_string();
    assert!(msg.contains("a-z, 0-9 and '-'"), "{msg}");
}

#[test]
fn a_missing_file_is_an_io_error_for_open() {
    let path = temp_path("missing");
    match Region::open(&path) {
        Err(RegionError::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("{other:?}"),
    }
    assert!(!path.exists(), "open never creates");
}

#[test]
fn an_empty_file_is_refused_by_open_and_by_open_or_create() {
    // A region appears at its path whole, so an empty file there was emptied by someone:
    // making it again would hand them a region with the opener's caps.
    let path = temp_path("empty");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        Region::open(&path),
        Err(RegionError::Truncated { len: 0, .. })
    ));
    assert!(matches!(
        Region::open_or_create(&path, &init("fresh", None)),
        Err(RegionError::Truncated { len: 0, .. })
    ));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left as it was");
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_symbolic_link_is_never_followed() {
    let target = valid("link-target");
    let link = temp_path("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        Region::open(&link),
        Err(RegionError::Foreign { .. })
    ));
    assert!(matches!(
        Region::open_or_create(&link, &init("other", None)),
        Err(RegionError::Foreign { .. })
    ));
    // A dangling link is not created through either.
    let dangling = temp_path("dangling");
    let nowhere = temp_path("nowhere");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    assert!(Region::open_or_create(&dangling, &init("other", None)).is_err());
    assert!(!nowhere.exists());
    for p in [target, link, dangling] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn foreign_files_are_named_foreign() {
    let path = temp_path("foreign");
    std::fs::write(&path, b"#!/bin/sh\necho this is not a region\n").unwrap();
    let err = refused(&path, |e| matches!(e, RegionError::Foreign { .. }));
    assert!(err.to_string().contains("not a Tessera region"), "{err}");
    // Full size, wrong magic.
    let path2 = valid("foreign2");
    poke(&path2, 0, b"SIMGPU\0\0");
    refused(&path2, |e| matches!(e, RegionError::Foreign { .. }));
    // A directory is not a region either.
    let dir = std::env::temp_dir();
    assert!(Region::open(&dir).is_err());
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(path2);
}

#[test]
fn truncated_and_overlong_files_are_named_truncated() {
    for len in [
        3,
        8,
        100,
        HEADER_SIZE as u64,
        TOTAL_SIZE as u64 - 1,
        TOTAL_SIZE as u64 + 4096,
    ] {
        let path = valid("trunc");
        set_len(&path, len);
        match refused(&path, |e| matches!(e, RegionError::Truncated { .. })) {
            RegionError::Truncated {
                len: l, expected, ..
            } => {
                assert_eq!((l, expected), (len, TOTAL_SIZE as u64))
            }
            _ => unreachable!(),
        }
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn other_versions_are_named_with_both_versions() {
    let path = valid("version");
    poke(&path, offset_of!(Header, abi_version), &7u32.to_ne_bytes());
    let err = refused(
        &path,
        |e| matches!(e, RegionError::Version { found: 7, expected, .. } if *expected == ABI_VERSION),
    );
    assert!(err.to_string().contains("version 7"), "{err}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn corrupt_fields_are_named_corrupt() {
    let dev = offset_of!(RegionLayout, devices);
    let proc0 = offset_of!(RegionLayout, processes);
    let entry = std::mem::size_of::<ProcessEntry>();
    let cases: Vec<(&str, usize, Vec<u8>, &str)> = vec![
        (
            "header size",
            offset_of!(Header, header_size),
            64u32.to_ne_bytes().to_vec(),
            "header of 64",
        ),
        (
            "total size",
            offset_of!(Header, total_size),
            5u64.to_ne_bytes().to_vec(),
            "says 5 bytes",
        ),
        (
            "devices",
            offset_of!(Header, device_count),
            17u32.to_ne_bytes().to_vec(),
            "17 devices",
        ),
        (
            "name charset",
            offset_of!(Header, name),
            b"Team A\0".to_vec(),
            "container name",
        ),
        (
            "empty name",
            offset_of!(Header, name),
            vec![0; 8],
            "container name",
        ),
        (
            "junk after name",
            offset_of!(Header, name) + 40,
            b"x".to_vec(),
            "container name",
        ),
        (
            "name without NUL",
            offset_of!(Header, name),
            vec![b'a'; 64],
            "container name",
        ),
        (
            "slot state",
            proc0 + 5 * entry,
            9u32.to_ne_bytes().to_vec(),
            "slot 5 has state 9",
        ),
        (
            "live slot without pid",
            proc0 + 7 * entry + offset_of!(ProcessEntry, state),
            1u32.to_ne_bytes().to_vec(),
            "slot 7 has no pid",
        ),
    ];
    for (what, offset, bytes, says) in cases {
        let path = valid("corrupt");
        poke(&path, offset, &bytes);
        let err = refused(&path, |e| matches!(e, RegionError::Corrupt { .. }));
        assert!(err.to_string().contains(says), "{what}: {err}");
        let _ = std::fs::remove_file(path);
    }
    // Counters are data, not structure: odd values open, and operations stay sane.
    let path = valid("counters");
    poke(
        &path,
        dev + offset_of!(DeviceAccount, memory_used),
        &u64::MAX.to_ne_bytes(),
    );
    let r = Region::open(&path).unwrap();
    assert_eq!(r.memory_used(0), u64::MAX);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_half_created_region_is_refused_by_both_opens() {
    // Sized and all zero, as a region's file was before its header: nobody makes one at the
    // path any more, so it was zeroed by someone, and it stays refused.
    let path = temp_path("half");
    set_len_new(&path, TOTAL_SIZE as u64);
    let err = refused_by_open(&path);
    assert!(err.to_string().contains("never finished"), "{err}");
    assert!(Region::open_or_create(&path, &init("again", Some(5))).is_err());
    let _ = std::fs::remove_file(&path);
    // A header whose `ready` was cleared.
    drop(Region::open_or_create(&path, &init("third", None)).unwrap());
    poke(&path, offset_of!(Header, ready), &0u32.to_ne_bytes());
    refused_by_open(&path);
    assert!(Region::open_or_create(&path, &init("third", None)).is_err());
    let _ = std::fs::remove_file(path);
}

fn set_len_new(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

fn refused_by_open(path: &Path) -> RegionError {
    let err = Region::open(path).expect_err("opened a half-created region");
    assert!(matches!(err, RegionError::Corrupt { .. }), "{err:?}");
    err
}

#[test]
fn random_damage_never_panics() {
    // xorshift: deterministic, no dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let path = valid("fuzz");
    let pristine = std::fs::read(&path).unwrap();
    for round in 0..300 {
        let mut bytes = pristine.clone();
        for _ in 0..(1 + next() % 4) {
            // Mostly the header and the first slots, where the checks are.
            let span = if round % 2 == 0 { HEADER_SIZE } else { 4096 };
            let at = (next() as usize) % span;
            bytes[at] = next() as u8;
        }
        if round % 7 == 0 {
            bytes.truncate((next() as usize) % (TOTAL_SIZE + 1));
        }
        std::fs::write(&path, &bytes).unwrap();
        let outcome = std::panic::catch_unwind(|| Region::open(&path).map(|r| r.memory_used(0)));
        assert!(outcome.is_ok(), "round {round}: open panicked");
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn an_anonymous_region_counts_like_a_file() {
    let r: &'static Region = Box::leak(Box::new(
        Region::anonymous(&init("solo", Some(1000))).unwrap(),
    ));
    assert_eq!(r.path(), None);
    assert_eq!(r.name(), "solo");
    let me = r.claim_slot().unwrap();
    me.reserve_memory(0, 1000).unwrap();
    assert!(me.reserve_memory(0, 1).is_err());
    assert_eq!(r.processes().len(), 1);
    assert_eq!(r.processes()[0].memory[0], 1000);
    drop(me);
    assert_eq!(r.memory_used(0), 0);
    assert!(r.processes().is_empty());
}

#[test]
fn verify_notices_a_region_spoiled_while_mapped() {
    let path = valid("verify");
    let region = Region::open(&path).unwrap();
    region.verify().unwrap();
    poke(&path, offset_of!(Header, total_size), &7u64.to_ne_bytes());
    assert!(matches!(region.verify(), Err(RegionError::Corrupt { .. })));
    poke(
        &path,
        offset_of!(Header, total_size),
        &(TOTAL_SIZE as u64).to_ne_bytes(),
    );
    region.verify().unwrap();
    poke(&path, offset_of!(Header, name), b"team-b");
    assert!(matches!(region.verify(), Err(RegionError::Corrupt { .. })));
    poke(&path, 0, b"GARBAGE!");
    assert!(matches!(region.verify(), Err(RegionError::Foreign { .. })));
    let _ = std::fs::remove_file(path);
}

#[test]
fn valid_names_are_what_regions_accept() {
    for (name, ok) in [("team-a", true), ("a/b", false), ("", false), ("-a", false)] {
        assert_eq!(tessera_region::is_valid_name(name), ok, "{name}");
        let made = Region::anonymous(&init(name, None));
        assert_eq!(made.is_ok(), ok, "{name}");
    }
}
