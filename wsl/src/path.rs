//! Windows-to-WSL path translation, for the paths a test on Windows hands
//! to a program running inside a distribution.
//!
//! - `C:\Users\me\x` (or `C:/Users/me/x`) → `/mnt/c/Users/me/x` (the default
//!   automount root `/mnt`; the drive letter lower-cased);
//! - `\\wsl$\<distro>\path` and `\\wsl.localhost\<distro>\path` → `/path`,
//!   when `<distro>` is the distribution the program runs in;
//! - the verbatim forms `\\?\C:\…` and `\\?\UNC\wsl$\…` (what
//!   `std::fs::canonicalize` returns on Windows) like the plain ones.
//!
//! Everything else is refused: relative and drive-relative paths (they depend
//! on a current directory the distribution does not share), network shares,
//! device paths, and paths into another distribution.

use std::path::Path;

use crate::error::{Error, Result};

/// Where WSL mounts Windows drives by default (`[automount] root` in `wsl.conf`).
pub const MOUNT_ROOT: &str = "/mnt";

/// Hosts of the UNC paths that name a WSL distribution's file system.
const WSL_HOSTS: [&str; 2] = ["wsl$", "wsl.localhost"];

/// Whether `s` looks like an absolute Windows path (`X:\`, `X:/`, or a UNC
/// or verbatim path starting with two separators), i.e. something
/// [`to_wsl_path`] is meant for.
pub fn is_windows_absolute(s: &str) -> bool {
    let b = s.as_bytes();
    let sep = |c: u8| c == b'\\' || c == b'/';
    (b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && sep(b[2]))
        || (b.len() >= 2 && b[0] == b'\\' && b[1] == b'\\')
}

/// Translates an absolute Windows path into the path of the same file inside
/// `distro`. See the module documentation for what translates.
pub fn to_wsl_path(path: &str, distro: &str) -> Result<String> {
    if path.is_empty() {
        return Err(Error::PathEmpty);
    }
    let normalized = path.replace('/', "\\");
    // Verbatim paths: `\\?\C:\x` and `\\?\UNC\server\share\x`.
    let unprefixed = match normalized.strip_prefix(r"\\?\") {
        Some(rest) => match rest.get(..4) {
            Some(unc) if unc.eq_ignore_ascii_case(r"UNC\") => format!(r"\\{}", &rest[4..]),
            _ => rest.to_string(),
        },
        None => normalized,
    };
    let s = unprefixed.as_str();
    let b = s.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        if b.len() == 2 || b[2] != b'\\' {
            return Err(Error::PathDriveRelative { path: path.to_string() });
        }
        let drive = (b[0] as char).to_ascii_lowercase();
        // Slicing at 3 is sound: the first three bytes are ASCII.
        return Ok(format!("{MOUNT_ROOT}/{drive}/{}", s[3..].replace('\\', "/")));
    }
    if let Some(unc) = s.strip_prefix(r"\\") {
        let mut parts = unc.splitn(3, '\\');
        let host = parts.next().unwrap_or("");
        let share = parts.next().unwrap_or("");
        let rest = parts.next().unwrap_or("");
        if !WSL_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(host)) || share.is_empty() {
            return Err(Error::PathNotInWsl { path: path.to_string() });
        }
        if !share.eq_ignore_ascii_case(distro) {
            return Err(Error::PathOtherDistro {
                path: path.to_string(),
                found: share.to_string(),
                expected: distro.to_string(),
            });
        }
        return Ok(format!("/{}", rest.replace('\\', "/")));
    }
    if s.starts_with('\\') {
        return Err(Error::PathDriveRelative { path: path.to_string() });
    }
    Err(Error::PathRelative { path: path.to_string() })
}

