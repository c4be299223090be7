//! An instance's network policy as the stack takes it (docs/protocol.md,
//! "Instances"): checked before anything is stored, with the rules
//! bcd and its helper check again on the host (protocol `tcp`, `udp` or
//! `icmp`; the peer's IPv4 network with no address bits beyond its prefix;
//! ports 1 to 65535 in order, none for `icmp`; at most 64 rules in each
//! direction).

use proto::NetworkPolicy;

/// The most rules a policy holds in each direction.
pub const MAX_RULES: usize = 64;

/// Checks a policy; the error names the rule and what is wrong with it.
pub fn check(policy: &NetworkPolicy) -> Result<(), String> {
    for (direction, rules) in [("ingress", &policy.ingress), ("egress", &policy.egress)] {
        if rules.len() > MAX_RULES {
            return Err(format!("{} {direction} rules (at most {MAX_RULES})", rules.len()));
        }
        for (i, rule) in rules.iter().enumerate() {
            check_rule(rule).map_err(|why| format!("{direction} rule {i}: {why}"))?;
        }
    }
    Ok(())
}

fn check_rule(rule: &proto::NetworkRule) -> Result<(), String> {
    check_cidr(&rule.cidr)?;
    let (min, max) = (rule.port_min, rule.port_max);
    match rule.protocol.as_str() {
        "tcp" | "udp" if (1..=max).contains(&min) && max <= 65_535 => Ok(()),
        "tcp" | "udp" => Err(format!("ports {min}-{max} (1 to 65535, the first not above the last)")),
        "icmp" if min == 0 && max == 0 => Ok(()),
        "icmp" => Err(format!("ports {min}-{max} for icmp (it has none)")),
        other => Err(format!("protocol {other:?} (tcp, udp or icmp)")),
    }
}

/// An IPv4 network `a.b.c.d/len` whose address has no bits beyond its
/// prefix (std parses the address; nothing else is needed).
fn check_cidr(cidr: &str) -> Result<(), String> {
    let bad = || format!("peer {cidr:?} (an IPv4 network such as 10.0.0.0/8)");
    let (addr, len) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: std::net::Ipv4Addr = addr.parse().map_err(|_| bad())?;
    // Written the one way Go's netip writes it: no sign, no leading zero.
    let len: u32 = len.parse().ok().filter(|l: &u32| *l <= 32 && l.to_string() == len).ok_or_else(bad)?;
    let host_bits = u32::MAX.checked_shr(len).unwrap_or(0);
    if u32::from(addr) & host_bits != 0 {
        return Err(format!("peer {cidr:?} has address bits beyond its prefix"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::NetworkRule;

    fn rule(protocol: &str, cidr: &str, min: u32, max: u32) -> NetworkRule {
        NetworkRule { protocol: protocol.into(), cidr: cidr.into(), port_min: min, port_max: max }
    }

    #[test]
    fn a_policy_of_every_protocol_passes_and_an_empty_one_too() {
        let policy = NetworkPolicy {
            ingress: vec![rule("tcp", "10.0.0.0/8", 22, 22), rule("icmp", "0.0.0.0/0", 0, 0)],
            egress: vec![rule("udp", "169.254.0.0/16", 53, 53), rule("tcp", "192.0.2.7/32", 8000, 8100)],
        };
        assert_eq!(check(&policy), Ok(()));
        assert_eq!(check(&NetworkPolicy::default()), Ok(()));
    }

    #[test]
    fn each_bad_rule_is_named_with_why() {
        for (bad, why) in [
            (rule("tcp; flush ruleset", "0.0.0.0/0", 1, 1), "ingress rule 0: protocol"),
            (rule("sctp", "0.0.0.0/0", 1, 1), "protocol \"sctp\""),
            (rule("tcp", "10.0.0.1/8", 22, 22), "address bits beyond its prefix"),
            (rule("tcp", "fd00::/8", 22, 22), "an IPv4 network"),
            (rule("tcp", "10.0.0.0/33", 22, 22), "an IPv4 network"),
            (rule("tcp", "10.0.0.0/+8", 22, 22), "an IPv4 network"),
            (rule("tcp", "10.0.0.0/08", 22, 22), "an IPv4 network"),
            (rule("tcp", "010.0.0.0/8", 22, 22), "an IPv4 network"),
            (rule("tcp", " 10.0.0.0/8", 22, 22), "an IPv4 network"),
            (rule("tcp", "10.0.0.0", 22, 22), "an IPv4 network"),
            (rule("tcp", "0.0.0.0/0 drop", 22, 22), "an IPv4 network"),
            (rule("tcp", "0.0.0.0/0", 0, 22), "ports 0-22"),
            (rule("udp", "0.0.0.0/0", 30, 20), "ports 30-20"),
            (rule("udp", "0.0.0.0/0", 1, 65_536), "ports 1-65536"),
            (rule("icmp", "0.0.0.0/0", 8, 8), "for icmp"),
        ] {
            let err = check(&NetworkPolicy { ingress: vec![bad.clone()], egress: vec![] }).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let many = NetworkPolicy { ingress: vec![], egress: vec![rule("tcp", "0.0.0.0/0", 1, 1); MAX_RULES + 1] };
        assert_eq!(check(&many).unwrap_err(), "65 egress rules (at most 64)");
    }
}
