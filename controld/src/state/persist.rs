//! The declarations on disk: `<name>.json` beside each region, read without following a
//! link and written whole.

use super::{ContainerSpec, Origin, State, StateError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What a state dir holds of one container's declaration.
pub(super) enum Declaration {
    Found(Saved),
    Unreadable(String),
    Missing,
}

/// The declaration file beside a region.
#[derive(Serialize, Deserialize)]
pub(super) struct Saved {
    pub(super) spec: ContainerSpec,
    pub(super) origin: Origin,
}

impl State {
    /// What `<name>.json` says, if it is there.
    pub(super) fn declaration(&self, stem: &str) -> Declaration {
        let path = self.spec_path(stem);
        let bytes = match read_no_follow(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Declaration::Missing,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Declaration::Unreadable(
                    "it is a symbolic link, which is never followed".into(),
                )
            }
            Err(e) => return Declaration::Unreadable(format!("cannot read it: {e}")),
        };
        match serde_json::from_slice::<Saved>(&bytes) {
            Ok(saved) if saved.spec.name.as_str() == stem => Declaration::Found(saved),
            Ok(saved) => Declaration::Unreadable(format!(
                "it declares container {}, not {stem}",
                saved.spec.name
            )),
            Err(e) => Declaration::Unreadable(format!("it is not a declaration: {e}")),
        }
    }

    /// Writes `<name>.json` whole: a temporary file, synced, renamed over the old one, and
    /// the directory synced, so that a crash leaves the old declaration or the new one.
    pub(super) fn save(&self, spec: &ContainerSpec, origin: Origin) -> Result<(), StateError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.spec_path(spec.name.as_str());
        let saved = Saved {
            spec: spec.clone(),
            origin,
        };
        let bytes = serde_json::to_vec_pretty(&saved).expect("plain data serializes");
        let tmp = path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| std::fs::File::open(&self.dir)?.sync_all())
            .map_err(|source| StateError::Io { path, source })
    }
}

/// A file's bytes, refusing a symbolic link in its place.
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: opening a FIFO put in a declaration's place must not hang the daemon
    // (it would wait for a writer); a regular file reads as ever.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::other(format!(
            "it is not a regular file but {}",
            describe_kind(kind)
        )));
    }
    let mut bytes = Vec::new();
    file.take(1 << 20).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A file type in words, for a log line.
fn describe_kind(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}
