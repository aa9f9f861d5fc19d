//! The element types narrower than a byte's worth of meaning that ONNX has: the four
//! float8 formats (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float4 e2m1, and the 4- and
//! 2-bit integers. mithrilc holds each element in one byte ([`to_byte`], [`from_byte`]):
//! a float as its code (float4's in the low four bits), an integer as the 8-bit two's
//! complement of its value. ONNX packs the sub-byte types several to a byte in its
//! files, low bits first; its reader unpacks them ([`unpack`]).
//!
//! Conversion to a narrow float ([`encode`]) is ONNX's (that of its reference, ml_dtypes'):
//! to the nearest value, ties to the even code; a value beyond the largest finite one
//! (after rounding) is infinity in e5m2, NaN in the three formats that have no infinity,
//! and the largest finite value in float4, which has neither. ONNX's `saturate` (clamp
//! to the largest finite value first) is the frontend's, not this conversion's. A NaN is
//! e4m3fn's and e5m2's NaN of its sign, the fnuz formats' one NaN (0x80), and float4's
//! code 0x8 (its negative zero, as ml_dtypes converts; a negative NaN gives 0x0). The
//! fnuz formats have no negative zero: -0.0 and the negative values that round to zero
//! are +0. `runtime-c/mithril_ops.h` computes the same (`mr_f32_to_f8e4m3fn`, ...).

use crate::ir::Dtype;

/// A float format of at most 8 bits: exponent and mantissa widths, exponent bias, and
/// what its top codes mean.
#[derive(Clone, Copy)]
struct Format {
    exp: u32,
    man: u32,
    bias: i32,
    special: Special,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    /// IEEE-like: the all-ones exponent is infinity (mantissa 0) or NaN (e5m2).
    Ieee,
    /// Only the all-ones code of either sign is NaN; no infinity (e4m3fn).
    Fn,
    /// 0x80 (negative zero's code) is the one NaN; no infinity, no -0 (the fnuz types).
    Fnuz,
    /// Every code is a finite number (float4 e2m1).
    Finite,
}

fn format(d: Dtype) -> Option<Format> {
    let f = |exp, man, bias, special| Format { exp, man, bias, special };
    Some(match d {
        Dtype::F8E4M3Fn => f(4, 3, 7, Special::Fn),
        Dtype::F8E4M3Fnuz => f(4, 3, 8, Special::Fnuz),
        Dtype::F8E5M2 => f(5, 2, 15, Special::Ieee),
        Dtype::F8E5M2Fnuz => f(5, 2, 16, Special::Fnuz),
        Dtype::F4E2M1 => f(2, 1, 1, Special::Finite),
        _ => return None,
    })
}

impl Format {
    /// The sign bit's position.
    fn sign(self) -> u32 {
        self.exp + self.man
    }
    /// The code of the largest finite magnitude.
    fn max_code(self) -> u32 {
        let all = (1u32 << self.sign()) - 1;
        match self.special {
            // The all-ones exponent is infinity and NaN.
            Special::Ieee => all - (1 << self.man),
            // All ones is NaN.
            Special::Fn => all - 1,
            Special::Fnuz | Special::Finite => all,
        }
    }
    fn nan_code(self, negative: bool) -> u8 {
        let s = 1u32 << self.sign();
        let code = match self.special {
            // ml_dtypes' e5m2 NaN: a quiet NaN, the top mantissa bit set.
            Special::Ieee => (s - (1 << self.man)) | (1 << (self.man - 1)) | if negative { s } else { 0 },
            Special::Fn => (s - 1) | if negative { s } else { 0 },
            Special::Fnuz => s,
            // No NaN: ml_dtypes gives the code of -0.0 (+0.0 for a negative NaN).
            Special::Finite => if negative { 0 } else { s },
        };
        code as u8
    }
    fn decode(self, code: u8) -> f64 {
        let code = u32::from(code);
        let s = 1u32 << self.sign();
        let negative = code & s != 0;
        let mag = code & (s - 1);
        let sign = if negative { -1.0 } else { 1.0 };
        match self.special {
            Special::Fnuz if code == s => return f64::NAN,
            Special::Fn if mag == s - 1 => return f64::NAN,
            Special::Ieee if mag > self.max_code() => {
                return if mag == s - (1 << self.man) { sign * f64::INFINITY } else { f64::NAN };
            }
            _ => {}
        }
        let e = (mag >> self.man) as i32;
        let m = f64::from(mag & ((1 << self.man) - 1));
        let one = f64::from(1u32 << self.man);
        let emin = 1 - self.bias;
        let value = if e == 0 { m * pow2(emin - self.man as i32) } else { (one + m) * pow2(e - self.bias - self.man as i32) };
        sign * value
    }
    fn encode(self, x: f64) -> u8 {
        let negative = x.is_sign_negative();
        let s = 1u32 << self.sign();
        if x.is_nan() {
            return self.nan_code(negative);
        }
        let a = x.abs();
        let emin = 1 - self.bias;
        // The binary exponent of a (a subnormal f64 has one far below emin).
        let ex = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        // The quantum at a's exponent, and a counted in quanta, rounded to even.
        let q = ex.max(emin) - self.man as i32;
        let overflow = || match self.special {
            Special::Ieee => (s - (1 << self.man)) as u8 | if negative { s as u8 } else { 0 },
            Special::Finite => self.max_code() as u8 | if negative { s as u8 } else { 0 },
            Special::Fn | Special::Fnuz => self.nan_code(negative),
        };
        // Beyond the largest exponent (infinity included): overflow whatever the
        // rounding (checked first: 2^-q would leave f64's range for huge a).
        if a.is_infinite() || ex > (self.max_code() >> self.man) as i32 - self.bias + 1 {
            return overflow();
        }
        let n = (a * pow2(-q)).round_ties_even() as u32;
        // Subnormal codes count quanta from 0 and normal ones continue them: a normal
        // a's code is ((ex + bias) << man) + n - 2^man, which is this, and a carry into
        // the next binade is that binade's first code.
        let mag = (((q + self.man as i32 - emin) as u32) << self.man) + n;
        if mag > self.max_code() {
            return overflow();
        }
        if mag == 0 && self.special == Special::Fnuz {
            return 0;
        }
        (mag | if negative { s } else { 0 }) as u8
    }
}

fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

/// The value of narrow float `d`'s code `code`.
pub fn decode(d: Dtype, code: u8) -> f64 {
    format(d).map_or(f64::NAN, |f| f.decode(code))
}

/// The code of `x` in narrow float `d` (see the module's doc).
pub fn encode(d: Dtype, x: f64) -> u8 {
    format(d).map_or(0, |f| f.encode(x))
}

/// `x` rounded to narrow float `d`'s nearest value (NaN, or an infinity, beyond them).
pub fn round(d: Dtype, x: f64) -> f64 {
    decode(d, encode(d, x))
}

/// The largest finite value of narrow float `d` (448 for e4m3fn), which ONNX's
/// saturating conversions clamp to.
pub fn max_finite(d: Dtype) -> Option<f64> {
    format(d).map(|f| f.decode(f.max_code() as u8))
}

/// The byte mithrilc holds an element of narrow type `d` as: a float's code, an
/// integer's value (already of the type's range) as an 8-bit two's complement.
pub fn to_byte(d: Dtype, x: f64) -> u8 {
    if d.is_narrow_float() {
        encode(d, x)
    } else {
        (crate::tensor::round_to(d, x) as i8) as u8
    }
}

/// The value of an element of narrow type `d` held as `b` ([`to_byte`]).
pub fn from_byte(d: Dtype, b: u8) -> f64 {
    match d {
        _ if d.is_narrow_float() => decode(d, b),
        // The low bits, sign-extended for the signed types (a byte holds any value).
        _ => {
            let bits = d.bits() as u32;
            let low = u32::from(b) & ((1 << bits) - 1);
            if d.is_signed_int() && low >= 1 << (bits - 1) { f64::from(low) - f64::from(1u32 << bits) } else { f64::from(low) }
        }
    }
}

