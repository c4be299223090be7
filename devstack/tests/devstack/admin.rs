//! The admin endpoint's checks as a browser or another local user would
//! meet them: a request without the bearer token is 401 whatever it
//! carries (a token in the query or a cookie, a rebinding site's Host), a
//! request with it for a host that is not loopback is 421, and the CLI's
//! client trusts only a discovery file of this user's.

use std::sync::Arc;

use devstack::admin::{Admin, AdminOptions, discovery};
use devstack::{DevStack, DevStackOptions};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The status of a raw HTTP/1.1 GET of `/v1/stack` with these headers.
async fn status(url: &str, headers: &str) -> u16 {
    let mut tcp = TcpStream::connect(url.trim_start_matches("http://")).await.unwrap();
    let request = format!("GET /v1/stack HTTP/1.1\r\n{headers}Connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {text:?}"))
}

#[tokio::test]
async fn without_the_token_or_for_another_host_the_endpoint_answers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Arc::new(DevStack::start(DevStackOptions::memory()).await.unwrap());
    let options = AdminOptions {
        discovery: dir.path().join("admin").join("admin.json"),
        data_dir: dir.path().to_path_buf(),
        default_pool: "default".into(),
        releases: None,
    };
    let admin = Admin::serve(stack.clone(), options).await.unwrap();
    let found = discovery::read_trusted(admin.discovery_path()).unwrap();
    let token = std::fs::read_to_string(&found.token_file).unwrap();
    let bearer = format!("Authorization: Bearer {}\r\n", token.trim());
    let host = format!("Host: {}\r\n", admin.url().trim_start_matches("http://"));
    let port = admin.url().rsplit(':').next().unwrap().to_string();

    assert_eq!(status(admin.url(), &format!("{host}{bearer}")).await, 200);
    assert_eq!(status(admin.url(), &format!("Host: localhost:{port}\r\n{bearer}")).await, 200);
    for (without_token, what) in [
        (host.clone(), "no token"),
        (format!("{host}Cookie: token={}\r\n", token.trim()), "a cookie"),
        (format!("Host: rebound.example:{port}\r\n"), "a rebinding site"),
        (format!("{host}Origin: http://evil.example\r\n"), "a cross-site request"),
    ] {
        assert_eq!(status(admin.url(), &without_token).await, 401, "{what}");
    }
    // With the token (leaked, say), a rebinding site's Host is still refused.
    assert_eq!(status(admin.url(), &format!("Host: rebound.example:{port}\r\n{bearer}")).await, 421);
    assert_eq!(status(admin.url(), &format!("Host: 10.0.0.1:{port}\r\n{bearer}")).await, 421);
    admin.shutdown().await;
}
