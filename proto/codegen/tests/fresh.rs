//! The committed generated code matches `proto/*.proto` (what `cargo xtask codegen --check` checks).

#[test]
fn generated_code_is_fresh() {
    let stale = proto_codegen::check(&proto_codegen::workspace_root()).expect("codegen runs");
    assert!(stale.is_empty(), "stale generated files {stale:?}: run `cargo xtask codegen`");
}
