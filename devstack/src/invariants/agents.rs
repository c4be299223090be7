//! What the agents' fake hardware recorded (docs/daemon.md, "Fake hardware"), the
//! ground truth of I1 and I2 beside the store: under each fakehw root,
//! `var/lib/fakehw/executions/<command id>` (how many times the command
//! ran), `var/lib/fakehw/starts` (one line per agent start: Unix ms),
//! `var/lib/fakehw/boots` (one line per boot, the first its power-on) and
//! `etc/cdi/bcd-alloc-<allocation id>.json` (the devices a hold keeps).
//! Read with the node stopped or idle: a file being written reads as what
//! it held before.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::Ms;

/// One node's fake hardware facts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAgentFacts {
    /// How many times each command ran.
    pub executions: BTreeMap<String, u64>,
    /// When the agent started, each time (Unix ms).
    pub starts: Vec<Ms>,
    /// When the machine booted, each time (Unix ms; the first: its power-on).
    pub boots: Vec<Ms>,
    /// The GPU indexes each hold keeps, by allocation id.
    pub holds: BTreeMap<String, Vec<u32>>,
}

/// Every node's fake hardware facts, by node id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentFacts {
    /// By node id.
    pub nodes: BTreeMap<String, NodeAgentFacts>,
}

/// The fake root under a bcd data dir.
pub fn fakehw_root(data_dir: &Path) -> PathBuf {
    data_dir.join("fakehw-root")
}

impl AgentFacts {
    /// Adds the node `node_id` whose bcd data dir is `data_dir`.
    pub fn add(&mut self, node_id: &str, data_dir: &Path) -> io::Result<()> {
        self.nodes.insert(node_id.to_string(), NodeAgentFacts::read(&fakehw_root(data_dir))?);
        Ok(())
    }

    /// Adds every joined agent of a `bcd sim` whose base data dir is
    /// `data_dir` (`data_dir/sim/<i>/config.toml` names each agent's node
    /// id and data dir); agents that have not joined are skipped.
    pub fn add_sim(&mut self, data_dir: &Path) -> io::Result<()> {
        let sim = data_dir.join("sim");
        let entries = match std::fs::read_dir(&sim) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let dir = entry?.path();
            let Ok(text) = std::fs::read_to_string(dir.join("config.toml")) else { continue };
            let Some(node_id) = toml_string(&text, "node_id").filter(|id| !id.is_empty()) else { continue };
            let agent_dir = toml_string(&text, "data_dir").map_or(dir, PathBuf::from);
            self.add(&node_id, &agent_dir)?;
        }
        Ok(())
    }
}

/// A top-level string value of a bcd config.toml (`key = "value"`).
fn toml_string(text: &str, key: &str) -> Option<String> {
    text.lines().take_while(|l| !l.trim_start().starts_with('[')).find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

impl NodeAgentFacts {
    /// Reads a fakehw root (missing files read as nothing recorded).
    pub fn read(root: &Path) -> io::Result<Self> {
        let mut facts = NodeAgentFacts::default();
        let lib = root.join("var/lib/fakehw");
        for (name, text) in files(&lib.join("executions"))? {
            let count = text.trim().parse().map_err(|_| bad(&lib.join("executions").join(&name), &text))?;
            facts.executions.insert(name, count);
        }
        facts.starts = times(&lib.join("starts"))?;
        facts.boots = times(&lib.join("boots"))?;
        for (name, text) in files(&root.join("etc/cdi"))? {
            let Some(id) = name.strip_prefix("bcd-alloc-").and_then(|n| n.strip_suffix(".json")) else { continue };
            facts.holds.insert(id.to_string(), cdi_gpus(&text));
        }
        Ok(facts)
    }
}

/// A file of Unix ms, one a line (none when it is missing).
fn times(path: &Path) -> io::Result<Vec<Ms>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.trim().parse().map_err(|_| bad(path, l))).collect()
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The regular files of a directory, by name (none when it is missing).
fn files(dir: &Path) -> io::Result<Vec<(String, String)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push((name, std::fs::read_to_string(entry.path())?));
    }
    out.sort();
    Ok(out)
}

fn bad(path: &Path, text: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{} holds {text:?}", path.display()))
}

/// The GPU indexes of a CDI spec's device nodes (`/dev/nvidia<N>`), sorted.
fn cdi_gpus(text: &str) -> Vec<u32> {
    let spec: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let mut gpus: Vec<u32> = spec["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["containerEdits"]["deviceNodes"].as_array().into_iter().flatten())
        .filter_map(|n| n["path"].as_str()?.strip_prefix("/dev/nvidia")?.parse().ok())
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fake_root_reads_back_as_counters_starts_and_holds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("var/lib/fakehw/executions")).unwrap();
        std::fs::create_dir_all(root.join("etc/cdi")).unwrap();
        std::fs::write(root.join("var/lib/fakehw/executions/cmd_1"), "2\n").unwrap();
        std::fs::write(root.join("var/lib/fakehw/starts"), "100\n250\n").unwrap();
        std::fs::write(root.join("var/lib/fakehw/boots"), "90\n").unwrap();
        let spec = r#"{"devices":[{"name":"rsv_1","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia3"},{"path":"/dev/nvidia1"}]}}]}"#;
        std::fs::write(root.join("etc/cdi/bcd-alloc-rsv_1.json"), spec).unwrap();
        std::fs::write(root.join("etc/cdi/other.json"), "{}").unwrap();
        let facts = NodeAgentFacts::read(root).unwrap();
        assert_eq!(facts.executions["cmd_1"], 2);
        assert_eq!((facts.starts.as_slice(), facts.boots.as_slice()), (&[100, 250][..], &[90][..]));
        assert_eq!(facts.holds.len(), 1);
        assert_eq!(facts.holds["rsv_1"], [1, 3]);
        assert_eq!(NodeAgentFacts::read(&root.join("missing")).unwrap(), NodeAgentFacts::default());
    }

    #[test]
    fn a_sim_names_its_joined_agents() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("sim/0");
        std::fs::create_dir_all(fakehw_root(&agent).join("var/lib/fakehw/executions")).unwrap();
        std::fs::write(fakehw_root(&agent).join("var/lib/fakehw/executions/c"), "1").unwrap();
        let config = format!("data_dir = \"{}\"\nnode_id = \"node_a\"\n[update]\nnode_id = \"x\"\n", agent.display());
        std::fs::write(agent.join("config.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path().join("sim/1")).unwrap();
        std::fs::write(dir.path().join("sim/1/config.toml"), "node_id = \"\"\n").unwrap();
        let mut facts = AgentFacts::default();
        facts.add_sim(dir.path()).unwrap();
        assert_eq!(facts.nodes.keys().collect::<Vec<_>>(), ["node_a"]);
        assert_eq!(facts.nodes["node_a"].executions["c"], 1);
    }
}
