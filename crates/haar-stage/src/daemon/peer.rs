//! Who is at the other end of the service's socket: the kernel's word (`SO_PEERCRED`), never
//! a name in the request.

use std::os::unix::net::UnixStream;

/// The identity of the process at the other end of a Unix socket, as the kernel states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// Its pid.
    pub pid: i32,
}

/// `SO_PEERCRED` of a connected Unix socket.
pub(crate) fn peer_of(s: &UnixStream) -> std::io::Result<Peer> {
    use std::os::fd::AsRawFd;
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket fd, and a ucred-sized buffer with its length.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer {
        uid: c.uid,
        gid: c.gid,
        pid: c.pid,
    })
}
