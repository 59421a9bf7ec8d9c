//! LZ4 blocks: how `nvcc` compresses the files of a fat binary (the file's flag 0x2000). A
//! block is a run of sequences, each a token (literal length in its high four bits, match
//! length less four in its low four; 15 continues in the bytes after, each adding up to 255),
//! the literals, then a 16-bit little-endian distance back into what was decoded and the
//! match; the last sequence has literals only.

/// Decodes `input` into at most `limit` bytes; `None` for a malformed block.
pub(crate) fn decompress(input: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(limit.min(1 << 26));
    let mut at = 0;
    let length = |at: &mut usize, base: usize| -> Option<usize> {
        let mut n = base;
        if base == 15 {
            loop {
                let b = *input.get(*at)?;
                *at += 1;
                n = n.checked_add(usize::from(b))?;
                if b != 255 {
                    break;
                }
            }
        }
        Some(n)
    };
    while at < input.len() {
        let token = input[at];
        at += 1;
        let literals = length(&mut at, usize::from(token >> 4))?;
        let end = at.checked_add(literals)?;
        out.extend_from_slice(input.get(at..end)?);
        at = end;
        if out.len() > limit {
            return None;
        }
        if at == input.len() {
            break;
        }
        let distance = usize::from(u16::from_le_bytes([*input.get(at)?, *input.get(at + 1)?]));
        at += 2;
        let matched = length(&mut at, usize::from(token & 0xf))?.checked_add(4)?;
        if distance == 0 || distance > out.len() || out.len() + matched > limit {
            return None;
        }
        let from = out.len() - distance;
        // Byte by byte: a match may overlap what it is writing.
        for i in 0..matched {
            out.push(out[from + i]);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_overlapping_matches() {
        // "abc" then a match of 9 at distance 3: "abcabcabcabc", then literals "xyz".
        let block = [0x35, b'a', b'b', b'c', 3, 0, 0x30, b'x', b'y', b'z'];
        assert_eq!(
            decompress(&block, 100).as_deref(),
            Some(&b"abcabcabcabcxyz"[..])
        );
    }

    #[test]
    fn long_lengths_continue_in_later_bytes() {
        let mut block = vec![0xf0, 5];
        block.extend([b'q'; 20]);
        assert_eq!(decompress(&block, 100), Some(vec![b'q'; 20]));
    }

    #[test]
    fn malformed_blocks_are_refused() {
        assert_eq!(decompress(&[0x10], 100), None, "a literal past the end");
        assert_eq!(
            decompress(&[0x10, b'a', 9, 0], 100),
            None,
            "a distance past the start"
        );
        assert_eq!(
            decompress(&[0x10, b'a', 1, 0, 0x0f], 4),
            None,
            "over the limit"
        );
    }
}
