//! The default route of a distribution, read with `ip route show default`.
//!
//! Under WSL's default NAT networking the default gateway is the Windows
//! host's address on the `vEthernet (WSL)` switch: that is where a program
//! inside the distribution reaches a listener of the Windows side. (Under
//! mirrored networking the gateway is the LAN's router instead and Windows
//! is reached at 127.0.0.1; the runner assumes NAT.)

use std::net::IpAddr;

use crate::error::{Error, Result};

/// The gateway of the default route in the output of `ip route show
/// default`. Lines look like `default via 172.22.96.1 dev eth0 proto kernel`;
/// with several default routes the one with the lowest `metric` wins (no
/// metric is metric 0), the first printed on a tie.
pub fn parse_default_route(output: &str) -> Result<IpAddr> {
    let defaults: Vec<(&str, Vec<&str>)> = output
        .lines()
        .map(|line| (line.trim(), line.split_whitespace().collect::<Vec<_>>()))
        .filter(|(_, words)| words.first() == Some(&"default"))
        .collect();
    let Some((first_line, _)) = defaults.first() else {
        return Err(Error::NoDefaultRoute { output: output.to_string() });
    };
    let word_after = |words: &[&str], key: &str| -> Option<String> {
        words.windows(2).find(|pair| pair[0] == key).map(|pair| pair[1].to_string())
    };
    let mut best: Option<(u64, &str, String)> = None;
    for (line, words) in &defaults {
        let Some(via) = word_after(words, "via") else { continue };
        let metric = word_after(words, "metric").and_then(|m| m.parse().ok()).unwrap_or(0);
        if best.as_ref().is_none_or(|(m, _, _)| metric < *m) {
            best = Some((metric, line, via));
        }
    }
    let Some((_, line, via)) = best else {
        return Err(Error::DefaultRouteWithoutGateway { line: first_line.to_string() });
    };
    via.parse().map_err(|_| Error::BadGatewayAddress { line: line.to_string(), address: via })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wsl_default_route() {
        let out = "default via 172.22.96.1 dev eth0 proto kernel \n";
        assert_eq!(parse_default_route(out).unwrap(), "172.22.96.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_netns_default_route() {
        assert_eq!(parse_default_route("default via 10.213.0.1 dev eth0 \n").unwrap().to_string(), "10.213.0.1");
    }

    #[test]
    fn other_routes_are_ignored_and_the_lowest_metric_wins() {
        let out = "10.0.0.0/8 via 10.1.1.1 dev eth1\n\
                   default via 192.168.1.1 dev wlan0 proto dhcp metric 600\n\
                   default via 172.22.96.1 dev eth0 proto kernel metric 100\n\
                   default via 172.22.96.9 dev eth0 proto kernel metric 100\n";
        assert_eq!(parse_default_route(out).unwrap().to_string(), "172.22.96.1");
    }

    #[test]
    fn onlink_and_ipv6_gateways() {
        assert_eq!(parse_default_route("default via 10.0.0.1 dev eth0 onlink").unwrap().to_string(), "10.0.0.1");
        assert_eq!(parse_default_route("default via fe80::1 dev eth0 metric 1024").unwrap().to_string(), "fe80::1");
    }

    #[test]
    fn no_default_route_is_refused() {
        assert!(matches!(parse_default_route(""), Err(Error::NoDefaultRoute { .. })));
        assert!(matches!(parse_default_route("10.0.0.0/8 dev eth0 scope link\n"), Err(Error::NoDefaultRoute { .. })));
    }

    #[test]
    fn a_default_route_without_gateway_is_refused() {
        assert!(matches!(
            parse_default_route("default dev wg0 scope link\n"),
            Err(Error::DefaultRouteWithoutGateway { line }) if line == "default dev wg0 scope link"
        ));
    }

    #[test]
    fn a_bad_gateway_is_refused() {
        assert!(matches!(
            parse_default_route("default via gateway.local dev eth0\n"),
            Err(Error::BadGatewayAddress { address, .. }) if address == "gateway.local"
        ));
    }
}
