//! Why a region cannot be used. Each message is one line that says what to do.

use std::path::PathBuf;

/// Why a region could not be opened, created or used.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The file could not be opened, created, locked, sized or mapped.
    #[error("cannot use the region file {path}: {source}; check that its directory exists and is writable")]
    Io {
        /// The region file (`anonymous` for an anonymous region).
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// The file is a region of this version, but something in it is impossible.
    #[error("the region file {path} is corrupt ({reason}); remove it, or let controld recreate the container")]
    Corrupt {
        /// The region file.
        path: PathBuf,
        /// Which check failed.
        reason: String,
    },
    /// The file is not a region at all.
    #[error("{path} is not a Tessera region file (wrong magic); point TESSERA_REGION at a region file or at a path that does not exist yet")]
    Foreign {
        /// The file.
        path: PathBuf,
    },
    /// The file is shorter (or longer) than a region of this version.
    #[error("the region file {path} has {len} bytes where a region has {expected}; remove it, or let controld recreate the container")]
    Truncated {
        /// The region file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length of a region of this version.
        expected: u64,
    },
    /// The file is a region of another layout version.
    #[error("the region file {path} has layout version {found}, this build reads version {expected}; use a libtessera.so and controld of the same release")]
    Version {
        /// The region file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// Every process slot is held by a live process.
    #[error("the region has no free process slot (all {} are held by live processes); run fewer GPU processes in this container", crate::MAX_PROCESSES)]
    Full,
    /// A container name that the region cannot hold.
    #[error("invalid container name {0:?}: use 1 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit")]
    BadName(String),
}
