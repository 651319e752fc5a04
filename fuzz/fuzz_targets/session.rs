//! A connection's bytes, served as the worker serves them: protocol, command,
//! engine and reply, in one process (no sockets). The input's first byte picks
//! the server, the protocol and whether it came as a datagram, the second
//! how the rest is cut into reads.
//! Checks: no panic, never more bytes used than given, no loop that makes no
//! progress.
#![no_main]

use std::sync::{Arc, OnceLock};

use kura_server::exec::Context;
use kura_server::session::{Session, Stop};
use kura_server::{ServerConfig, ServerHandle, TyrantDatabase};
use kura_store::{AckFence, DiskConfig, DiskStore, MemoryConfig, MemoryStore, SyncPolicy};
use libfuzzer_sys::fuzz_target;

struct Servers {
    memory: ServerHandle,
    table: ServerHandle,
    btree: ServerHandle,
    _dirs: Vec<tempfile::TempDir>,
}

fn config() -> ServerConfig {
    ServerConfig {
        port: 0,
        threads: 1,
        max_item_size: 64 * 1024,
        ..ServerConfig::default()
    }
}

fn disk(tyrant_db: TyrantDatabase, dirs: &mut Vec<tempfile::TempDir>) -> ServerHandle {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = DiskStore::open(DiskConfig {
        map_size: 1 << 30,
        sync: SyncPolicy::Batch,
        reserve_bytes: 0,
        ..DiskConfig::new(dir.path())
    })
    .expect("the disk engine opens");
    dirs.push(dir);
    let config = ServerConfig {
        engine: "disk".into(),
        tyrant_port: Some(0),
        tyrant_db,
        hs_write_port: Some(0),
        ..config()
    };
    kura_server::start(config, Arc::new(store), false).expect("server starts")
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let mut dirs = Vec::new();
        let memory = kura_server::start(
            config(),
            Arc::new(MemoryStore::new(MemoryConfig::default())),
            true,
        )
        .expect("server starts");
        let table = disk(TyrantDatabase::Table("t".into()), &mut dirs);
        let btree = disk(TyrantDatabase::Btree("b".into()), &mut dirs);
        Servers {
            memory,
            table,
            btree,
            _dirs: dirs,
        }
    })
}

/// Requests that reach outside the process (a backup into a directory, a
/// master to follow) are left out.
fn reaches_out(data: &[u8]) -> bool {
    const OUTSIDE: [&[u8]; 4] = [b"backup", b"replica", &[0xC8, 0x73], &[0xC8, 0x78]];
    OUTSIDE
        .iter()
        .any(|needle| data.windows(needle.len()).any(|w| w == *needle))
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 || reaches_out(data) {
        return;
    }
    let servers = servers();
    let (handle, mut session) = match data[0] % 8 {
        0 | 6 => (&servers.memory, Session::new(None)),
        1 | 7 => (&servers.table, Session::new(None)),
        2 => (&servers.table, Session::tyrant()),
        3 => (&servers.btree, Session::tyrant()),
        4 => (&servers.table, Session::handlersocket(true)),
        _ => (&servers.memory, Session::tyrant()),
    };
    let read_size = usize::from(data[1]).max(1);
    let shared = handle.shared();
    let ctx = Context {
        shared,
        counters: &shared.counters[0],
        conn_id: 1,
        fence: AckFence::default(),
        // As the UDP thread serves a datagram's requests.
        datagram: data[0] % 8 >= 6,
    };
    let mut input: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for read in data[2..].chunks(read_size) {
        input.extend_from_slice(read);
        let mut stalls = 0;
        loop {
            let mut budget = 20;
            let (used, stop) = session.serve(&input, &mut out, &ctx, &mut budget);
            assert!(used <= input.len(), "used {used} of {}", input.len());
            input.drain(..used);
            out.clear();
            let _ = ctx.fence.take();
            match stop {
                Stop::NeedInput => break,
                Stop::Budget | Stop::OutputFull => {
                    stalls = if used == 0 { stalls + 1 } else { 0 };
                    assert!(stalls < 100, "{stop:?} without progress");
                }
                _ => return,
            }
        }
    }
});
