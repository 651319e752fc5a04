//! The socket a replication link runs on, taken out of a worker's event
//! loop (a replica's `replicate` connection) and used blocking by its own
//! thread.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub(crate) enum LinkStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl LinkStream {
    pub(crate) fn try_clone(&self) -> io::Result<LinkStream> {
        Ok(match self {
            LinkStream::Tcp(stream) => LinkStream::Tcp(stream.try_clone()?),
            LinkStream::Unix(stream) => LinkStream::Unix(stream.try_clone()?),
        })
    }

    /// Blocking, with a bound on how long a write may wait for the peer.
    pub(crate) fn make_blocking(&self, write_timeout: Duration) -> io::Result<()> {
        match self {
            LinkStream::Tcp(stream) => {
                stream.set_nonblocking(false)?;
                stream.set_nodelay(true)?;
                stream.set_write_timeout(Some(write_timeout))
            }
            LinkStream::Unix(stream) => {
                stream.set_nonblocking(false)?;
                stream.set_write_timeout(Some(write_timeout))
            }
        }
    }

    pub(crate) fn shutdown(&self) {
        let _ = match self {
            LinkStream::Tcp(stream) => stream.shutdown(Shutdown::Both),
            LinkStream::Unix(stream) => stream.shutdown(Shutdown::Both),
        };
    }
}

impl Read for LinkStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            LinkStream::Tcp(stream) => stream.read(buf),
            LinkStream::Unix(stream) => stream.read(buf),
        }
    }
}

impl Write for LinkStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            LinkStream::Tcp(stream) => stream.write(buf),
            LinkStream::Unix(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
