//! A region file shrunk, resized or replaced under a live mapping: with the fault guard
//! installed (as `controld` does), the mapping reads zeros instead of killing the process
//! with SIGBUS, and `verify` names what happened.

use std::path::PathBuf;
use tessera_region::layout::TOTAL_SIZE;
use tessera_region::{Region, RegionError, RegionInit, MAX_DEVICES};

fn temp_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tessera-fault-{tag}-{}.region", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn made(tag: &str) -> (PathBuf, Region) {
    let path = temp_path(tag);
    let mut memory_caps = [None; MAX_DEVICES];
    memory_caps[0] = Some(1 << 30);
    let init = RegionInit {
        name: "team-a".into(),
        memory_caps,
    };
    let region = Region::open_or_create(&path, &init).unwrap();
    (path, region)
}

#[test]
fn a_region_truncated_under_the_mapping_reads_zeros_and_fails_verify() {
    tessera_region::fault::install().unwrap();
    let (path, region) = made("truncated");
    assert_eq!(region.memory_cap(0), Some(1 << 30));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    // Without the guard this read kills the test process with SIGBUS.
    assert_eq!(region.memory_used(0), 0);
    assert!(region.processes().is_empty());
    let err = region.verify().unwrap_err();
    assert!(err.to_string().contains("shrank to 0 bytes"), "{err}");
    // Writes land in the private zeros and are harmless.
    region.set_memory_cap(0, Some(5));
    drop(region);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_region_grown_or_replaced_under_the_mapping_fails_verify() {
    tessera_region::fault::install().unwrap();
    let (path, region) = made("grown");
    region.verify().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(10 << 30).unwrap();
    assert!(matches!(
        region.verify(),
        Err(RegionError::Truncated { len, .. }) if len == 10 << 30
    ));
    file.set_len(TOTAL_SIZE as u64).unwrap();
    region.verify().unwrap();

    let (other, _other_region) = made("other");
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&other, &path).unwrap();
    let err = region.verify().unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    std::fs::remove_file(&path).unwrap();
    std::fs::hard_link(&other, &path).unwrap();
    let err = region.verify().unwrap_err();
    assert!(err.to_string().contains("another file"), "{err}");
    std::fs::remove_file(&path).unwrap();
    let err = region.verify().unwrap_err();
    assert!(err.to_string().contains("is gone"), "{err}");
    let _ = std::fs::remove_file(other);
}

#[test]
fn a_board_truncated_under_the_daemon_reads_zeros() {
    tessera_region::fault::install().unwrap();
    let path = temp_path("board");
    let board = tessera_region::Board::create(&path).unwrap();
    assert!(board.set(0, 3));
    assert_ne!(board.online(0), 0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    // Without the guard this read kills the process with SIGBUS.
    assert_eq!(board.online(0), 0);
    drop(board);
    let _ = std::fs::remove_file(path);
}
