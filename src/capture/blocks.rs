//! A captured prompt's hash ids: its token blocks, each hashed with the id before it under a
//! secret key (HMAC-SHA256). Equal ids mean equal prefixes up to and including that block, as
//! in Mooncake's traces; without the key, nobody can test a guessed prompt against an id.

use ring::hmac;

/// Ids are cut to this many bits, so that every JSON reader holds them exactly (2^53).
const ID_BITS: u32 = 52;

/// Hashes token blocks under one key: captures made with the same key line up.
pub struct BlockHasher {
    key: hmac::Key,
    block_size: usize,
}

impl BlockHasher {
    pub fn new(secret: &[u8], block_size: usize) -> Self {
        BlockHasher {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            block_size: block_size.max(1),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The ids of a prompt's blocks past its first `skip` tokens (the template's opening,
    /// the same in every prompt of a dialect: a replay puts it back in front of the blocks
    /// it builds, so blocks counted from here share what the captured prompts shared), each
    /// chained to the one before it; the last may be partial. Past the prompt's end the
    /// chain goes on over empty blocks up to `count` ids (what its length asks of a trace).
    pub fn hash_ids(&self, tokens: &[u32], skip: usize, count: usize) -> Vec<u64> {
        let mut chain = [0u8; 32];
        let mut bytes = Vec::with_capacity(self.block_size * 4);
        let blocks = tokens[skip.min(tokens.len())..].chunks(self.block_size);
        let padding = std::iter::repeat(&[][..]);
        blocks
            .chain(padding)
            .enumerate()
            .take_while(|&(i, block)| i < count || !block.is_empty())
            .map(|(_, block)| {
                bytes.clear();
                bytes.extend(block.iter().flat_map(|t| t.to_le_bytes()));
                let mut mac = hmac::Context::with_key(&self.key);
                mac.update(&chain);
                mac.update(&bytes);
                chain.copy_from_slice(mac.sign().as_ref());
                let mut first = [0u8; 8];
                first.copy_from_slice(&chain[..8]);
                u64::from_le_bytes(first) >> (64 - ID_BITS)
            })
            .collect()
    }
}

/// A fresh random key: a capture made with it lines up with no other.
pub fn random_secret() -> Result<[u8; 32], String> {
    use ring::rand::SecureRandom;
    let mut secret = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_prefixes_give_equal_ids_and_the_key_decides_them() {
        let h = BlockHasher::new(b"one key", 4);
        let a = h.hash_ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 0, 0);
        let b = h.hash_ids(&[1, 2, 3, 4, 5, 6, 7, 8, 10, 11], 0, 0);
        let c = h.hash_ids(&[9, 2, 3, 4, 5, 6, 7, 8], 0, 0);
        assert_eq!(a.len(), 3, "two whole blocks and a partial one");
        assert_eq!(a[..2], b[..2], "the same first eight tokens");
        assert_ne!(a[2], b[2]);
        assert_ne!(
            a[1], c[1],
            "a block after a different one is not the same block"
        );
        assert!(a.iter().all(|&id| id < 1 << ID_BITS));
        let other = BlockHasher::new(b"another key", 4).hash_ids(&[1, 2, 3, 4], 0, 0);
        assert_ne!(other[0], a[0], "another key, other ids");
        assert_eq!(
            BlockHasher::new(b"one key", 4).hash_ids(&[1, 2, 3, 4], 0, 0)[0],
            a[0]
        );
    }

    #[test]
    fn blocks_count_from_past_the_opening_and_the_chain_fills_the_length() {
        let h = BlockHasher::new(b"one key", 4);
        // Two prompts with the same 3-token opening and the same next 4 tokens: counted from
        // past the opening, their first blocks are whole and equal.
        let a = h.hash_ids(&[7, 7, 7, 1, 2, 3, 4, 5], 3, 0);
        let b = h.hash_ids(&[7, 7, 7, 1, 2, 3, 4, 6, 6], 3, 0);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0], b[0]);
        assert_eq!(a[0], h.hash_ids(&[1, 2, 3, 4], 0, 0)[0]);
        assert_ne!(a[1], b[1]);
        // Asked for more ids than it has blocks (what its whole length takes), the chain goes
        // on over empty blocks: equal only after equal prefixes.
        let padded = h.hash_ids(&[7, 7, 7, 1, 2, 3, 4, 5], 3, 3);
        assert_eq!(padded[..2], a[..]);
        assert_eq!(padded.len(), 3);
        assert_eq!(padded, h.hash_ids(&[7, 7, 7, 1, 2, 3, 4, 5], 3, 3));
        assert_ne!(padded[2], h.hash_ids(&[7, 7, 7, 1, 2, 3, 4, 6], 3, 3)[2]);
    }
}