/// The elements of a sub-byte type `d` packed `8 / d.bits()` to a byte, low bits first,
/// as ONNX stores them (`raw_data`, and each `int32_data` entry's low byte), one byte
/// each ([`to_byte`]'s form); `None` unless `packed` holds `numel` elements exactly
/// (the last byte's unused bits are ignored).
pub fn unpack(d: Dtype, packed: &[u8], numel: usize) -> Option<Vec<u8>> {
    let per = 8 / d.bits();
    if packed.len() != numel.div_ceil(per) {
        return None;
    }
    let mask = (1u16 << d.bits()) - 1;
    Some((0..numel).map(|i| to_byte(d, from_byte(d, ((u16::from(packed[i / per]) >> (i % per * d.bits())) & mask) as u8))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOATS: [Dtype; 5] = [Dtype::F8E4M3Fn, Dtype::F8E4M3Fnuz, Dtype::F8E5M2, Dtype::F8E5M2Fnuz, Dtype::F4E2M1];

    /// Values and codes from ml_dtypes 0.6 (ONNX's reference): `np.float32(x).astype(t)`.
    #[test]
    fn conversions_are_ml_dtypes() {
        let x = [f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e6, -1e6, -1e-9, -0.0, 470.0, 464.0, 61440.0, 61439.0, 7.0, 5.0, 240.0, 248.0, 250.0];
        let want: [(Dtype, [u8; 17]); 5] = [
            (Dtype::F8E4M3Fn, [0x7f, 0xff, 0x7f, 0xff, 0x7f, 0xff, 0x80, 0x80, 0x7f, 0x7e, 0x7f, 0x7f, 0x4e, 0x4a, 0x77, 0x78, 0x78]),
            (Dtype::F8E4M3Fnuz, [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x0, 0x0, 0x80, 0x80, 0x80, 0x80, 0x56, 0x52, 0x7f, 0x80, 0x80]),
            (Dtype::F8E5M2, [0x7e, 0xfe, 0x7c, 0xfc, 0x7c, 0xfc, 0x80, 0x80, 0x5f, 0x5f, 0x7c, 0x7b, 0x47, 0x45, 0x5c, 0x5c, 0x5c]),
            (Dtype::F8E5M2Fnuz, [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x0, 0x0, 0x63, 0x63, 0x80, 0x7f, 0x4b, 0x49, 0x60, 0x60, 0x60]),
            (Dtype::F4E2M1, [0x8, 0x0, 0x7, 0xf, 0x7, 0xf, 0x8, 0x8, 0x7, 0x7, 0x7, 0x7, 0x7, 0x6, 0x7, 0x7, 0x7]),
        ];
        for (d, codes) in want {
            let got: Vec<u8> = x.iter().map(|&v| encode(d, v)).collect();
            assert_eq!(got, codes, "{d}");
        }
        // ONNX's test_cast_FLOAT_to_FLOAT4E2M1: ties to even (0.25 -> 0, -3.5 -> -4).
        let x = [0.48, 0.25, 1.05, -3.5, -8.0, 9.0, 1e-7, -4.0, 0.01];
        let want = [0.5, 0.0, 1.0, -4.0, -6.0, 6.0, 0.0, -4.0, 0.0];
        assert_eq!(x.map(|v| round(Dtype::F4E2M1, v)), want);
        // test_cast_FLOAT_to_FLOAT8E4M3FN's finite values.
        let x = [0.4789254665374756, 0.48033666610717773, 0.4996848702430725, 0.8191054463386536, 0.4703124761581421, 0.7229037880897522];
        assert_eq!(x.map(|v| round(Dtype::F8E4M3Fn, v)), [0.46875, 0.46875, 0.5, 0.8125, 0.46875, 0.75]);
        assert_eq!(FLOATS.map(|d| max_finite(d).unwrap()), [448.0, 240.0, 57344.0, 57344.0, 6.0]);
    }

    /// Every code decodes to a value that encodes back to it (but NaNs, whose codes
    /// differ, and the fnuz formats' lost -0): the encoder and decoder agree everywhere.
    #[test]
    fn every_code_round_trips() {
        for d in FLOATS {
            for code in 0..(1u16 << d.bits()) {
                let x = decode(d, code as u8);
                if x.is_nan() {
                    assert!(decode(d, encode(d, x)).is_nan(), "{d} {code:#x}");
                } else {
                    assert_eq!(encode(d, x), code as u8, "{d} {code:#x} ({x})");
                }
            }
            // Subnormals: the smallest, and halfway below it (ties to even: zero).
            let tiny = decode(d, 1);
            assert_eq!((round(d, tiny / 2.0), round(d, tiny * 0.75)), (0.0, tiny), "{d}");
        }
        assert_eq!(decode(Dtype::F8E4M3Fn, 1), 2f64.powi(-9));
        assert_eq!(decode(Dtype::F8E5M2, 1), 2f64.powi(-16));
        assert_eq!(decode(Dtype::F8E5M2, 0x7c), f64::INFINITY);
    }

    #[test]
    fn sub_byte_integers_unpack_low_bits_first() {
        // ONNX's test_cast_FLOAT_to_INT4 output: 0x87 holds 7, then -8.
        assert_eq!(unpack(Dtype::I4, &[0x87, 0xa9], 4), Some(vec![7, 0xf8, 0xf9, 0xfa]));
        assert_eq!(unpack(Dtype::U4, &[0x87, 0x0f], 3), Some(vec![7, 8, 15]));
        // Four per byte: test_cast_FLOAT_to_UINT2's 0x39 is 1, 2, 3, 0.
        assert_eq!(unpack(Dtype::U2, &[0x39, 0x39], 7), Some(vec![1, 2, 3, 0, 1, 2, 3]));
        assert_eq!(unpack(Dtype::I2, &[0x39], 4).map(|v| v.iter().map(|&b| from_byte(Dtype::I2, b)).collect::<Vec<_>>()), Some(vec![1.0, -2.0, -1.0, 0.0]));
        assert_eq!(unpack(Dtype::F4E2M1, &[0xe2], 2).map(|v| v.iter().map(|&b| from_byte(Dtype::F4E2M1, b)).collect::<Vec<_>>()), Some(vec![1.0, -4.0]));
        // Too few or too many bytes.
        assert_eq!(unpack(Dtype::I4, &[0x87], 3), None);
        assert_eq!(unpack(Dtype::I4, &[0x87, 0, 0], 3), None);
    }
}
