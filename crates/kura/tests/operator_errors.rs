//! The operator's commands on bad input: a server that does not answer a
//! backup, a damaged log, a backup handed to a command that would change
//! it, manifests that are not what they claim, a command line missing an
//! argument. Each gets a clear one-line error and a non-zero exit, never a
//! hang, a crash or silent wrong output.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod support;

use support::{free_port, kura_bin, serve_disk, Running};

fn run(args: &[&str]) -> Output {
    Command::new(kura_bin()).args(args).output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "kura {args:?}: {}",
        stderr(&output)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Fails with exit 1 and a message containing `expected`.
fn fails(args: &[&str], expected: &str) -> Output {
    let output = run(args);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "kura {args:?}: {message}");
    assert!(message.contains(expected), "kura {args:?}: {message}");
    output
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A server on the disk engine in `dir`, and its address.
fn start(dir: &Path) -> (Running, String) {
    let port = free_port();
    let server = Running(serve_disk(dir, port, &[]));
    (server, format!("127.0.0.1:{port}"))
}

/// Sets `key-N` to a 100-byte value for every N in `numbers`.
fn set_keys(address: &str, numbers: std::ops::Range<u32>) {
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    for n in numbers {
        let value = format!("{n:0100}");
        write!(stream, "set key-{n} 0 0 100\r\n{value}\r\n").unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n");
    }
}

/// A server's directory under `work` with ten keys, backed up in full to
/// `work/<name>` (the server stopped).
fn ten_keys_backed_up(work: &Path, name: &str) -> std::path::PathBuf {
    let (mut server, address) = start(&work.join("data"));
    set_keys(&address, 0..10);
    let backup = work.join(name);
    ok(&["backup", "--server", &address, "--to", path(&backup)]);
    server.kill();
    backup
}

/// Flips one byte in the middle of `file`.
fn damage_middle(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

fn segments_with_entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    found.sort();
    found
}

/// Every file of `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_backup_from_a_server_that_never_replies_gives_up_after_its_timeout() {
    // Accepts and reads, never answers.
    gives_up_after_its_timeout(&fake_server(b"", false));
}

/// `kura admin` and `kura backup` against `address` end within their
/// `--timeout 1`, saying so.
fn gives_up_after_its_timeout(address: &str) {
    let work = tempfile::tempdir().unwrap();
    let to = work.path().join("backup");
    for args in [
        &["admin", "replicas", "--server", address, "--timeout", "1"][..],
        &[
            "backup",
            "--server",
            address,
            "--to",
            path(&to),
            "--timeout",
            "1",
        ],
    ] {
        let started = Instant::now();
        fails(args, "did not reply within 1 s");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}");
    }
}

/// A backup into the server's own data directory would be taken for its
/// files: the server refuses it, and the server goes on serving.
#[test]
fn a_backup_into_the_servers_data_directory_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let (_server, address) = start(&data);
    set_keys(&address, 0..3);
    let inside = data.join("journal-00000000000000ff.log");
    fails(
        &["backup", "--server", &address, "--to", path(&inside)],
        "inside this server's data directory",
    );
    assert!(!inside.exists());
    ok(&[
        "backup",
        "--server",
        &address,
        "--to",
        path(&work.path().join("beside")),
    ]);
    set_keys(&address, 3..4);
}

#[test]
fn a_backup_from_a_server_that_sends_an_endless_line_stops_at_a_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let chunk = [b'x'; 64 * 1024];
        // Until the client hangs up: far more than any manifest.
        while stream.write_all(&chunk).is_ok() {}
    });
    let work = tempfile::tempdir().unwrap();
    let to = work.path().join("backup");
    fails(
        &["backup", "--server", &address, "--to", path(&to)],
        "sent no whole reply line",
    );
}

/// A server with steady writes starts a log segment every few seconds, and
/// an incremental backup of a day lists every one: its manifest, sent back
/// in the reply line, is far longer than other replies, and is read whole.
#[test]
fn a_backup_whose_manifest_lists_ten_thousand_segments_is_read_whole() {
    use kura_store::disk::history::backup::{self, FileSum};
    let work = tempfile::tempdir().unwrap();
    let real = ten_keys_backed_up(work.path(), "real");
    let mut manifest = backup::load(&real).unwrap();
    let listed = manifest.files.len();
    manifest.files.extend((0..10_000u64).map(|n| FileSum {
        name: format!("journal-{:016x}.log", 1_000_000 + n),
        bytes: 4096,
        sha256: "0".repeat(64),
    }));
    let reply = format!("OK {}\r\n", serde_json::to_string(&manifest).unwrap());
    assert!(
        reply.len() > 1 << 20,
        "longer than the other replies' bound"
    );

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut command = String::new();
        BufReader::new(stream.try_clone().unwrap())
            .read_line(&mut command)
            .unwrap();
        stream.write_all(reply.as_bytes()).unwrap();
    });
    let to = work.path().join("backup");
    let printed = ok(&["backup", "--server", &fake, "--to", path(&to)]);
    assert!(
        printed.contains(&format!("{} files", listed + 10_000)),
        "{printed}"
    );
}

