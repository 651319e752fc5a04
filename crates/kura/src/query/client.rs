//! Just enough of a Tokyo Tyrant client for `kura query`: `misc` calls
//! over one connection.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::bail;
use kura_proto::tyrant::{compose, Request};

/// The most bytes one reply may hold: what a query lists is kept in
/// memory to be printed.
const MAX_REPLY_BYTES: u64 = 1 << 30;

pub struct Tyrant {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    timeout: Option<Duration>,
}

impl Tyrant {
    pub fn connect(address: &str, timeout: Option<Duration>) -> anyhow::Result<Tyrant> {
        let stream = crate::command_client::connect(address)?;
        stream.set_read_timeout(timeout)?;
        Ok(Tyrant {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            timeout,
        })
    }

    /// A `misc` call: whether it succeeded, and its list.
    pub fn misc(&mut self, name: &[u8], args: &[Vec<u8>]) -> anyhow::Result<(bool, Vec<Vec<u8>>)> {
        let mut bytes = Vec::new();
        compose(
            &mut bytes,
            &Request::Misc {
                name,
                opts: 0,
                args: args.iter().map(Vec::as_slice).collect(),
            },
        );
        self.writer.write_all(&bytes)?;
        let code = self.byte()?;
        let count = self.u32()?;
        let mut items = Vec::new();
        let mut left = MAX_REPLY_BYTES;
        for _ in 0..count {
            let len = u64::from(self.u32()?);
            if len > left {
                bail!("the reply holds more than {MAX_REPLY_BYTES} bytes (not a kura server?)");
            }
            left -= len;
            // Grown as the bytes come, not to the length claimed.
            let mut item = Vec::new();
            (&mut self.reader)
                .take(len)
                .read_to_end(&mut item)
                .map_err(|e| self.failed(e))?;
            if item.len() as u64 != len {
                bail!("the server closed the connection in the middle of its reply");
            }
            items.push(item);
        }
        Ok((code == 0, items))
    }

    /// A read that failed, in words: a timeout is the server's silence.
    fn failed(&self, error: std::io::Error) -> anyhow::Error {
        match (error.kind(), self.timeout) {
            (std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut, Some(timeout)) => {
                anyhow::anyhow!(
                    "the server did not reply within {} s (--timeout)",
                    timeout.as_secs()
                )
            }
            (std::io::ErrorKind::UnexpectedEof, _) => {
                anyhow::anyhow!("the server closed the connection")
            }
            _ => error.into(),
        }
    }

    /// A `misc` call that must succeed.
    pub fn expect(&mut self, name: &[u8], args: &[Vec<u8>], failure: &str) -> anyhow::Result<()> {
        let (ok, _) = self.misc(name, args)?;
        if !ok {
            bail!("{failure}");
        }
        Ok(())
    }

    fn byte(&mut self) -> anyhow::Result<u8> {
        let mut byte = [0];
        self.reader
            .read_exact(&mut byte)
            .map_err(|e| self.failed(e))?;
        Ok(byte[0])
    }

    fn u32(&mut self) -> anyhow::Result<u32> {
        let mut bytes = [0; 4];
        self.reader
            .read_exact(&mut bytes)
            .map_err(|e| self.failed(e))?;
        Ok(u32::from_be_bytes(bytes))
    }
}
