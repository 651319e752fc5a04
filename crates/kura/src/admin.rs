//! `kura admin`: a running server's replication, through its memcached
//! port (`replicas`, `replicaof`).

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use crate::command_client::CommandClient;
use crate::output::outln;
use crate::Failure;

/// The most lines a reply may have: one per attached replica or peer.
const MAX_LINES: usize = 100_000;

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The running server (its memcached port).
    #[arg(long, global = true, default_value = "127.0.0.1:11211")]
    server: String,
    /// Seconds to wait for the whole reply (0: no limit).
    #[arg(long, global = true, default_value_t = 30)]
    timeout: u64,
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
    Promote {
        /// Even if a snapshot from the master was cut off: the server then
        /// holds part of the master's items, and gives its replicas
        /// snapshots only.
        #[arg(long)]
        force: bool,
    },
    /// Follow a master from now on (the server becomes a read-only replica).
    ReplicaOf {
        /// The master's memcached port, HOST:PORT.
        master: String,
    },
}

pub fn run(args: AdminArgs) -> Result<(), Failure> {
    let line = match &args.command {
        AdminCommand::Replicas => "replicas".to_string(),
        AdminCommand::Promote { force: false } => "replicaof no one".to_string(),
        AdminCommand::Promote { force: true } => "replicaof no one force".to_string(),
        AdminCommand::ReplicaOf { master } => {
            // One word each: the command goes on one line of words.
            let words = |text: &str| {
                !text.is_empty() && !text.contains(|c: char| c.is_whitespace() || c.is_control())
            };
            let split = master
                .rsplit_once(':')
                .filter(|(host, port)| words(host) && words(port));
            let Some((host, port)) = split else {
                return Err(Failure::Usage(
                    "admin replica-of: HOST:PORT, the master's memcached port".to_string(),
                ));
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            format!("replicaof {host} {port}")
        }
    };
    let timeout = Duration::from_secs(args.timeout);
    // A timeout past what a clock can count is no deadline.
    let deadline = Instant::now().checked_add(timeout);
    let mut client = CommandClient::send(&args.server, &line, timeout)?;
    for _ in 0..MAX_LINES {
        let reply = client.line()?;
        match reply.as_str() {
            "END" => return Ok(()),
            "OK" => {
                outln!("OK")?;
                return Ok(());
            }
            _ if reply.starts_with("SERVER_ERROR")
                || reply.starts_with("CLIENT_ERROR")
                || reply == "ERROR" =>
            {
                return Err(anyhow::anyhow!("{}: {reply}", args.server).into());
            }
            _ if ["MASTER ", "PEER ", "REPLICA "]
                .iter()
                .any(|kind| reply.starts_with(kind)) =>
            {
                outln!("{reply}")?
            }
            _ => {
                return Err(anyhow::anyhow!(
                    "{} answered {:?} (not a kura server?)",
                    args.server,
                    reply.chars().take(80).collect::<String>()
                )
                .into())
            }
        }
        if !timeout.is_zero() && deadline.is_some_and(|deadline| Instant::now() > deadline) {
            return Err(anyhow::anyhow!(
                "{} did not finish its reply within {} s",
                args.server,
                timeout.as_secs()
            )
            .into());
        }
    }
    Err(anyhow::anyhow!("{} sent more than {MAX_LINES} lines", args.server).into())
}
