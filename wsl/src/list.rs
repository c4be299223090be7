//! Discovery: parsing what `wsl.exe --list --quiet` prints, and choosing a
//! distribution.
//!
//! `wsl.exe` writes its console output as UTF-16LE, whatever the code page:
//! one distribution per line, CRLF line ends, sometimes a byte order mark,
//! sometimes trailing NULs. (With `WSL_UTF8=1` in its environment it writes
//! UTF-8 instead; [`crate::Wsl::list`] removes that variable so the format is
//! always the one parsed here.)

use crate::error::{Error, Result};

/// Docker Desktop's internal distributions, which are no place to run bcd.
const DOCKER_DESKTOP_PREFIX: &str = "docker-desktop";

/// Decodes UTF-16LE bytes, dropping a leading byte order mark.
///
/// A single trailing NUL byte that makes the length odd is dropped (a
/// truncated UTF-16 NUL); any other odd length is refused.
pub fn decode_utf16le(bytes: &[u8]) -> Result<String> {
    let bytes = match bytes {
        [rest @ .., 0] if !bytes.len().is_multiple_of(2) => rest,
        _ => bytes,
    };
    if !bytes.len().is_multiple_of(2) {
        return Err(Error::ListOddLength { len: bytes.len() });
    }
    let units: Vec<u16> = bytes.chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect();
    let units = match units.as_slice() {
        [0xFEFF, rest @ ..] => rest,
        all => all,
    };
    let mut out = String::with_capacity(units.len());
    for (i, decoded) in char::decode_utf16(units.iter().copied()).enumerate() {
        match decoded {
            Ok(c) => out.push(c),
            Err(_) => return Err(Error::ListInvalidUtf16 { unit: i }),
        }
    }
    Ok(out)
}

/// The distribution names in the output of `wsl.exe --list --quiet`, in the
/// order printed (the default distribution first).
///
/// Lines are split on LF; CR, NULs and surrounding white space are trimmed;
/// empty lines are skipped.
pub fn parse_list(bytes: &[u8]) -> Result<Vec<String>> {
    let text = decode_utf16le(bytes)?;
    Ok(text
        .split('\n')
        .map(|line| line.trim_matches(|c: char| c == '\0' || c.is_whitespace()))
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect())
}

/// Chooses the distribution to run in: `wanted` if given (compared without
/// regard to ASCII case, as Windows does, and returned in the installed
/// spelling), else the first one listed that is not Docker Desktop's.
pub fn pick_distro(installed: &[String], wanted: Option<&str>) -> Result<String> {
    match wanted {
        Some(wanted) => installed
            .iter()
            .find(|name| name.eq_ignore_ascii_case(wanted))
            .cloned()
            .ok_or_else(|| Error::DistroNotInstalled { wanted: wanted.to_string(), installed: installed.to_vec() }),
        None => installed
            .iter()
            .find(|name| !name.to_ascii_lowercase().starts_with(DOCKER_DESKTOP_PREFIX))
            .cloned()
            .ok_or_else(|| Error::NoDistribution { installed: installed.to_vec() }),
    }
}

