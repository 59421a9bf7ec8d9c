//! The ioctl request numbers of RM escapes: `_IOWR('F', escape, size of the parameters)`.
//! The driver reads only the escape number and the size from a request; the size picks the
//! layout where an escape has two ([`crate::Alloc21`] and [`crate::Alloc64`]).

use crate::IOCTL_TYPE;
use core::ffi::c_ulong;

/// The escapes Tessera reads or sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// `NV_ESC_RM_FREE`: frees an object ([`crate::Free`]).
    Free,
    /// `NV_ESC_RM_CONTROL`: a control on an object ([`crate::Control`]).
    Control,
    /// `NV_ESC_RM_ALLOC`: allocates an object ([`crate::Alloc64`] or [`crate::Alloc21`]).
    Alloc,
    /// `NV_ESC_IOCTL_XFER_CMD`: another escape whose parameters are too large for the
    /// request's 14-bit size, passed by pointer ([`crate::Xfer`]).
    Xfer,
}

impl Escape {
    /// The escape's number (the request's `nr` byte).
    pub const fn number(self) -> u8 {
        match self {
            Escape::Free => 0x29,
            Escape::Control => 0x2a,
            Escape::Alloc => 0x2b,
            // NV_IOCTL_BASE (200) + 11.
            Escape::Xfer => 211,
        }
    }

    /// The escape of a number, if it is one of these.
    pub const fn from_number(nr: u8) -> Option<Escape> {
        match nr {
            0x29 => Some(Escape::Free),
            0x2a => Some(Escape::Control),
            0x2b => Some(Escape::Alloc),
            211 => Some(Escape::Xfer),
            _ => None,
        }
    }
}

/// An ioctl request number (C's `unsigned long`, as glibc's `ioctl` takes it), taken apart
/// as Linux encodes it on x86-64 and arm64: the
/// number in bits 0–7, the type in 8–15, the parameters' size in 16–29, the direction in
/// 30–31.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The ioctl type byte.
    pub kind: u8,
    /// The ioctl number byte: the escape.
    pub nr: u8,
    /// The size of the parameters.
    pub size: usize,
}

const NR_SHIFT: u32 = 0;
const TYPE_SHIFT: u32 = 8;
const SIZE_SHIFT: u32 = 16;
const SIZE_MASK: c_ulong = (1 << 14) - 1;
const DIR_SHIFT: u32 = 30;
/// `_IOC_READ | _IOC_WRITE`.
const READ_WRITE: c_ulong = 3;

impl Request {
    /// Takes a request number apart.
    pub const fn decode(request: c_ulong) -> Request {
        Request {
            kind: (request >> TYPE_SHIFT) as u8,
            nr: (request >> NR_SHIFT) as u8,
            size: ((request >> SIZE_SHIFT) & SIZE_MASK) as usize,
        }
    }

    /// Whether the request is an RM escape (type `'F'`).
    pub const fn is_rm(self) -> bool {
        self.kind == IOCTL_TYPE
    }

    /// The escape, if the request is one Tessera knows.
    pub const fn escape(self) -> Option<Escape> {
        if !self.is_rm() {
            return None;
        }
        Escape::from_number(self.nr)
    }

    /// `_IOWR('F', escape, size)`.
    pub const fn encode(escape: Escape, size: usize) -> c_ulong {
        (READ_WRITE << DIR_SHIFT)
            | (((size as c_ulong) & SIZE_MASK) << SIZE_SHIFT)
            | ((IOCTL_TYPE as c_ulong) << TYPE_SHIFT)
            | ((escape.number() as c_ulong) << NR_SHIFT)
    }

    /// The type byte of a request number: the one test the preload library's `ioctl`
    /// makes on every call.
    #[inline]
    pub const fn type_of(request: c_ulong) -> u8 {
        (request >> TYPE_SHIFT) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_as_iowr() {
        // _IOWR('F', 0x2b, 48): 0xc030462b.
        assert_eq!(Request::encode(Escape::Alloc, 48), 0xc030_462b);
        assert_eq!(Request::encode(Escape::Control, 32), 0xc020_462a);
        assert_eq!(Request::encode(Escape::Free, 16), 0xc010_4629);
        assert_eq!(Request::encode(Escape::Xfer, 16), 0xc010_46d3);
        let r = Request::decode(0xc030_462b);
        assert_eq!((r.kind, r.nr, r.size), (b'F', 0x2b, 48));
        assert_eq!(r.escape(), Some(Escape::Alloc));
        // A terminal's TCGETS is no RM request.
        assert_eq!(Request::decode(0x5401).escape(), None);
        assert!(!Request::decode(0x5401).is_rm());
    }
}
