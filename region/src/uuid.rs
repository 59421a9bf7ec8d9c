//! A GPU's UUID as NVML and `nvidia-smi` print it, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`,
//! and as its 16 bytes (what `cuDeviceGetUuid` gives and the region keeps). Formatting
//! writes into a fixed buffer: the library formats UUIDs where it must not allocate.

/// The length of the text, without a terminator.
pub const TEXT_LEN: usize = 40;

/// Where the dashes fall in the hex digits after `GPU-`: after 8, 12, 16 and 20 digits.
const DASH_AFTER: [usize; 4] = [8, 12, 16, 20];

/// The text of `uuid`, NUL-terminated (for NVML), as bytes.
pub fn text(uuid: &[u8; 16]) -> [u8; TEXT_LEN + 1] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; TEXT_LEN + 1];
    out[..4].copy_from_slice(b"GPU-");
    let mut at = 4;
    for (digit, nibble) in uuid.iter().flat_map(|b| [b >> 4, b & 0xf]).enumerate() {
        if DASH_AFTER.contains(&digit) {
            out[at] = b'-';
            at += 1;
        }
        out[at] = HEX[nibble as usize];
        at += 1;
    }
    out
}

/// The text of `uuid`, as a string.
pub fn to_string(uuid: &[u8; 16]) -> String {
    let text = text(uuid);
    String::from_utf8_lossy(&text[..TEXT_LEN]).into_owned()
}

/// The bytes of a `GPU-…` text (any case, dashes anywhere); `None` for anything else,
/// such as a MIG device's `MIG-…`.
pub fn parse(text: &str) -> Option<[u8; 16]> {
    let hex = text.trim().strip_prefix("GPU-")?;
    let digits: Vec<u8> = hex
        .bytes()
        .filter(|&b| b != b'-')
        .map(|b| (b as char).to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    if digits.len() != 32 {
        return None;
    }
    let mut uuid = [0u8; 16];
    for (byte, pair) in uuid.iter_mut().zip(digits.chunks(2)) {
        *byte = pair[0] << 4 | pair[1];
    }
    Some(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_bytes_round_trip_as_nvml_prints_them() {
        let uuid: [u8; 16] = core::array::from_fn(|i| (i as u8) * 17);
        let text = to_string(&uuid);
        assert_eq!(text, "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(self::text(&uuid)[TEXT_LEN], 0, "NUL-terminated");
        assert_eq!(parse(&text), Some(uuid));
        assert_eq!(parse(&text.to_uppercase()), Some(uuid));
        assert_eq!(parse("MIG-00112233-4455-6677-8899-aabbccddeeff"), None);
        assert_eq!(parse("GPU-0011"), None);
    }
}
