//! The one escaping rule of the stack's log lines: every field value and
//! every message is written with its control characters escaped (`\n`,
//! `\r`, `\t`, `\u{1b}`, … and the Unicode bidirectional controls), so a
//! string a node, a client or any sender chose (a Hello's journal id, a
//! reported state or message, a secret reference, an OTLP attribute)
//! cannot forge a line or drive a terminal, whichever form (`%`, `?`, or
//! none) its call site logs it in. The rule lives in the subscriber's
//! field formatter, not at the call sites; every subscriber of the stack
//! (`devstack`'s and [`crate::LogCapture`]'s) is built with it, and tidy
//! checks that none is built without.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The field formatter: as tracing's default (the message first, then
/// `name=value` pairs, a string quoted), each value escaped.
#[derive(Clone, Copy, Debug, Default)]
pub struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Visitor { out: Escaping(writer), result: Ok(()), first: true };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Whether a character is written escaped.
fn escaped(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A writer that escapes what passes through it.
struct Escaping<'w>(Writer<'w>);

impl fmt::Write for Escaping<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for part in s.split_inclusive(escaped) {
            let (text, last) = match part.chars().next_back() {
                Some(c) if escaped(c) => (&part[..part.len() - c.len_utf8()], Some(c)),
                _ => (part, None),
            };
            self.0.write_str(text)?;
            match last {
                Some('\n') => self.0.write_str("\\n")?,
                Some('\r') => self.0.write_str("\\r")?,
                Some('\t') => self.0.write_str("\\t")?,
                Some(c) => write!(self.0, "\\u{{{:x}}}", c as u32)?,
                None => {}
            }
        }
        Ok(())
    }
}

struct Visitor<'w> {
    out: Escaping<'w>,
    result: fmt::Result,
    first: bool,
}

impl Visitor<'_> {
    fn field(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = if field.name() == "message" {
            write!(self.out.0, "{separator}").and_then(|()| self.out.write_fmt(value))
        } else {
            write!(self.out.0, "{separator}{}=", field.name()).and_then(|()| self.out.write_fmt(value))
        };
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Quoted, as tracing's own formatter writes a string (the message
        // as it is).
        if field.name() == "message" {
            self.field(field, format_args!("{value}"));
        } else {
            self.field(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, format_args!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(f: impl FnOnce()) -> String {
        let buffer = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(EscapedFields)
            .with_ansi(false)
            .without_time()
            .with_writer(move || WriteTo(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buffer.lock().unwrap().clone()).unwrap()
    }

    struct WriteTo(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for WriteTo {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn what_a_peer_chose_cannot_forge_a_line_in_any_form() {
        let forged = "x\n2026-01-01T00:00:00Z  INFO devstack: forged\u{1b}[2J\u{202e}";
        let text = line(|| {
            tracing::warn!(secret_ref = %forged, instance_id = ?forged, state = forged, "report: {forged}");
        });
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'), "{text}");
        assert!(text.contains("report: x\\n2026") && text.contains("secret_ref=x\\n2026"), "{text}");
        assert!(text.contains("state=\"x\\n2026"), "a string is quoted, as by tracing's own formatter: {text}");
        assert!(text.contains("\\u{1b}[2J\\u{202e}"), "{text}");
        let plain = line(|| tracing::info!(node_id = "node_1", count = 3, "joined"));
        assert!(plain.trim_end().ends_with("joined node_id=\"node_1\" count=3"), "{plain}");
    }
}