/// A restore stopped before it ends leaves a directory that holds the log
/// past the point asked for: serving it would replay what the restore was
/// meant to leave out, so the server refuses it.
#[test]
fn a_restore_killed_before_it_ends_leaves_a_directory_no_server_takes() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let backup = work.path().join("backup");
    let (mut server, address) = start(&data);
    // 64 MiB of values in the log: the restore copies them, then replays.
    let stream = TcpStream::connect(&address).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    let value = vec![b'v'; 256 * 1024];
    for n in 0..256 {
        write!(stream, "set big-{n} 0 0 {}\r\n", value.len()).unwrap();
        stream.write_all(&value).unwrap();
        stream.write_all(b"\r\n").unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n");
    }
    ok(&["backup", "--server", &address, "--to", path(&backup)]);
    server.kill();

    let target = work.path().join("restored");
    let mut restore = Command::new(kura_bin())
        .args(["restore", "--from", path(&backup), "--to", path(&target)])
        .spawn()
        .unwrap();
    // Killed once it has begun to copy.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !target.join("data.mdb").exists() {
        assert!(Instant::now() < deadline, "the restore never began to copy");
        assert!(
            restore.try_wait().unwrap().is_none(),
            "the restore ended first"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    restore.kill().unwrap();
    restore.wait().unwrap();

    let port = free_port().to_string();
    let mut serve = Command::new(kura_bin())
        .args(["serve", "--dir", path(&target), "-p", &port])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            serve.kill().unwrap();
            panic!("a server started on the directory of an unfinished restore");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = serve.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("holds a restore that did not finish"),
        "{message}"
    );
    fails(
        &["restore", "--from", path(&backup), "--to", path(&target)],
        "is not empty",
    );
}

#[test]
fn a_table_check_refuses_a_backup_and_a_missing_directory_and_changes_neither() {
    let work = tempfile::tempdir().unwrap();
    let backup = ten_keys_backed_up(work.path(), "backup");

    let before = contents(&backup);
    fails(
        &["table", "check", "--dir", path(&backup), "--table", "t"],
        "a backup, which a check would change",
    );
    assert!(contents(&backup) == before, "the check changed the backup");
    ok(&["backup", "verify", path(&backup)]);

    let missing = work.path().join("missing");
    fails(
        &["table", "check", "--dir", path(&missing), "--table", "t"],
        "not a kura data directory",
    );
    assert!(!missing.exists(), "the check created {}", missing.display());

    // A data directory, but no such table: nothing was checked, and the
    // exit says so rather than "every index agrees".
    fails(
        &[
            "table",
            "check",
            "--dir",
            path(&work.path().join("data")),
            "--table",
            "t",
        ],
        "holds no index of table \"t\"",
    );
}

/// A data directory whose log holds entries 1 to 40, its server killed.
fn forty_entries_then_a_kill() -> (tempfile::TempDir, std::path::PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let (mut server, address) = start(&data);
    set_keys(&address, 0..40);
    server.kill();
    (work, data)
}

