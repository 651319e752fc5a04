//! Just enough of a Tokyo Tyrant client for `kura query`: `misc` calls
//! over one connection.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context};
use kura_proto::tyrant::{compose, Request};

pub struct Tyrant {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Tyrant {
    pub fn connect(address: &str, timeout: Option<Duration>) -> anyhow::Result<Tyrant> {
        let stream = TcpStream::connect(address)?;
        stream.set_read_timeout(timeout)?;
        Ok(Tyrant {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
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
        let code = self.byte().context("the server closed the connection")?;
        let count = self.u32()?;
        let mut items = Vec::new();
        for _ in 0..count {
            let len = self.u32()? as usize;
            let mut item = vec![0; len];
            self.reader.read_exact(&mut item)?;
            items.push(item);
        }
        Ok((code == 0, items))
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
        self.reader.read_exact(&mut byte)?;
        Ok(byte[0])
    }

    fn u32(&mut self) -> anyhow::Result<u32> {
        let mut bytes = [0; 4];
        self.reader.read_exact(&mut bytes)?;
        Ok(u32::from_be_bytes(bytes))
    }
}
