//! Which host processes map which files, from `/proc/<pid>/maps`: the link between a
//! container's region file and the host pids of its processes. A region records its
//! processes' pids in the container's pid namespace; NVML names them by host pid.
//!
//! Reading every process's maps costs tens of microseconds each, too much for every status
//! on a node of a thousand processes, so [`ProcessMaps`] keeps what each process maps
//! shared (a region is always mapped shared) and reads a process again only when it is new,
//! when its entry is some seconds old, or when the caller suspects it (a process on a GPU
//! that seems to map no region).

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How old an entry may get before its process is read again (spread over up to twice
/// that by pid, so that a thousand processes seen at once are not all read again at once).
const REFRESH: Duration = Duration::from_secs(5);

/// A file as `/proc/<pid>/maps` names it: device, inode, and path. The path is a fallback
/// for file systems whose maps show another device number than `stat` (btrfs subvolumes,
/// overlayfs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileId {
    major: u32,
    minor: u32,
    inode: u64,
    path: Vec<u8>,
}

impl FileId {
    /// The file at `path`, as it is now.
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        let meta = std::fs::metadata(path)?;
        let dev = meta.dev();
        Ok(FileId {
            major: libc::major(dev),
            minor: libc::minor(dev),
            inode: meta.ino(),
            path: std::fs::canonicalize(path)?
                .into_os_string()
                .into_encoded_bytes(),
        })
    }

    fn matches(&self, mapped: &FileId) -> bool {
        self.inode == mapped.inode
            && ((self.major, self.minor) == (mapped.major, mapped.minor)
                || self.path == mapped.path)
    }
}

/// One line of a maps file, when it maps a file shared: the file as maps names it.
fn parse_shared(line: &[u8]) -> Option<FileId> {
    // `start-end perms offset major:minor inode   path`; the path may hold spaces.
    let mut rest = line;
    let mut field = || {
        let start = rest.iter().position(|b| *b != b' ')?;
        rest = &rest[start..];
        let end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
        let (field, after) = rest.split_at(end);
        rest = after;
        Some(field)
    };
    let _range = field()?;
    let perms = field()?;
    if perms.get(3) != Some(&b's') {
        return None;
    }
    let _offset = field()?;
    let dev = std::str::from_utf8(field()?).ok()?;
    let inode: u64 = std::str::from_utf8(field()?).ok()?.parse().ok()?;
    if inode == 0 {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    let start = rest.iter().position(|b| *b != b' ').unwrap_or(rest.len());
    Some(FileId {
        major: u32::from_str_radix(major, 16).ok()?,
        minor: u32::from_str_radix(minor, 16).ok()?,
        inode,
        path: rest[start..].to_vec(),
    })
}

/// What one process maps shared, as last read.
#[derive(Debug)]
struct Entry {
    shared: Vec<FileId>,
    read_at: Instant,
    /// Its pid in its own pid namespace, once asked for.
    namespace_pid: Option<Option<u32>>,
}

/// What the processes of the node map shared; see the module's documentation.
#[derive(Debug)]
pub struct ProcessMaps {
    proc_root: PathBuf,
    entries: HashMap<u32, Entry>,
    buffer: Vec<u8>,
}

impl ProcessMaps {
    /// Reads processes from `proc_root` (`/proc`).
    pub fn new(proc_root: &Path) -> ProcessMaps {
        ProcessMaps {
            proc_root: proc_root.to_path_buf(),
            entries: HashMap::new(),
            buffer: Vec::with_capacity(64 << 10),
        }
    }

    /// Lists the processes of the node (less `ignore`): forgets those gone, reads those new
    /// or due.
    pub fn update(&mut self, ignore: &[u32]) {
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else {
            return;
        };
        let live: HashSet<u32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|pid| !ignore.contains(pid))
            .collect();
        self.entries.retain(|pid, _| live.contains(pid));
        let now = Instant::now();
        for pid in live {
            let due = self.entries.get(&pid).is_none_or(|e| {
                let spread = REFRESH * (pid % 16) / 16;
                now.duration_since(e.read_at) >= REFRESH + spread
            });
            if due {
                self.read(pid);
            }
        }
    }

    /// Reads `pids` again now (those still alive).
    pub fn reread(&mut self, pids: &[u32]) {
        for &pid in pids {
            if self.entries.contains_key(&pid) {
                self.read(pid);
            }
        }
    }

    fn read(&mut self, pid: u32) {
        self.buffer.clear();
        let path = self.proc_root.join(pid.to_string()).join("maps");
        let read = std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut self.buffer));
        // A process that ended, or whose maps this user may not read, maps nothing.
        let shared = match read {
            Ok(_) => self
                .buffer
                .split(|b| *b == b'\n')
                .filter_map(parse_shared)
                .collect(),
            Err(_) => Vec::new(),
        };
        self.entries.insert(
            pid,
            Entry {
                shared,
                read_at: Instant::now(),
                namespace_pid: None,
            },
        );
    }

    /// For each list of `files` (a container's), the host pids that map any of them, sorted.
    pub fn mapping(&self, files: &[Vec<FileId>]) -> Vec<Vec<u32>> {
        let mut found = vec![Vec::new(); files.len()];
        for (&pid, entry) in &self.entries {
            for (i, files) in files.iter().enumerate() {
                if files
                    .iter()
                    .any(|file| entry.shared.iter().any(|m| file.matches(m)))
                {
                    found[i].push(pid);
                }
            }
        }
        for pids in &mut found {
            pids.sort_unstable();
        }
        found
    }

    /// Whether the node has a process `pid` (as last listed).
    pub fn has(&self, pid: u32) -> bool {
        self.entries.contains_key(&pid)
    }

    /// The pid of host process `pid` in its own (innermost) pid namespace, from the `NSpid`
    /// line of its status; `pid` itself when the kernel has no such line.
    pub fn namespace_pid(&mut self, pid: u32) -> Option<u32> {
        let proc_root = &self.proc_root;
        let entry = self.entries.get_mut(&pid)?;
        *entry
            .namespace_pid
            .get_or_insert_with(|| read_namespace_pid(proc_root, pid))
    }
}

