//! Command lines for `wsl.exe`, always as an argv, never as a shell string.
//!
//! `wsl.exe -d <distro> -e <program> <args…>` runs `program` directly (no
//! Linux shell), with `args` as its argv. On Windows, Rust's `Command` quotes
//! each argument for `CommandLineToArgvW`, which is how `wsl.exe` splits its
//! command line again, so every argument arrives as one argv entry, spaces,
//! quotes and `$` included.
//!
//! `wsl.exe` passes no Windows environment variable into Linux except those
//! listed in `WSLENV` (`NAME1:NAME2/p:…`); [`wslenv`] builds that list.

use std::ffi::{OsStr, OsString};

use crate::error::{Error, Result};

/// Whether `name` is a distribution name `wsl.exe -d` takes as one name:
/// letters, digits, `.`, `_`, `-`, not starting with `-`.
pub fn validate_distro(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok { Ok(()) } else { Err(Error::InvalidDistroName { name: name.to_string() }) }
}

fn has_nul(s: &OsStr) -> bool {
    s.as_encoded_bytes().contains(&0)
}

/// The arguments of `wsl.exe` (after the program name) that run `program
/// args…` in `distro`: `["-d", distro, "-e", program, args…]`.
///
/// Every argument after `-e` belongs to the program, so `args` may start with
/// `-` and contain anything but NUL.
pub fn exec_args(distro: &str, program: &OsStr, args: &[OsString]) -> Result<Vec<OsString>> {
    validate_distro(distro)?;
    if program.is_empty() || has_nul(program) {
        return Err(Error::InvalidProgram { program: program.to_string_lossy().into_owned() });
    }
    if let Some(index) = args.iter().position(|a| has_nul(a)) {
        return Err(Error::ArgumentContainsNul { index });
    }
    let mut argv = Vec::with_capacity(args.len() + 4);
    argv.extend([OsString::from("-d"), OsString::from(distro), OsString::from("-e"), program.to_os_string()]);
    argv.extend(args.iter().cloned());
    Ok(argv)
}

/// The value of `WSLENV` that passes `names` into Linux unchanged, on top of
/// what `existing` (the current `WSLENV`) already passes. A name already
/// listed (with or without flags) is not repeated. Names are passed without
/// flags: values are not translated as paths.
pub fn wslenv(existing: Option<&str>, names: &[&str]) -> Result<String> {
    let mut entries: Vec<String> =
        existing.unwrap_or("").split(':').filter(|entry| !entry.is_empty()).map(str::to_string).collect();
    for name in names {
        if name.is_empty() || name.contains([':', '/', '=', '\0']) {
            return Err(Error::InvalidEnvName { name: name.to_string() });
        }
        let listed = entries.iter().any(|entry| entry.split('/').next() == Some(name));
        if !listed {
            entries.push(name.to_string());
        }
    }
    Ok(entries.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn argv_is_one_entry_per_argument() {
        let args = os(&["a b", "it's \"quoted\"", "$HOME", "-e", "--", ""]);
        let argv = exec_args("Ubuntu-22.04", OsStr::new("/usr/bin/printf"), &args).unwrap();
        assert_eq!(
            argv,
            os(&["-d", "Ubuntu-22.04", "-e", "/usr/bin/printf", "a b", "it's \"quoted\"", "$HOME", "-e", "--", ""])
        );
    }

    #[test]
    fn bad_distro_names_are_refused() {
        for name in ["", "-e", "a b", "a;b", "a\"b", "Ubuntu\0"] {
            assert!(
                matches!(exec_args(name, OsStr::new("true"), &[]), Err(Error::InvalidDistroName { .. })),
                "{name:?}"
            );
        }
    }

    #[test]
    fn empty_program_and_nul_are_refused() {
        assert!(matches!(exec_args("D", OsStr::new(""), &[]), Err(Error::InvalidProgram { .. })));
        assert!(matches!(exec_args("D", OsStr::new("a\0b"), &[]), Err(Error::InvalidProgram { .. })));
        assert!(matches!(
            exec_args("D", OsStr::new("x"), &os(&["ok", "bad\0"])),
            Err(Error::ArgumentContainsNul { index: 1 })
        ));
    }

    #[test]
    fn wslenv_merges_names() {
        assert_eq!(wslenv(None, &["A", "B"]).unwrap(), "A:B");
        assert_eq!(wslenv(Some(""), &["A"]).unwrap(), "A");
        assert_eq!(wslenv(Some("USERPROFILE/p:A"), &["A", "B"]).unwrap(), "USERPROFILE/p:A:B");
        assert_eq!(wslenv(Some("A/u"), &["A"]).unwrap(), "A/u");
        for bad in ["", "A:B", "A/p", "A=B"] {
            assert!(matches!(wslenv(None, &[bad]), Err(Error::InvalidEnvName { .. })), "{bad:?}");
        }
    }
}
