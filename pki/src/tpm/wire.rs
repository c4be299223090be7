//! TPM 2.0 wire encoding: big-endian integers and size-prefixed buffers
//! (`TPM2B_*`), read by [`Reader`] and written by [`Writer`].
//!
//! Every parse in [`crate::tpm`] goes through a [`Reader`], which refuses a
//! short buffer and, through [`Reader::finish`], trailing bytes, both as
//! `tpm-malformed`.

use crate::error::TpmError;
use crate::{Error, Result};

/// A cursor over TPM-encoded bytes.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, which encode a `what` (named in refusals).
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, pos: 0, what }
    }

    /// A `tpm-malformed` refusal naming the structure being read.
    pub fn malformed(&self, reason: impl Into<String>) -> Error {
        TpmError::Malformed { what: self.what.to_string(), reason: reason.into() }.into()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or_else(|| {
            self.malformed(format!("truncated at byte {} (wanted {n} more of {})", self.pos, self.bytes.len()))
        })?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A `TPM2B_*`: a `u16` size, then that many bytes.
    pub fn tpm2b(&mut self) -> Result<Vec<u8>> {
        let n = self.u16()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    /// Refuses trailing bytes.
    pub fn finish(&self) -> Result<()> {
        if self.pos != self.bytes.len() {
            return Err(self.malformed(format!("{} trailing byte(s)", self.bytes.len() - self.pos)));
        }
        Ok(())
    }
}

/// A TPM encoder.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// A `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Raw bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }

    /// A `TPM2B_*`. Buffers longer than 65535 bytes cannot be encoded; the
    /// structures of this crate hold at most a few hundred bytes.
    pub fn tpm2b(&mut self, v: &[u8]) -> &mut Self {
        let n = u16::try_from(v.len()).expect("a TPM2B buffer holds at most 65535 bytes");
        self.u16(n).bytes(v)
    }

    /// The encoded bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_trailing_input_is_malformed() {
        let mut r = Reader::new(&[0, 3, 1, 2], "test");
        assert_eq!(r.tpm2b().unwrap_err().code(), "tpm-malformed");
        let mut r = Reader::new(&[0, 1, 7, 9], "test");
        assert_eq!(r.tpm2b().unwrap(), vec![7]);
        assert_eq!(r.finish().unwrap_err().code(), "tpm-malformed");
    }

    #[test]
    fn writer_round_trips() {
        let bytes = Writer::default().u16(0x0023).u32(7).tpm2b(b"ab").u64(1).finish();
        let mut r = Reader::new(&bytes, "test");
        assert_eq!(
            (r.u16().unwrap(), r.u32().unwrap(), r.tpm2b().unwrap(), r.u64().unwrap()),
            (0x23, 7, b"ab".to_vec(), 1)
        );
        r.finish().unwrap();
    }
}