#[test]
fn a_log_dump_names_the_entries_a_damaged_segment_lost() {
    let (_work, data) = forty_entries_then_a_kill();
    // A restart appends to a new segment: entries 41 to 50 follow the
    // damaged one.
    let (mut server, address) = start(&data);
    set_keys(&address, 40..50);
    server.kill();
    let segments = segments_with_entries(&data);
    assert!(segments.len() >= 2, "{segments:?}");
    damage_middle(&segments[0]);

    let dump = fails(&["log", "dump", "--dir", path(&data)], "lacks entries");
    let printed: Vec<u64> = String::from_utf8(dump.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| line.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(printed.first(), Some(&1));
    assert_eq!(printed.last(), Some(&50));
    let gap_start = printed.windows(2).find(|w| w[1] != w[0] + 1).unwrap()[0] + 1;
    let message = stderr(&dump);
    assert!(
        message.contains(&format!("lacks entries {gap_start}-")),
        "{message}"
    );
    // A range that ends within the gap lacks the part of it asked for.
    let until = gap_start.to_string();
    let dump = fails(
        &["log", "dump", "--dir", path(&data), "--until", &until],
        "lacks entries",
    );
    let message = stderr(&dump);
    assert!(
        message.contains(&format!("lacks entries {gap_start}")),
        "{message}"
    );
    // Up to a time past the whole log, the gap is within the range.
    let until_time = [
        "log",
        "dump",
        "--dir",
        path(&data),
        "--until",
        "2100-01-01T00:00:00Z",
    ];
    fails(&until_time, "lacks entries");
    // Up to the time of the entry before the gap: the lost entries' times
    // are not known, and may be within the range too.
    let text = String::from_utf8(dump.stdout.clone()).unwrap();
    let before_gap = (text.lines())
        .find(|line| line.starts_with(&format!("{}\t", gap_start - 1)))
        .and_then(|line| line.split('\t').nth(1))
        .unwrap()
        .to_string();
    let until_before_gap = ["log", "dump", "--dir", path(&data), "--until", &before_gap];
    fails(&until_before_gap, &format!("lacks entries {gap_start}-"));
    // The entries after the gap alone: nothing is missing there.
    ok(&["log", "dump", "--dir", path(&data), "--from", "45"]);
    let stats = ok(&["log", "stats", "--dir", path(&data)]);
    assert!(stats.contains(&format!("gaps\t{gap_start}-")), "{stats}");
}

/// Damage in the newest segment: no later entry shows a gap, so the
/// bytes the read could not take are named instead.
#[test]
fn damage_at_the_end_of_the_log_is_named_as_unread_bytes() {
    let (_work, data) = forty_entries_then_a_kill();
    let mut segments = segments_with_entries(&data);
    assert_eq!(segments.len(), 1, "every entry is in the damaged segment");
    damage_middle(&segments.pop().unwrap());

    let dump = run(&["log", "dump", "--dir", path(&data)]);
    assert!(dump.status.success(), "{}", stderr(&dump));
    // Whole records after the damage tell it from a torn append.
    assert!(
        stderr(&dump).contains("are no whole record (damage: "),
        "{}",
        stderr(&dump)
    );
    // A dump that ends before the damage reads no further than its end.
    let early = run(&["log", "dump", "--dir", path(&data), "--until", "2"]);
    assert!(early.status.success(), "{}", stderr(&early));
    assert_eq!(stderr(&early), "");
    assert_eq!(String::from_utf8_lossy(&early.stdout).lines().count(), 2);
    let stats = ok(&["log", "stats", "--dir", path(&data)]);
    assert!(stats.contains("\nunread\t"), "{stats}");
}

/// A segment cut inside its last record (a crash in an append) is named a
/// torn append, not damage: no whole record follows the cut.
#[test]
fn a_segment_cut_inside_its_last_record_is_named_a_torn_append() {
    let (_work, data) = forty_entries_then_a_kill();
    let segment = segments_with_entries(&data).pop().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(file.metadata().unwrap().len() - 3).unwrap();

    let stats = run(&["log", "stats", "--dir", path(&data)]);
    assert!(stats.status.success(), "{}", stderr(&stats));
    assert!(
        stderr(&stats).contains("are no whole record (a torn append, or damage)"),
        "{}",
        stderr(&stats)
    );
}

/// What a command prints goes to a full disk (one line of error, not a
/// panic) or to a reader that went away (nothing to say).
/// Runs kura with `args`, its standard output going to `to`.
fn run_into(args: &[&str], to: impl Into<std::process::Stdio>) -> Output {
    Command::new(kura_bin())
        .args(args)
        .stdout(to)
        .output()
        .unwrap()
}

/// Fails with exit 1, naming standard output: it went to a full disk.
fn fails_on_a_full_disk(args: &[&str]) {
    let full = run_into(args, std::fs::File::create("/dev/full").unwrap());
    let message = stderr(&full);
    assert_eq!(full.status.code(), Some(1), "kura {args:?}: {message}");
    assert!(message.contains("writing to standard output"), "{message}");
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_crash() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let (mut server, address) = start(&data);
    set_keys(&address, 0..5);
    server.kill();
    let args = ["log", "stats", "--dir", path(&data)];
    fails_on_a_full_disk(&args);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let gone = run_into(&args, writer);
    assert_eq!(gone.status.code(), Some(0), "{}", stderr(&gone));
    // The load generator's summary alike.
    let (_server, address) = start(&work.path().join("bench"));
    fails_on_a_full_disk(&["bench", "--server", &address, "--duration", "1s", "--quiet"]);
}

#[test]
fn a_damaged_backup_log_shows_the_entries_its_manifest_promises_and_lacks() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let full = work.path().join("full");
    let incremental = work.path().join("incremental");
    let (_server, address) = start(&data);
    set_keys(&address, 0..5);
    ok(&["backup", "--server", &address, "--to", path(&full)]);
    set_keys(&address, 5..45);
    ok(&[
        "backup",
        "--server",
        &address,
        "--to",
        path(&incremental),
        "--incremental",
        "--since",
        path(&full),
    ]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(incremental.join("manifest.json")).unwrap()).unwrap();
    let last = manifest["last"]["lsn"].as_u64().unwrap();
    let segments = segments_with_entries(&incremental);
    damage_middle(segments.last().unwrap());

    fails(
        &["log", "dump", "--dir", path(&incremental)],
        &format!("-{last} (a segment is damaged"),
    );
    let stats = ok(&["log", "stats", "--dir", path(&incremental)]);
    assert!(stats.contains(&format!("-{last}")), "{stats}");
    fails(&["backup", "verify", path(&incremental)], "checksum");
    // Only what was asked for is missing: from the last entry on, that
    // one; past it, nothing.
    let (at_last, past) = (last.to_string(), (last + 1).to_string());
    fails(
        &[
            "log",
            "dump",
            "--dir",
            path(&incremental),
            "--from",
            &at_last,
        ],
        &format!("lacks entries {last} ("),
    );
    let dump = ok(&["log", "dump", "--dir", path(&incremental), "--from", &past]);
    assert!(dump.is_empty(), "{dump}");
}

