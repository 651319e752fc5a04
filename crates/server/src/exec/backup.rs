//! A hot backup asked for by a client (`backup` in memcached's text
//! protocol, `copy` in Tokyo Tyrant's): it runs on a thread of its own. The
//! connection that asked waits for its reply, and serves the requests it
//! sent after it only then; its worker goes on serving every other
//! connection meanwhile (a backup of a large database takes minutes).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use mio::Waker;
use parking_lot::Mutex;

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
    fn run(&self, shared: &Shared) -> Vec<u8> {
        match (
            shared.store.backup(&self.to, self.since.as_deref()),
            self.answer,
        ) {
            (Ok(manifest), Answer::Text) => format!("OK {manifest}\r\n").into_bytes(),
            (Ok(_), Answer::TyrantStatus) => {
                let mut reply = Vec::new();
                kura_proto::tyrant::reply::status(&mut reply, true);
                reply
            }
            // One line, whatever the reason says.
            (Err(reason), answer) => refusal(answer, &reason.replace(['\r', '\n'], " ")),
        }
    }
}

/// The backup under way, if any. One at a time: each holds an LMDB read
/// transaction and reads the database at disk speed, so a second would
/// only slow both, and many would take every reader slot. A stopping
/// server waits for it, so that its directory is left whole and the
/// engine closes cleanly after it.
#[derive(Debug, Default)]
pub struct Backups {
    under_way: Mutex<Option<UnderWay>>,
}

#[derive(Debug)]
struct UnderWay {
    thread: JoinHandle<()>,
    /// Its reply, once made: a client that got it may ask for the next
    /// backup while the thread is still ending.
    reply: Arc<OnceLock<Vec<u8>>>,
}

impl Backups {
    /// Starts `request` on a thread of its own; `waker` wakes the
    /// connection's worker once the reply is ready. While another backup
    /// runs, the reply is a refusal, at once.
    pub fn start(
        &self,
        request: BackupRequest,
        shared: Arc<Shared>,
        waker: Arc<Waker>,
    ) -> BackupJob {
        let reply = Arc::new(OnceLock::new());
        let answer = request.answer;
        let mut under_way = self.under_way.lock();
        if under_way
            .as_ref()
            .is_some_and(|backup| backup.reply.get().is_none())
        {
            let _ = reply.set(refusal(answer, "another backup is under way"));
            return BackupJob { reply };
        }
        if let Some(ended) = under_way.take() {
            let _ = ended.thread.join();
        }
        let ready = reply.clone();
        let run = move || {
            // A backup that panicked still answers (where a panic unwinds:
            // a release build aborts), so that neither the client nor the
            // requests it sent after wait forever.
            let made =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| request.run(&shared)));
            let _ = ready.set(made.unwrap_or_else(|_| refusal(answer, "backup failed")));
            let _ = waker.wake();
        };
        let spawned = std::thread::Builder::new()
            .name("kura-backup".into())
            .spawn(run);
        match spawned {
            Ok(thread) => {
                *under_way = Some(UnderWay {
                    thread,
                    reply: reply.clone(),
                })
            }
            Err(error) => {
                tracing::error!(%error, "cannot start a backup thread");
                let _ = reply.set(refusal(answer, "cannot start a backup thread"));
            }
        }
        BackupJob { reply }
    }

    /// Waits for the backup under way to end.
    pub fn wait(&self) {
        if let Some(backup) = self.under_way.lock().take() {
            let _ = backup.thread.join();
        }
    }
}

/// A connection's backup: its reply, once there is one.
pub struct BackupJob {
    reply: Arc<OnceLock<Vec<u8>>>,
}

impl BackupJob {
    /// The reply, once the backup has ended.
    pub fn reply(&self) -> Option<&[u8]> {
        self.reply.get().map(Vec::as_slice)
    }

    /// Waits for the backup to end (a stopping worker, before it answers
    /// and closes the connection).
    pub fn wait(&self) {
        while self.reply.get().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

fn refusal(answer: Answer, reason: &str) -> Vec<u8> {
    let mut reply = Vec::new();
    match answer {
        Answer::Text => reply.extend_from_slice(format!("SERVER_ERROR {reason}\r\n").as_bytes()),
        Answer::TyrantStatus => kura_proto::tyrant::reply::status(&mut reply, false),
    }
    reply
}
