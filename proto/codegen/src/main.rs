//! `proto-codegen [--check]`: regenerate the committed protocol code, or fail on drift.
//! Run through `cargo xtask codegen`.

use anyhow::{Result, bail};

fn main() -> Result<()> {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some("-h" | "--help") => {
            println!(
                "usage: proto-codegen [--check]\n\nRegenerates proto/src/gen and daemon/internal/proto from proto/*.proto, and the\nrefusal codes of proto/refusals.toml (Rust and Go); with --check, writes nothing and fails if a committed file is stale."
            );
            return Ok(());
        }
        Some(other) => bail!("unknown argument {other:?} (try --help)"),
    };
    let root = proto_codegen::workspace_root();
    if check {
        let stale = proto_codegen::check(&root)?;
        if !stale.is_empty() {
            for f in &stale {
                eprintln!("stale: {}", f.display());
            }
            bail!("{} generated file(s) are stale; run `cargo xtask codegen`", stale.len());
        }
        println!("codegen: up to date");
    } else {
        let written = proto_codegen::write(&root)?;
        for f in &written {
            println!("wrote {}", f.display());
        }
        println!("codegen: {} file(s) changed", written.len());
    }
    Ok(())
}
