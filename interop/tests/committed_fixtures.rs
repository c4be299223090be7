//! The committed Rust-made fixtures are exactly what the generators write
//! now, and every case in them verifies through `pki`.

use fixtures::keyring::Keyring;
use fixtures::{SEED, interop as gen_interop, release};

#[test]
fn committed_interop_and_release_files_are_fresh() {
    let keys = Keyring::new(SEED);
    let (mut files, _) = gen_interop::files(&keys).unwrap();
    files.0.extend(release::files(&keys).0.0);
    let stale = files.stale(&interop::testdata());
    assert!(stale.is_empty(), "stale fixtures {stale:?}: run `cargo xtask daemon-fixtures`");
}

#[test]
fn every_committed_case_verifies_in_rust() {
    for file in ["interop.json", "release/release.json"] {
        let doc = fixtures::read_json(&interop::testdata().join(file)).unwrap();
        let (positive, negative) = gen_interop::verify(&doc).unwrap();
        assert!(positive > 0 && negative > 0, "{file}: {positive} positive, {negative} negative");
    }
}
