//! A memcached text-protocol client for the process tests: one request at
//! a time, replies read line by line.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub fn addr(port: u16) -> SocketAddr {
    format!("127.0.0.1:{port}").parse().unwrap()
}

/// A memcached text connection.
pub struct Client {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(addr(port)).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a reply line");
        assert!(line.ends_with("\r\n"), "a cut reply: {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    /// Sends `request` (with its data, CRLFs included) and returns the
    /// first reply line.
    pub fn call(&mut self, request: &[u8]) -> String {
        self.writer.write_all(request).expect("sends");
        self.line()
    }

    /// Lines up to `END`.
    pub fn lines(&mut self, request: &str) -> Vec<String> {
        self.writer.write_all(request.as_bytes()).expect("sends");
        let mut lines = Vec::new();
        loop {
            let line = self.line();
            if line == "END" {
                return lines;
            }
            lines.push(line);
        }
    }

    pub fn stats(&mut self, group: &str) -> BTreeMap<String, String> {
        self.lines(&format!("stats {group}\r\n"))
            .into_iter()
            .filter_map(|line| {
                let mut words = line.splitn(3, ' ');
                let (_, name, value) = (words.next()?, words.next()?, words.next()?);
                Some((name.to_string(), value.to_string()))
            })
            .collect()
    }

    /// `gets key`: flags, value and CAS.
    pub fn gets(&mut self, key: &str) -> Option<(u32, Vec<u8>, u64)> {
        let head = self.call(format!("gets {key}\r\n").as_bytes());
        if head == "END" {
            return None;
        }
        let words: Vec<&str> = head.split(' ').collect();
        assert_eq!(words[0], "VALUE", "{head}");
        let flags = words[2].parse().unwrap();
        let len: usize = words[3].parse().unwrap();
        let cas = words[4].parse().unwrap();
        let mut data = vec![0; len + 2];
        self.reader.read_exact(&mut data).unwrap();
        data.truncate(len);
        assert_eq!(self.line(), "END");
        Some((flags, data, cas))
    }

    /// Every item as `lru_crawler metadump all` lists it: key → expiry,
    /// CAS and size.
    pub fn items(&mut self) -> BTreeMap<String, String> {
        self.writer
            .write_all(b"lru_crawler metadump all\r\n")
            .expect("sends");
        // memcached's crawler ends an item's line in a newline alone.
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("a dump line");
            match line.strip_suffix('\n') {
                Some("END\r") => break,
                Some(item) if item.starts_with("key=") => lines.push(item.to_string()),
                _ => panic!("a cut dump line: {line:?}"),
            }
        }
        lines
            .into_iter()
            .map(|line| {
                let fields: BTreeMap<&str, &str> = line
                    .split(' ')
                    .filter_map(|field| field.split_once('='))
                    .collect();
                (
                    fields["key"].to_string(),
                    format!(
                        "exp={} cas={} size={}",
                        fields["exp"], fields["cas"], fields["size"]
                    ),
                )
            })
            .collect()
    }
}
