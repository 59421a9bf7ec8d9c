//! Container names: `[a-z0-9][a-z0-9-]{0,62}`, so that a name is a valid file name, DNS
//! label prefix and C string of the 64-byte header field.

use crate::layout::NAME_LEN;

/// Whether `name` is a valid container name.
pub(crate) fn is_valid(name: &str) -> bool {
    let b = name.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && b.len() < NAME_LEN && ok(&b[0]) && b[1..].iter().all(|c| ok(c) || *c == b'-')
}

/// The name held in a NUL-padded header field, if it is valid and properly padded.
pub(crate) fn from_field(field: &[u8; NAME_LEN]) -> Option<&str> {
    let end = field.iter().position(|&c| c == 0)?;
    if field[end..].iter().any(|&c| c != 0) {
        return None;
    }
    let name = std::str::from_utf8(&field[..end]).ok()?;
    is_valid(name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "0", "team-a", "a-", "x".repeat(63).as_str()] {
            assert!(is_valid(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "A",
            "a_b",
            "a.b",
            "é",
            "a b",
            "x".repeat(64).as_str(),
        ] {
            assert!(!is_valid(bad), "{bad}");
        }
    }

    #[test]
    fn fields() {
        let mut f = [0u8; NAME_LEN];
        assert_eq!(from_field(&f), None);
        f[..3].copy_from_slice(b"abc");
        assert_eq!(from_field(&f), Some("abc"));
        f[10] = b'x';
        assert_eq!(from_field(&f), None, "junk after the NUL");
        let full = [b'a'; NAME_LEN];
        assert_eq!(from_field(&full), None, "no NUL");
    }
}
