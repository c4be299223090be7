//! What the Go side wrote (`testdata/daemon/daemon.json`) verifies in Rust,
//! and tampered copies of each object are refused with their codes.

#[test]
fn go_written_objects_verify_and_tampered_copies_are_refused() {
    let fixture = fixtures::daemon::DaemonFixture::load(&interop::testdata()).unwrap();
    let checked = fixture.check().unwrap();
    assert!(checked.positive >= 5, "{checked:?}");
    assert!(checked.negative >= 10, "{checked:?}");
}
