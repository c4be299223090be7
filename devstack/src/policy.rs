//! Pool policies (docs/devstack.md, "Pool policies"): what a pool asks of
//! its hosts (huge pages, kernel modules, the host's own CPUs, CPU and
//! memory overcommit, Kubernetes bindings), stored with the pool as JSON,
//! and rendered into each node's `NodeSpec.host` section: the systemd units
//! bcd applies (`bcd-hugepages.service`, `bcd-modules.service`) and the
//! facts its admission and plans need. The spec carrying it is signed like
//! any other under signed intent; bcd applies units only from a signed one.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A huge page size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HugePageSize {
    /// 2 MiB pages.
    #[default]
    #[serde(rename = "2Mi")]
    Mi2,
    /// 1 GiB pages.
    #[serde(rename = "1Gi")]
    Gi1,
}

impl HugePageSize {
    /// The page size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            HugePageSize::Mi2 => 2 << 20,
            HugePageSize::Gi1 => 1 << 30,
        }
    }

    /// The kernel's name of the pool (`hugepages-2048kB`).
    pub fn sysfs(self) -> &'static str {
        match self {
            HugePageSize::Mi2 => "hugepages-2048kB",
            HugePageSize::Gi1 => "hugepages-1048576kB",
        }
    }
}

/// Huge pages a pool reserves on each host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePages {
    /// Their size.
    pub size: HugePageSize,
    /// How many, machine-wide (the kernel spreads them over the NUMA nodes).
    pub count: u64,
}

/// What a pool asks of its hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolPolicy {
    /// Huge pages reserved at boot (`bcd-hugepages.service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<HugePages>,
    /// Kernel modules loaded (`bcd-modules.service`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_modules: Vec<String>,
    /// The host's own CPUs: no guest vCPU is pinned there, and they are not
    /// booked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_cpus: Vec<u32>,
    /// Guest vCPUs per 100 free CPUs (0 or 100: no overcommit).
    #[serde(default)]
    pub cpu_overcommit_percent: u32,
    /// Guest memory per 100 bytes of the host's (0 or 100: none).
    #[serde(default)]
    pub memory_overcommit_percent: u32,
    /// Holds on the pool may bind to Kubernetes.
    #[serde(default)]
    pub kubernetes: bool,
}

/// The most huge pages a policy may ask (of either size).
pub const MAX_HUGEPAGES: u64 = 1 << 20;

impl PoolPolicy {
    /// A stored pool's policy (the default for `{}`).
    pub fn of(pool: &crate::store::rows::PoolRow) -> Result<PoolPolicy> {
        PoolPolicy::from_json(&pool.policy)
            .map_err(|e| crate::store::Error::corrupt("pools", "policy", pool.id.clone(), e).into())
    }

    /// Whether it asks nothing (no host section is sent).
    pub fn is_empty(&self) -> bool {
        *self == PoolPolicy::default()
    }

    /// Refuses a policy the stack would render into units bcd cannot run
    /// (`InvalidPolicy`).
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidPolicy { reason });
        if let Some(h) = &self.hugepages
            && (h.count == 0 || h.count > MAX_HUGEPAGES)
        {
            return bad(format!("hugepages.count {} is not in 1..={MAX_HUGEPAGES}", h.count));
        }
        for m in &self.kernel_modules {
            if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return bad(format!("kernel module {m:?} is not a module name ([A-Za-z0-9_-]+)"));
            }
        }
        let mut cpus = self.reserved_cpus.clone();
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.len() != self.reserved_cpus.len() {
            return bad("reservedCpus names a CPU twice".into());
        }
        for (name, p) in [("cpu", self.cpu_overcommit_percent), ("memory", self.memory_overcommit_percent)] {
            if p != 0 && !(100..=1000).contains(&p) {
                return bad(format!("{name}OvercommitPercent {p} is not 0 or in 100..=1000"));
            }
        }
        Ok(())
    }

    /// The policy as stored (`pools.policy`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a policy serializes")
    }

    /// A stored policy.
    pub fn from_json(text: &str) -> std::result::Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The host section of the pool's nodes (None for an empty policy).
    pub fn host_section(&self) -> Option<proto::HostSection> {
        if self.is_empty() {
            return None;
        }
        let mut units = Vec::new();
        if let Some(h) = self.hugepages {
            units.push(proto::HostUnit { name: HUGEPAGES_UNIT.into(), content: hugepages_unit(h).into_bytes() });
        }
        if !self.kernel_modules.is_empty() {
            units.push(proto::HostUnit {
                name: MODULES_UNIT.into(),
                content: modules_unit(&self.kernel_modules).into_bytes(),
            });
        }
        let mut reserved_cpus = self.reserved_cpus.clone();
        reserved_cpus.sort_unstable();
        Some(proto::HostSection {
            units,
            reserved_cpus,
            cpu_overcommit_percent: self.cpu_overcommit_percent,
            memory_overcommit_percent: self.memory_overcommit_percent,
            kubernetes: self.kubernetes,
        })
    }
}