/// Decodes console output of `wsl.exe` for an error message: UTF-16LE when
/// it looks like it (NUL high bytes), else lossy UTF-8.
pub fn decode_console_lossy(bytes: &[u8]) -> String {
    let looks_utf16 =
        bytes.len() >= 2 && bytes.len().is_multiple_of(2) && bytes.iter().skip(1).step_by(2).all(|b| *b == 0);
    let text = if looks_utf16 {
        let units: Vec<u16> = bytes.chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect();
        String::from_utf16_lossy(&units)
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    };
    text.trim_start_matches('\u{FEFF}').trim_matches(|c: char| c == '\0' || c.is_whitespace()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a real `wsl.exe --list --quiet` prints for "Ubuntu" and
    /// "docker-desktop": UTF-16LE, CRLF, no BOM.
    const TWO_DISTROS: &[u8] = &[
        b'U', 0, b'b', 0, b'u', 0, b'n', 0, b't', 0, b'u', 0, b'\r', 0, b'\n', 0, //
        b'd', 0, b'o', 0, b'c', 0, b'k', 0, b'e', 0, b'r', 0, b'-', 0, b'd', 0, b'e', 0, b's', 0, b'k', 0, b't', 0,
        b'o', 0, b'p', 0, b'\r', 0, b'\n', 0,
    ];

    fn utf16le(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    #[test]
    fn crlf_lines_without_bom() {
        assert_eq!(parse_list(TWO_DISTROS).unwrap(), ["Ubuntu", "docker-desktop"]);
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let mut bytes = vec![0xFF, 0xFE];
        bytes.extend_from_slice(TWO_DISTROS);
        assert_eq!(parse_list(&bytes).unwrap(), ["Ubuntu", "docker-desktop"]);
    }

    #[test]
    fn trailing_nuls_and_blank_lines_are_ignored() {
        let mut bytes = TWO_DISTROS.to_vec();
        bytes.extend_from_slice(&[0, 0, 0, 0, b'\r', 0, b'\n', 0, 0, 0]);
        assert_eq!(parse_list(&bytes).unwrap(), ["Ubuntu", "docker-desktop"]);
        // An odd trailing NUL byte: a truncated UTF-16 NUL.
        bytes.push(0);
        assert_eq!(parse_list(&bytes).unwrap(), ["Ubuntu", "docker-desktop"]);
    }

    #[test]
    fn lf_only_and_no_final_newline() {
        assert_eq!(parse_list(&utf16le("Debian\nUbuntu-22.04")).unwrap(), ["Debian", "Ubuntu-22.04"]);
    }

    #[test]
    fn non_ascii_names_decode() {
        assert_eq!(parse_list(&utf16le("Ubuntü\r\n\u{1F600}x\r\n")).unwrap(), ["Ubuntü", "\u{1F600}x"]);
    }

    #[test]
    fn no_distribution_is_an_empty_list() {
        assert!(parse_list(b"").unwrap().is_empty());
        assert!(parse_list(&[0xFF, 0xFE, b'\r', 0, b'\n', 0]).unwrap().is_empty());
    }

    #[test]
    fn odd_length_is_refused() {
        assert!(matches!(parse_list(b"Ubuntu\r\n\x01"), Err(Error::ListOddLength { len: 9 })));
    }

    #[test]
    fn utf8_output_is_refused_as_odd_or_garbled() {
        // "Ubuntu\n" in UTF-8 is 7 bytes: odd.
        assert!(matches!(parse_list(b"Ubuntu\n"), Err(Error::ListOddLength { .. })));
    }

    #[test]
    fn unpaired_surrogate_is_refused() {
        let bytes = [b'A', 0, 0x00, 0xD8, b'B', 0];
        assert!(matches!(parse_list(&bytes), Err(Error::ListInvalidUtf16 { unit: 1 })));
    }

    #[test]
    fn picking_a_distro() {
        let installed = parse_list(TWO_DISTROS).unwrap();
        assert_eq!(pick_distro(&installed, None).unwrap(), "Ubuntu");
        assert_eq!(pick_distro(&installed, Some("ubuntu")).unwrap(), "Ubuntu");
        assert!(matches!(
            pick_distro(&installed, Some("Alpine")),
            Err(Error::DistroNotInstalled { wanted, .. }) if wanted == "Alpine"
        ));
        let docker_only = vec!["docker-desktop".to_string(), "docker-desktop-data".to_string()];
        assert!(matches!(pick_distro(&docker_only, None), Err(Error::NoDistribution { .. })));
        assert!(matches!(pick_distro(&[], None), Err(Error::NoDistribution { .. })));
    }

    #[test]
    fn console_errors_decode_either_way() {
        assert_eq!(decode_console_lossy(&utf16le("There is no distribution.\r\n")), "There is no distribution.");
        assert_eq!(decode_console_lossy(b"plain error\n"), "plain error");
    }
}
