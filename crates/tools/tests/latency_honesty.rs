//! Coordinated omission: against a server that stalls every N-th response,
//! open-loop percentiles (measured from the intended send time) must show
//! the stall, while closed-loop ones, which stop sending during it, may not.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kura_proto::client::{ClientProtocol, Op};
use kura_tools::bench::dist::{KeyPattern, SizeDist};
use kura_tools::bench::engine::{self, Progress, Workload};
use kura_tools::bench::summary::run_report;

/// Long enough that a loaded machine's own scheduling delays (tens of
/// milliseconds on two busy cores) stay well below half of it.
const STALL: Duration = Duration::from_millis(300);
const EVERY: u64 = 1000;

/// A text-protocol server that answers every get with END, and sleeps
/// before every EVERY-th answer.
fn stalling_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answered = answered.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if answered.fetch_add(1, Ordering::Relaxed) % EVERY == EVERY - 1 {
                        std::thread::sleep(STALL);
                    }
                    if writer.write_all(b"END\r\n").is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

fn workload(server: SocketAddr, call_rate: f64, calls: u64) -> Workload {
    Workload {
        servers: vec![server],
        protocol: ClientProtocol::Text,
        threads: 1,
        clients: 1,
        conn_rate: 0.0,
        calls_per_client: calls,
        call_rate,
        pipeline: 1,
        duration: None,
        mix: vec![(Op::Get, 1)],
        multiget: 1,
        key_count: 100,
        key_pattern: KeyPattern::Uniform,
        key_prefix: "k:".into(),
        sizes: SizeDist::Fixed(10),
        max_value: 100,
        expiry: 0,
        verify: false,
        timeout: Duration::from_secs(5),
        linger: None,
        seed: 7,
        interval: Duration::from_secs(1),
        tls: None,
    }
}

fn p99_and_max_ms(workload: &Workload) -> (f64, f64) {
    let measured = engine::run(workload, &Arc::new(Progress::default())).unwrap();
    assert_eq!(measured.error_total(), 0, "{:?}", measured.errors);
    let report = run_report("t", workload, &measured);
    let all = report.ops.iter().find(|o| o.op == "all").unwrap();
    assert_eq!(all.count, workload.calls_per_client);
    (all.p99_us / 1000.0, all.max_us / 1000.0)
}

#[test]
fn open_loop_shows_the_stall_that_closed_loop_hides() {
    let stall_ms = STALL.as_secs_f64() * 1000.0;
    let closed = p99_and_max_ms(&workload(stalling_server(), 0.0, 3000));
    let open = p99_and_max_ms(&workload(stalling_server(), 2000.0, 3000));
    eprintln!(
        "closed loop p99 {:.2} ms max {:.2} ms; open loop p99 {:.2} ms max {:.2} ms",
        closed.0, closed.1, open.0, open.1
    );
    // Both see the stall itself in the maximum.
    assert!(closed.1 >= stall_ms * 0.9 && open.1 >= stall_ms * 0.9);
    // Closed loop: 3 stalled requests of 3000 stay below p99.
    assert!(closed.0 < stall_ms / 2.0, "closed-loop p99 {} ms", closed.0);
    // Open loop: the ~100 requests due during each stall waited too.
    assert!(
        open.0 >= stall_ms / 2.0,
        "open-loop p99 {} ms hides the stall",
        open.0
    );
}

/// A server whose replies cannot be read: each client that meets one is
/// closed with a protocol error, and a closed-loop run of a fixed number of
/// calls ends (it waited for the unanswered requests for good).
#[test]
fn a_reply_that_cannot_be_read_closes_its_client_and_the_run_ends() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if writer.write_all(b"NOT A REPLY\r\n").is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    let workload = Workload {
        clients: 3,
        ..workload(addr, 0.0, 10)
    };
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let measured = engine::run(&workload, &Arc::new(Progress::default())).unwrap();
        let _ = done.send(measured);
    });
    let measured = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("the run ended");
    assert_eq!(
        measured.errors.get("protocol"),
        Some(&3),
        "{:?}",
        measured.errors
    );
    assert_eq!(measured.responses, 0);
}
