//! A stable hash for names and file contents: the same bytes give the same value on
//! every machine and Rust version (unlike `std`'s hashers), so it may reach output.

/// FNV-1a, 64 bits: short names made from long ones, the output-directory marker. Not a
/// defence against a chosen collision.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