fn read_namespace_pid(proc_root: &Path, pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    match status.lines().find_map(|l| l.strip_prefix("NSpid:")) {
        Some(pids) => pids.split_ascii_whitespace().last()?.parse().ok(),
        None => Some(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let line = b"7f1c2c000000-7f1c2c021000 rw-s 00000000 103:0a 1234567                    /run/tessera/a b.region";
        let file = parse_shared(line).unwrap();
        assert_eq!((file.major, file.minor, file.inode), (0x103, 0x0a, 1234567));
        assert_eq!(file.path, b"/run/tessera/a b.region");
        let private = b"7f1c2c000000-7f1c2c021000 r--p 00000000 fe:00 99   /usr/lib/libc.so.6";
        assert_eq!(parse_shared(private), None);
        let anonymous = b"7ffd5b1e0000-7ffd5b201000 rw-s 00000000 00:00 0        [stack]";
        assert_eq!(parse_shared(anonymous), None);
        assert_eq!(parse_shared(b""), None);
        assert_eq!(parse_shared(b"garbage"), None);
        let no_path = parse_shared(b"7f1c2c000000-7f1c2c021000 rw-s 00000000 00:2a 77").unwrap();
        assert_eq!(
            (no_path.minor, no_path.inode, no_path.path.len()),
            (0x2a, 77, 0)
        );
    }

    #[test]
    fn a_file_matches_by_device_or_by_path() {
        let file = FileId {
            major: 1,
            minor: 2,
            inode: 3,
            path: b"/a".to_vec(),
        };
        let other_dev = FileId {
            major: 0,
            minor: 40,
            ..file.clone()
        };
        assert!(file.matches(&file));
        assert!(file.matches(&other_dev));
        assert!(!file.matches(&FileId {
            path: b"/b".to_vec(),
            ..other_dev.clone()
        }));
        assert!(!file.matches(&FileId {
            inode: 4,
            ..file.clone()
        }));
    }

    #[test]
    fn finds_this_process_mapping_a_file() {
        let path = std::env::temp_dir().join(format!("tessera-procfs-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(4096).unwrap();
        let me = std::process::id();
        let files = [
            vec![FileId::of(&path).unwrap()],
            Vec::new(),
            FileId::of(&std::env::temp_dir()).into_iter().collect(),
        ];
        let mut maps = ProcessMaps::new(Path::new("/proc"));
        maps.update(&[]);
        assert!(maps.has(me));
        assert!(maps.mapping(&files)[0].is_empty());
        // SAFETY: a fresh shared mapping of a file this test owns, unmapped below.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(address, libc::MAP_FAILED);
        // Not read again yet: the entry is fresh.
        maps.update(&[]);
        assert!(maps.mapping(&files)[0].is_empty());
        maps.reread(&[me]);
        let found = maps.mapping(&files);
        assert_eq!(found[0], vec![me]);
        assert!(found[1].is_empty() && found[2].is_empty());
        assert_eq!(maps.namespace_pid(me), Some(me));
        let mut ignoring = ProcessMaps::new(Path::new("/proc"));
        ignoring.update(&[me]);
        assert!(!ignoring.has(me) && ignoring.mapping(&files)[0].is_empty());
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(address, 4096) };
        let _ = std::fs::remove_file(&path);
    }
}