#[test]
fn a_manifest_that_is_no_regular_file_or_whose_lsns_cannot_be_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let backup = work.path().join("backup");
    let (mut server, address) = start(&data);
    set_keys(&address, 0..3);
    ok(&["backup", "--server", &address, "--to", path(&backup)]);
    server.kill();
    let manifest_path = backup.join("manifest.json");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap();

    let mut impossible: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    impossible["last"]["lsn"] = u64::MAX.into();
    std::fs::write(&manifest_path, impossible.to_string()).unwrap();
    fails(&["backup", "verify", path(&backup)], "do not fit together");

    // A FIFO would block the read for ever; a device would never end.
    std::fs::remove_file(&manifest_path).unwrap();
    let made = Command::new("mkfifo").arg(&manifest_path).status().unwrap();
    assert!(made.success());
    let started = Instant::now();
    fails(&["backup", "verify", path(&backup)], "not a regular file");
    assert!(started.elapsed() < Duration::from_secs(10));
    std::fs::remove_file(&manifest_path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &manifest_path).unwrap();
    fails(&["backup", "verify", path(&backup)], "not a regular file");
}

#[test]
fn a_log_record_claiming_gigabytes_ends_the_segment_without_allocating_them() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    std::fs::write(dir.join("data.mdb"), b"").unwrap();
    // A sparse segment of 5 GiB whose first frame claims 4 GiB - 16.
    let segment = std::fs::File::create(dir.join("journal-0000000000000001.log")).unwrap();
    let mut frame = (u32::MAX - 15).to_le_bytes().to_vec();
    frame.extend_from_slice(&[0; 4]);
    std::os::unix::fs::FileExt::write_all_at(&segment, &frame, 0).unwrap();
    segment.set_len(5 << 30).unwrap();
    // Under 1.5 GB of address space: a read that allocated what the frame
    // claims would abort.
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1500000 && exec {} log stats --dir {}",
            kura_bin(),
            path(dir)
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let stats = String::from_utf8(output.stdout).unwrap();
    assert!(stats.contains("entries\t0"), "{stats}");
}