/// [`to_wsl_path`] for a [`Path`], refusing one that is not valid Unicode.
pub fn path_to_wsl(path: &Path, distro: &str) -> Result<String> {
    let s = path.to_str().ok_or_else(|| Error::PathNotUnicode { path: path.to_path_buf() })?;
    to_wsl_path(s, distro)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_paths_translate() {
        let cases = [
            (r"C:\Users\me\x", "/mnt/c/Users/me/x"),
            (r"c:\Users\me\x", "/mnt/c/Users/me/x"),
            ("D:/work/bcd e2e/config.toml", "/mnt/d/work/bcd e2e/config.toml"),
            (r"C:\", "/mnt/c/"),
            (r"C:\dir\", "/mnt/c/dir/"),
            (r"\\?\C:\Users\me\AppData\Local\Temp\x", "/mnt/c/Users/me/AppData/Local/Temp/x"),
            (r"E:\with $dollar\and 'quotes'", "/mnt/e/with $dollar/and 'quotes'"),
        ];
        for (windows, wsl) in cases {
            assert_eq!(to_wsl_path(windows, "Ubuntu").unwrap(), wsl, "{windows}");
        }
    }

    #[test]
    fn wsl_unc_paths_translate() {
        let cases = [
            (r"\\wsl$\Ubuntu\home\me\x", "/home/me/x"),
            (r"\\wsl.localhost\Ubuntu\home\me\x", "/home/me/x"),
            (r"\\WSL.LOCALHOST\ubuntu\tmp", "/tmp"),
            (r"\\wsl$\Ubuntu", "/"),
            (r"\\wsl$\Ubuntu\", "/"),
            ("//wsl$/Ubuntu/etc/hosts", "/etc/hosts"),
            (r"\\?\UNC\wsl.localhost\Ubuntu\var\tmp", "/var/tmp"),
        ];
        for (windows, wsl) in cases {
            assert_eq!(to_wsl_path(windows, "Ubuntu").unwrap(), wsl, "{windows}");
        }
    }

    #[test]
    fn untranslatable_paths_are_refused() {
        assert!(matches!(to_wsl_path("", "Ubuntu"), Err(Error::PathEmpty)));
        assert!(matches!(to_wsl_path(r"Users\me", "Ubuntu"), Err(Error::PathRelative { .. })));
        assert!(matches!(to_wsl_path("/home/me", "Ubuntu"), Err(Error::PathDriveRelative { .. })));
        assert!(matches!(to_wsl_path(r"\Users\me", "Ubuntu"), Err(Error::PathDriveRelative { .. })));
        assert!(matches!(to_wsl_path("C:", "Ubuntu"), Err(Error::PathDriveRelative { .. })));
        assert!(matches!(to_wsl_path(r"C:Users\me", "Ubuntu"), Err(Error::PathDriveRelative { .. })));
        assert!(matches!(to_wsl_path(r"\\server\share\x", "Ubuntu"), Err(Error::PathNotInWsl { .. })));
        assert!(matches!(to_wsl_path(r"\\.\pipe\x", "Ubuntu"), Err(Error::PathNotInWsl { .. })));
        assert!(matches!(to_wsl_path(r"\\wsl$\", "Ubuntu"), Err(Error::PathNotInWsl { .. })));
        assert!(matches!(
            to_wsl_path(r"\\wsl$\Debian\etc", "Ubuntu"),
            Err(Error::PathOtherDistro { found, expected, .. }) if found == "Debian" && expected == "Ubuntu"
        ));
    }

    #[test]
    fn windows_absolute_detection() {
        for yes in [r"C:\x", "c:/x", r"\\wsl$\U\x", r"\\?\C:\x"] {
            assert!(is_windows_absolute(yes), "{yes}");
        }
        for no in ["/usr/bin/printf", "C:", "C:x", "x", "", "--config", "a:b", r"\x"] {
            assert!(!is_windows_absolute(no), "{no}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn non_unicode_paths_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(b"C:\\\xff"));
        assert!(matches!(path_to_wsl(path, "Ubuntu"), Err(Error::PathNotUnicode { .. })));
    }
}