/// The unit that reserves huge pages.
pub const HUGEPAGES_UNIT: &str = "bcd-hugepages.service";
/// The unit that loads kernel modules.
pub const MODULES_UNIT: &str = "bcd-modules.service";

/// `bcd-hugepages.service`: the count written to the machine-wide
/// `nr_hugepages` of the size before anything else starts (no shell: tee
/// reads the count from StandardInputText).
fn hugepages_unit(h: HugePages) -> String {
    format!(
        "# Rendered by the control plane from the pool policy's hugepages; do not edit.\n\
         [Unit]\n\
         Description=bcd: reserve {count} huge pages of {kb} kB\n\
         DefaultDependencies=no\n\
         Before=sysinit.target bcd.service\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         StandardInputText={count}\n\
         StandardOutput=null\n\
         ExecStart=/usr/bin/tee /sys/kernel/mm/hugepages/{pool}/nr_hugepages\n\
         \n\
         [Install]\n\
         WantedBy=sysinit.target\n",
        count = h.count,
        kb = h.size.bytes() >> 10,
        pool = h.size.sysfs(),
    )
}

/// `bcd-modules.service`: the modules loaded with one modprobe.
fn modules_unit(modules: &[String]) -> String {
    format!(
        "# Rendered by the control plane from the pool policy's kernelModules; do not edit.\n\
         [Unit]\n\
         Description=bcd: load kernel modules {list}\n\
         DefaultDependencies=no\n\
         Before=sysinit.target bcd.service\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         ExecStart=/usr/sbin/modprobe -a {list}\n\
         \n\
         [Install]\n\
         WantedBy=sysinit.target\n",
        list = modules.join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_back_and_renders_its_units() {
        let p = PoolPolicy {
            hugepages: Some(HugePages { size: HugePageSize::Mi2, count: 64 }),
            kernel_modules: vec!["tun".into(), "vhost_net".into()],
            reserved_cpus: vec![1, 0],
            kubernetes: true,
            ..PoolPolicy::default()
        };
        p.check().unwrap();
        assert_eq!(PoolPolicy::from_json(&p.to_json()).unwrap(), p);
        let host = p.host_section().unwrap();
        assert_eq!(host.reserved_cpus, [0, 1]);
        assert!(host.kubernetes);
        let names: Vec<&str> = host.units.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, [HUGEPAGES_UNIT, MODULES_UNIT]);
        let text = String::from_utf8(host.units[0].content.clone()).unwrap();
        assert!(text.contains("StandardInputText=64\n"), "{text}");
        assert!(text.contains("ExecStart=/usr/bin/tee /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages\n"));
        assert!(PoolPolicy::default().host_section().is_none());
    }

    #[test]
    fn a_bad_policy_is_refused() {
        for p in [
            PoolPolicy { hugepages: Some(HugePages { size: HugePageSize::Gi1, count: 0 }), ..Default::default() },
            PoolPolicy { kernel_modules: vec!["tun; reboot".into()], ..Default::default() },
            PoolPolicy { reserved_cpus: vec![2, 2], ..Default::default() },
            PoolPolicy { cpu_overcommit_percent: 50, ..Default::default() },
        ] {
            assert!(matches!(p.check(), Err(Error::InvalidPolicy { .. })), "{p:?}");
        }
        assert!(PoolPolicy::from_json(r#"{"hugePages":{}}"#).is_err());
    }
}
