//! The codec of every generated service: prost's encoding, and a decoder
//! whose refusal of bytes that are not the expected message (a bad varint,
//! a string that is not UTF-8, a truncated field) is the contract's
//! `InvalidArgument` `message-malformed: …` (docs/protocol.md, "Errors on
//! the wire"), where tonic's own codec answers `Internal`, which would say
//! the receiver failed.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstEncoder};

use crate::refusal::Code;

/// The first size of a stream's encode and of its decode buffer (tonic's
/// default is 8 KiB each, held for the stream's life): a Session stream
/// carries small frames and a gateway holds one per node, so the buffers
/// start at 1 KiB and grow only for a larger message.
pub const BUFFER_BYTES: usize = 1024;

/// How long a stream's encoder fills its buffer before it yields (tonic's
/// default, 32 KiB).
const YIELD_THRESHOLD: usize = 32 * 1024;

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD)
}

/// The status of a message that does not decode.
pub fn malformed(detail: impl std::fmt::Display) -> Status {
    let code = Code::MessageMalformed;
    Status::new(code.grpc().into(), format!("{}: {detail}", code.as_str()))
}

/// prost's encoding with [`StrictDecoder`].
#[derive(Debug, Clone)]
pub struct StrictCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder::default()
    }
}

/// Decodes `U`, refusing what does not decode `message-malformed`.
#[derive(Debug, Clone)]
pub struct StrictDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U> Default for StrictDecoder<U> {
    fn default() -> Self {
        StrictDecoder { _pd: PhantomData }
    }
}

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let name = std::any::type_name::<U>().rsplit("::").next().unwrap_or("message");
        U::decode(buf).map(Some).map_err(|e| malformed(format_args!("not a {name}: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_invalid_argument_with_its_code() {
        let s = malformed("a bad varint");
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(s.message(), "message-malformed: a bad varint");
    }
}
