//! Tests of the runners themselves, without bcd: the `netns` runner. They
//! need root and iproute2; without them they are skipped with a reason (and
//! fail under `CI=true`).
//!
//! Programs run inside the namespaces are real tools (`ip`, `sleep`)
//! or this test binary itself, re-executed as a TCP probe ([`probe`]).

mod netns;
mod probe;
