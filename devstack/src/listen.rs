//! The stack's listening sockets: bound with `SO_REUSEADDR` as tokio's
//! `TcpListener::bind` does, but with a listen backlog sized for a fleet
//! joining at once ([`LISTEN_BACKLOG`]) instead of the standard library's
//! 128, so that 10,000 agents dialing together queue in the kernel instead
//! of being dropped (the kernel holds it to `net.core.somaxconn`); and
//! the open-file limit a fleet needs.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The backlog asked for each listener: a connection waiting for its
/// accept costs the kernel a few hundred bytes, a dropped SYN costs the
/// node a second or more of retransmit.
pub const LISTEN_BACKLOG: u32 = 16_384;

/// Binds `addr` and listens with [`LISTEN_BACKLOG`].
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Raises this process's soft open-file limit to the hard one: a fleet's
/// stack holds a descriptor per session (and a fault proxy three per
/// agent), and the `bcd sim` children it starts inherit the limit.
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on this process with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_a_free_port_and_accepts() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        assert_eq!(client.unwrap().local_addr().unwrap(), accepted.unwrap().1);
    }
}
