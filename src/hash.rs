//! A stable hash for names and file contents: the same bytes give the same value on
//! every machine and Rust version (unlike `std`'s hashers), so it may reach output.

use std::io::{self, Read};

/// FNV-1a's starting value (its 64-bit offset basis).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64 bits: short names made from long ones, the output-directory marker. Not a
/// defence against a chosen collision.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_more(FNV_OFFSET, bytes)
}

/// [`fnv1a`] of everything `r` reads, a block at a time: a written weights file is
/// hashed without a second copy of it in memory.
pub fn fnv1a_read(mut r: impl Read) -> io::Result<u64> {
    let mut h = FNV_OFFSET;
    let mut block = vec![0u8; 1 << 16];
    loop {
        match r.read(&mut block) {
            Ok(0) => return Ok(h),
            Ok(n) => h = fnv1a_more(h, &block[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The hash `h` of some bytes continued over `bytes`.
fn fnv1a_more(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
