//! `kura admin`: a running server's replication, through its memcached
//! port (`replicas`, `replicaof`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::Failure;

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The running server (its memcached port).
    #[arg(long, global = true, default_value = "127.0.0.1:11211")]
    server: String,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand, Debug)]
enum AdminCommand {
    /// The server's master link and attached replicas: LSN, lag in entries
    /// and milliseconds, bytes behind, state.
    Replicas,
    /// Stop following a master and take writes (a replica becomes a master;
    /// its log goes on where the old master's stopped).
    Promote,
    /// Follow a master from now on (the server becomes a read-only replica).
    ReplicaOf {
        /// The master's memcached port, HOST:PORT.
        master: String,
    },
}

pub fn run(args: AdminArgs) -> Result<(), Failure> {
    let line = match &args.command {
        AdminCommand::Replicas => "replicas".to_string(),
        AdminCommand::Promote => "replicaof no one".to_string(),
        AdminCommand::ReplicaOf { master } => {
            let Some((host, port)) = master.rsplit_once(':') else {
                return Err(Failure::Usage(
                    "admin replica-of: HOST:PORT, the master's memcached port".to_string(),
                ));
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            format!("replicaof {host} {port}")
        }
    };
    let stream = TcpStream::connect(&args.server)
        .with_context(|| format!("connecting to {}", args.server))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .context("setting a timeout")?;
    let mut writer = stream.try_clone().context("cloning the socket")?;
    writer
        .write_all(format!("{line}\r\n").as_bytes())
        .with_context(|| format!("sending `{line}`"))?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut reply = String::new();
        if reader.read_line(&mut reply).context("reading the reply")? == 0 {
            return Err(anyhow::anyhow!("the server closed the connection").into());
        }
        let reply = reply.trim_end();
        match reply {
            "END" | "OK" => {
                if reply == "OK" {
                    println!("OK");
                }
                return Ok(());
            }
            _ if reply.starts_with("SERVER_ERROR")
                || reply.starts_with("CLIENT_ERROR")
                || reply == "ERROR" =>
            {
                return Err(anyhow::anyhow!("{}: {reply}", args.server).into());
            }
            _ => println!("{reply}"),
        }
    }
}
