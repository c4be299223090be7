//! What a Hello must be (docs/protocol.md, "Hello and Welcome"): its
//! journal id and boot id identifiers of at most 64 bytes (ASCII letters,
//! digits and `._:-`; the journal id not empty, the boot id empty only when
//! the node could not read one), its daemon version at most 64 bytes of
//! ASCII letters, digits and `.+_~-`. The stack stores and logs these, so a
//! node cannot make them large or make them say anything else; another is
//! refused `InvalidArgument` `hello-malformed` before anything is recorded.

use tonic::Status;

use crate::status::{Code, refuse};

/// The longest journal id, boot id or daemon version.
pub const MAX_FIELD_BYTES: usize = 64;

fn identifier(s: &str) -> bool {
    s.len() <= MAX_FIELD_BYTES && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

fn version(s: &str) -> bool {
    s.len() <= MAX_FIELD_BYTES && s.bytes().all(|b| b.is_ascii_alphanumeric() || b".+_~-".contains(&b))
}

/// The refusal of a Hello whose strings are not of their form.
pub fn check(hello: &proto::Hello) -> Result<(), Status> {
    let refused = |field: &str| {
        let detail = format!(
            "the Hello's {field} is not of its form ({} bytes; at most {MAX_FIELD_BYTES} of the allowed characters)",
            match field {
                "journal_id" => hello.journal_id.len(),
                "boot_id" => hello.boot_id.len(),
                _ => hello.daemon_version.len(),
            }
        );
        Err(refuse(Code::HelloMalformed, detail))
    };
    if hello.journal_id.is_empty() || !identifier(&hello.journal_id) {
        return refused("journal_id");
    }
    if !identifier(&hello.boot_id) {
        return refused("boot_id");
    }
    if !version(&hello.daemon_version) {
        return refused("daemon_version");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(journal_id: &str, boot_id: &str, daemon_version: &str) -> proto::Hello {
        proto::Hello {
            journal_id: journal_id.into(),
            boot_id: boot_id.into(),
            daemon_version: daemon_version.into(),
            ..Default::default()
        }
    }

    #[test]
    fn bcds_own_hello_is_taken() {
        let uuid = "0f3c1d2e-4b5a-6978-8a9b-0c1d2e3f4a5b";
        assert!(check(&hello("jrn_00112233445566778899aabbccddeeff", uuid, "1.4.0-rc.1+g1234")).is_ok());
        assert!(check(&hello("conformance", "", "0.0.0")).is_ok());
    }

    #[test]
    fn a_long_or_odd_string_is_refused() {
        let long = "j".repeat(MAX_FIELD_BYTES + 1);
        for bad in [
            hello(&long, "b", "1"),
            hello("", "b", "1"),
            hello("j\nforged", "b", "1"),
            hello("j", "b\u{1b}[2J", "1"),
            hello("j", &long, "1"),
            hello("j", "b", &"1".repeat(MAX_FIELD_BYTES + 1)),
            hello("j", "b", "1 2"),
        ] {
            let status = check(&bad).unwrap_err();
            assert_eq!(
                (status.code(), crate::status::code_of(&status)),
                (tonic::Code::InvalidArgument, "hello-malformed")
            );
        }
    }
}