#[test]
fn a_command_line_missing_an_argument_names_it() {
    for (args, expected) in [
        (&["restore", "--from", "x"][..], "--to"),
        (&["backup", "verify"], "<DIR>"),
        (&["table", "check", "--dir", "x"], "--table"),
        (&["log"], "`kura log --help`"),
        (
            &["log", "dump", "--dir", ".", "--from", "9", "--until", "8"],
            "after --until",
        ),
        // One word each: a line break would send a second command.
        (
            &[
                "admin",
                "replica-of",
                "h:1
flush_all",
            ],
            "HOST:PORT",
        ),
        (
            &["bench", "--multiget", "70000", "--num-calls", "1"],
            "65535",
        ),
        // Numbers that overflowed, allocated terabytes or hung a run.
        (
            &[
                "bench",
                "--max-value",
                "18446744073709551615",
                "--num-calls",
                "1",
            ],
            "--max-value",
        ),
        (
            &["bench", "--num-conns", "1000000000000", "--num-calls", "1"],
            "--num-conns",
        ),
        (
            &["bench", "--pipeline", "10000000", "--num-calls", "1"],
            "--pipeline",
        ),
        (
            &["bench", "--threads", "100000", "--num-calls", "1"],
            "--threads",
        ),
        (
            &["bench", "--threads", "0", "--num-calls", "1"],
            "--threads",
        ),
        (
            &["bench", "--html", "/", "--num-calls", "1"],
            "it is a folder",
        ),
        (&["backup", "--to", "a\nb"], "without whitespace"),
        (
            &["bench", "--call-rate", "NaN", "--num-calls", "1"],
            "--call-rate",
        ),
        (
            &["bench", "--timeout", "NaN", "--num-calls", "1"],
            "--timeout",
        ),
        (
            &[
                "bench",
                "--ratio",
                "set:get=3000000000:3000000000",
                "--num-calls",
                "1",
            ],
            "sum past",
        ),
        // Refused before the run, not ignored or found out after it.
        (
            &["bench", "--param", "keys=5", "--num-calls", "1"],
            "--scenario",
        ),
        (
            &[
                "bench",
                "--json",
                "/no-such-kura-folder/run.json",
                "--num-calls",
                "1",
            ],
            "/no-such-kura-folder is no folder",
        ),
        (
            &[
                "bench",
                "compare",
                "--target",
                "a=127.0.0.1:1",
                "--html",
                "/no-such-kura-folder/run.html",
                "x.toml",
            ],
            "/no-such-kura-folder is no folder",
        ),
    ] {
        let output = run(args);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(64), "kura {args:?}: {message}");
        assert_eq!(message.lines().count(), 1, "kura {args:?}: {message}");
        assert!(message.contains(expected), "kura {args:?}: {message}");
    }
}

/// A listener that answers every connection with `reply` (written again
/// and again when `repeat`), then holds it open.
fn fake_server(reply: &'static [u8], repeat: bool) -> String {
    fake_server_answering(move |stream| {
        while stream.write_all(reply).is_ok() && repeat {}
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
    })
}

/// A listener that reads the first bytes of every connection, then
/// leaves it to `answer`.
fn fake_server_answering(answer: impl Fn(&mut TcpStream) + Send + Copy + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut first = [0; 64];
                let _ = stream.read(&mut first);
                answer(&mut stream);
            });
        }
    });
    address
}

#[test]
fn the_admin_and_query_clients_stop_at_a_bound_on_what_a_server_sends() {
    // An endless line, and endless lines that are not kura's.
    let endless = fake_server(&[b'x'; 64 * 1024], true);
    fails(
        &["admin", "replicas", "--server", &endless],
        "sent no whole reply line",
    );
    let chatter = fake_server(b"garbage line\r\n", true);
    fails(
        &["admin", "replicas", "--server", &chatter],
        "not a kura server",
    );
    let silent = fake_server(b"", false);
    fails(
        &["admin", "replicas", "--server", &silent, "--timeout", "1"],
        "did not reply within 1 s",
    );
    // A Tokyo Tyrant reply claiming one item of 4 GiB, then nothing.
    let claims = fake_server(b"\x00\x00\x00\x00\x01\xff\xff\xff\xf0", false);
    let started = Instant::now();
    let output = run(&["query", "--server", &claims, "--timeout", "2", "get", "k"]);
    assert_ne!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(stderr(&output).contains("bytes"), "{}", stderr(&output));
    fails(
        &["table", "check", "--server", &silent, "--timeout", "1"],
        "did not reply within 1 s",
    );
}

/// A server that sends its reply a byte at a time, never ending the line:
/// `--timeout` bounds the whole line, not each read.
#[test]
fn a_reply_trickled_a_byte_at_a_time_stops_at_the_timeout() {
    let address = fake_server_answering(|stream| {
        while stream.write_all(b"S").is_ok() {
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    gives_up_after_its_timeout(&address);
}

#[test]
fn a_bench_against_a_port_where_nothing_listens_fails() {
    // A port taken and let go: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = fails(
        &[
            "bench",
            "--server",
            &format!("127.0.0.1:{port}"),
            "--duration",
            "1s",
            "--quiet",
        ],
        "answered no request",
    );
    assert!(
        stderr(&output).contains("connrefused"),
        "{}",
        stderr(&output)
    );
}
