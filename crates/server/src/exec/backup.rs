//! A hot backup asked for by a client (`backup` in memcached's text
//! protocol, `copy` in Tokyo Tyrant's): it runs on a thread of its own. The
//! connection that asked waits for its reply, and serves the requests it
//! sent after it only then; its worker goes on serving every other
//! connection meanwhile (a backup of a large database takes minutes).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use mio::Waker;

use super::Context;
use crate::Shared;

/// A backup to make, and how to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupRequest {
    to: PathBuf,
    /// An incremental backup after the one in this directory.
    since: Option<PathBuf>,
    answer: Answer,
}

/// The protocol the reply is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `OK <manifest as JSON>` or `SERVER_ERROR <reason>`.
    Text,
    /// Tokyo Tyrant's status byte: 0 done, 1 failed.
    TyrantStatus,
}

fn path(bytes: &[u8]) -> PathBuf {
    Path::new(OsStr::from_bytes(bytes)).to_path_buf()
}

impl BackupRequest {
    /// `backup <dir> [since <dir>]`; `None` when it was refused at once
    /// (the refusal is in `out`).
    pub fn text(
        to: &[u8],
        since: Option<&[u8]>,
        ctx: &Context<'_>,
        out: &mut Vec<u8>,
    ) -> Option<BackupRequest> {
        let (to, since) = (path(to), since.map(path));
        if !ctx.shared.config.dumping_enabled {
            out.extend_from_slice(b"SERVER_ERROR backups not allowed (-X)\r\n");
            return None;
        }
        // Not relative to wherever the server was started.
        if !to.is_absolute() || since.as_ref().is_some_and(|dir| !dir.is_absolute()) {
            out.extend_from_slice(b"CLIENT_ERROR backup directories must be absolute paths\r\n");
            return None;
        }
        Some(BackupRequest {
            to,
            since,
            answer: Answer::Text,
        })
    }

    /// `copy <path>`; `None` when it was refused at once (as the text
    /// protocol's `backup`: not with dumping off, `-X`, and only to an
    /// absolute path).
    pub fn tyrant(to: &[u8], ctx: &Context<'_>, out: &mut Vec<u8>) -> Option<BackupRequest> {
        let to = path(to);
        if !ctx.shared.config.dumping_enabled || !to.is_absolute() {
            kura_proto::tyrant::reply::status(out, false);
            return None;
        }
        Some(BackupRequest {
            to,
            since: None,
            answer: Answer::TyrantStatus,
        })
    }

    /// Makes the backup; its reply.
    pub fn run(&self, shared: &Shared) -> Vec<u8> {
        let result = shared.store.backup(&self.to, self.since.as_deref());
        let mut reply = Vec::new();
        match (self.answer, result) {
            (Answer::Text, Ok(manifest)) => {
                reply.extend_from_slice(b"OK ");
                reply.extend_from_slice(manifest.as_bytes());
                reply.extend_from_slice(b"\r\n");
            }
            (Answer::Text, Err(reason)) => {
                reply.extend_from_slice(b"SERVER_ERROR ");
                // One line, whatever the reason says.
                reply.extend_from_slice(reason.replace(['\r', '\n'], " ").as_bytes());
                reply.extend_from_slice(b"\r\n");
            }
            (Answer::TyrantStatus, result) => {
                kura_proto::tyrant::reply::status(&mut reply, result.is_ok())
            }
        }
        reply
    }
}

/// A backup running on its own thread.
pub struct BackupJob {
    reply: Arc<OnceLock<Vec<u8>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackupJob {
    /// Starts `request`; `waker` wakes the connection's worker once the
    /// reply is ready.
    pub fn start(request: BackupRequest, shared: Arc<Shared>, waker: Arc<Waker>) -> BackupJob {
        let reply = Arc::new(OnceLock::new());
        let ready = reply.clone();
        let answer = request.answer;
        let run = move || {
            // A backup that panicked still answers: the client must not
            // wait forever, nor the requests it sent after.
            let made =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| request.run(&shared)));
            let _ = ready.set(made.unwrap_or_else(|_| failed(answer)));
            let _ = waker.wake();
        };
        let spawned = std::thread::Builder::new()
            .name("kura-backup".into())
            .spawn(run);
        let thread = spawned
            .inspect_err(|error| {
                tracing::error!(%error, "cannot start a backup thread");
                let _ = reply.set(failed(answer));
            })
            .ok();
        BackupJob { reply, thread }
    }

    /// Waits for the backup to end (a stopping server lets it finish, as
    /// it did when the backup held its worker).
    pub fn finish(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// The reply, once the backup has ended.
    pub fn reply(&self) -> Option<&[u8]> {
        self.reply.get().map(Vec::as_slice)
    }
}

fn failed(answer: Answer) -> Vec<u8> {
    let mut reply = Vec::new();
    match answer {
        Answer::Text => reply.extend_from_slice(b"SERVER_ERROR backup failed\r\n"),
        Answer::TyrantStatus => kura_proto::tyrant::reply::status(&mut reply, false),
    }
    reply
}
