//! FNV-1a, 64 bits: a digest that is the same on every host and build, for naming what was
//! read (a trace's content, a tokenizer file) and for stable assignments (shards).

/// FNV-1a's starting state.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64 bits: the same on every host and build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV_OFFSET, bytes)
}

/// FNV-1a state `h` after `bytes` more.
pub fn fnv1a_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The digest of a trace's content (FNV-1a over its bytes, as read: decompressed), as
/// 16 hex digits: equal on every host that reads the same trace.
pub fn digest(content: &mut dyn std::io::BufRead) -> std::io::Result<String> {
    let mut h = FNV_OFFSET;
    loop {
        let buf = content.fill_buf()?;
        if buf.is_empty() {
            return Ok(format!("fnv1a64:{h:016x}"));
        }
        h = fnv1a_extend(h, buf);
        let n = buf.len();
        content.consume(n);
    }
}

#[cfg(test)]
mod tests {
    /// FNV-1a's published test vector: stable across builds.
    #[test]
    fn fnv1a_is_the_published_function() {
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
