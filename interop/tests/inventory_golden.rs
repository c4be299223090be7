//! The Go-to-Rust golden: the inventory sections the fakehw bcd writes for
//! every variant at seed 41 (`testdata/daemon/inventory/`) decode in Rust,
//! re-encode to the same bytes, and hash to the SHA-256 that bcd reports and
//! the dev stack stores.

use prost::Message;
use sha2::{Digest, Sha256};

fn reencode<M: Message + Default>(bytes: &[u8]) -> (M, Vec<u8>) {
    let msg = M::decode(bytes).expect("a section decodes");
    let again = msg.encode_to_vec();
    (msg, again)
}

#[test]
fn golden_sections_hash_and_reencode_byte_for_byte() {
    let dir = interop::testdata().join("daemon/inventory");
    let golden = fixtures::read_json(&dir.join("hashes.json")).unwrap();
    assert_eq!(golden["seed"], "41");
    let variants = golden["variants"].as_array().expect("variants");
    let names: Vec<&str> = variants.iter().map(|v| v["variant"].as_str().unwrap()).collect();
    assert_eq!(names, ["hgx-h100", "hgx-h100-gpu-missing", "l40s", "cpu"]);

    for variant in variants {
        let variant_name = variant["variant"].as_str().unwrap();
        let mut gpus_seen = None;
        for section in variant["sections"].as_array().unwrap() {
            let name = section["name"].as_str().unwrap();
            let bytes = std::fs::read(dir.join(variant_name).join(format!("{name}.pb"))).unwrap();
            assert_eq!(
                hex::encode(Sha256::digest(&bytes)),
                section["sha256"].as_str().unwrap(),
                "{variant_name}/{name}"
            );
            let again = match name {
                "system" => reencode::<proto::SystemInventory>(&bytes).1,
                "network" => reencode::<proto::NetworkInventory>(&bytes).1,
                "gpus" => {
                    let (gpus, again) = reencode::<proto::GpuInventory>(&bytes);
                    gpus_seen = Some(gpus);
                    again
                }
                other => panic!("unknown section {other}"),
            };
            assert_eq!(again, bytes, "{variant_name}/{name} re-encodes byte for byte");
        }
        let count = gpus_seen.as_ref().map(|g| g.gpus.len()).unwrap_or(0);
        let (expected, model, fabric) = match variant_name {
            "hgx-h100" => (8, "H100", "nvswitch"),
            "hgx-h100-gpu-missing" => (7, "H100", "nvswitch"),
            "l40s" => (4, "L40S", "pcie"),
            _ => (0, "", ""),
        };
        assert_eq!(count, expected, "{variant_name}: GPU count");
        if let Some(gpus) = gpus_seen {
            assert_eq!(gpus.fabric, fabric, "{variant_name}");
            assert!(gpus.gpus.iter().all(|g| g.model.contains(model)), "{variant_name}: {:?}", gpus.gpus);
        }
    }
}
