//! `kura log`: the update log of a data directory or a backup, read from
//! its files (the server may be running or not).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine as _;
use clap::{Args, Subcommand};

use kura_store::disk::format_micros;
use kura_store::disk::history::backup::{self, DATA_FILE, MANIFEST};
use kura_store::disk::history::{self, Change, Entry, LogPoint, Values};

use crate::output::outln;
use crate::Failure;

#[derive(Args, Debug)]
pub struct LogArgs {
    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Subcommand, Debug)]
enum LogCommand {
    /// Print entries one per line: LSN, time, origin, operation, key and
    /// the rest, tab-separated (or JSON objects with --json). In a backup,
    /// the entries it adds (those before are in its snapshot, or in the
    /// backup it continues, though the segments it copied hold them too).
    Dump(DumpArgs),
    /// The first and last entry (LSN and time), entries, bytes, segments;
    /// in a backup, of the entries it adds.
    Stats(StatsArgs),
}

#[derive(Args, Debug)]
struct DumpArgs {
    /// Data directory (or backup) whose log to read.
    #[arg(long, default_value = "kura-data")]
    dir: PathBuf,
    /// First entry: an LSN, or a time (RFC 3339, or @ and Unix seconds).
    #[arg(long)]
    from: Option<String>,
    /// Last entry: an LSN, or a time (RFC 3339, or @ and Unix seconds).
    #[arg(long)]
    until: Option<String>,
    /// One JSON object per line; keys and values as text where they are
    /// UTF-8, else in base64 under `key_base64` / `value_base64`.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct StatsArgs {
    /// Data directory (or backup) whose log to read.
    #[arg(long, default_value = "kura-data")]
    dir: PathBuf,
    /// As one JSON object.
    #[arg(long)]
    json: bool,
}

/// A mistyped `--dir` is named, not read as an empty log.
fn check_log_dir(dir: &Path) -> Result<(), Failure> {
    if !dir.is_dir() {
        // The read names what is there instead.
        return Ok(());
    }
    let mut holds_any = false;
    for name in [DATA_FILE, MANIFEST] {
        // A directory kura may not read is a permission problem, not a
        // directory without a log.
        let path = dir.join(name);
        let exists = path
            .try_exists()
            .map_err(|error| Failure::Runtime(anyhow::anyhow!("{}: {error}", path.display())))?;
        holds_any |= exists;
    }
    if !holds_any {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "{} is neither a kura data directory nor a backup (no {DATA_FILE}, no {MANIFEST})",
            dir.display()
        )));
    }
    Ok(())
}

pub fn run(args: LogArgs) -> Result<(), Failure> {
    match args.command {
        LogCommand::Dump(args) => dump(args),
        LogCommand::Stats(args) => stats(args),
    }
}

/// `1234` is an LSN; `@1700000000.25` and `2026-11-25T06:00:00.5Z` are times.
pub fn parse_point(text: &str, flag: &str) -> Result<LogPoint, Failure> {
    if let Ok(lsn) = text.parse::<u64>() {
        return Ok(LogPoint::Lsn(lsn));
    }
    let micros = match text.strip_prefix('@') {
        Some(seconds) => parse_unix_seconds(seconds),
        None => parse_rfc3339(text),
    };
    micros
        .map(LogPoint::Micros)
        .ok_or_else(|| not_a_point(flag, text, "an LSN, an RFC 3339 time nor @<Unix seconds>"))
}

const BEFORE_1970: &str = "is before 1970, where the log's times (Unix µs) begin";

/// Why `text`, given to `flag`, is no point of the log: an RFC 3339 time
/// before the Unix epoch (a time the log cannot hold, not one written
/// wrong), or neither of the forms `expected` names.
pub fn not_a_point(flag: &str, text: &str, expected: &str) -> Failure {
    let rfc3339 = &time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(text, rfc3339) {
        Ok(time) if time.unix_timestamp_nanos() < 0 => {
            Failure::Usage(format!("{flag}: {text:?} {BEFORE_1970}"))
        }
        _ => Failure::Usage(format!("{flag}: {text:?} is neither {expected}")),
    }
}

/// Unix seconds, with a fraction if any, as µs.
pub fn parse_unix_seconds(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let whole: u64 = whole.parse().ok()?;
    if !fraction.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let digits: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(6)
        .collect();
    let micros: u64 = digits.parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(micros)
}

/// An RFC 3339 time (fractions of a second allowed) as µs since the epoch.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    // Down, not toward zero: 1969-12-31T23:59:59.9999999Z is no time of the log.
    u64::try_from(time.unix_timestamp_nanos().div_euclid(1000)).ok()
}

fn dump(args: DumpArgs) -> Result<(), Failure> {
    let from = args
        .from
        .as_deref()
        .map(|text| parse_point(text, "--from"))
        .transpose()?;
    let until = args
        .until
        .as_deref()
        .map(|text| parse_point(text, "--until"))
        .transpose()?;
    if let (Some(LogPoint::Lsn(first)), Some(LogPoint::Lsn(last))) = (from, until) {
        if first > last {
            return Err(Failure::Usage(format!(
                "--from {first} is after --until {last}"
            )));
        }
    }
    check_log_dir(&args.dir)?;
    let manifest = manifest_of(&args.dir)?;
    let floor = manifest.as_ref().map_or(0, |manifest| manifest.first_lsn);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut broken = None;
    // Entries missing between those read (a damaged segment ends early),
    // within the range asked for.
    let mut missing = Vec::new();
    let mut stopped = false;
    let first_asked = match from {
        Some(LogPoint::Lsn(first)) => first.max(floor),
        _ => floor,
    };
    let last_asked = match until {
        Some(LogPoint::Lsn(last)) => last,
        _ => u64::MAX,
    };
    // The entry before the first asked for: a log that starts later lacks
    // those between.
    let mut previous = first_asked.checked_sub(1);
    let read = history::read(&args.dir, Values::Read, |entry| {
        let before = previous.replace(entry.lsn);
        if entry.lsn < floor || from.is_some_and(|point| !point.starts_by(entry.lsn, entry.micros))
        {
            return ControlFlow::Continue(());
        }
        // Before the end of the range is looked for: a range that ends
        // within a gap lacks the entries of it it asked for. Up to a time,
        // the missing entries' times are not known: a gap after an entry
        // within the range counts, though the entry after it is past.
        if let Some(before) = before.filter(|&before| entry.lsn > before + 1) {
            let (start, end) = (
                (before + 1).max(first_asked),
                (entry.lsn - 1).min(last_asked),
            );
            if start <= end {
                missing.push((start, end));
            }
        }
        if until.is_some_and(|point| !point.covers(entry.lsn, entry.micros)) {
            stopped = true;
            return ControlFlow::Break(());
        }
        let written = match args.json {
            true => writeln!(out, "{}", json_line(entry)),
            false => write_text(&mut out, entry),
        };
        match written {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => {
                broken = Some(error);
                ControlFlow::Break(())
            }
        }
    });
    let summary = read.with_context(|| format!("reading the log in {}", args.dir.display()))?;
    warn_unread(&args.dir, &summary.unread);
    match broken.map_or_else(|| out.flush(), Err) {
        // `kura log dump | head` is fine.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        other => other.context("writing the dump")?,
    }
    if !stopped {
        let tail = missing_tail(manifest.as_ref(), previous);
        missing.extend(
            tail.map(|(first, last)| (first.max(first_asked), last.min(last_asked)))
                .filter(|(first, last)| first <= last),
        );
    }
    if !missing.is_empty() {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "{} lacks entries {} (a segment is damaged or was removed)",
            args.dir.display(),
            history::describe_ranges(&missing)
        )));
    }
    Ok(())
}

/// Segments whose last bytes are no whole record. A crash in an append
/// leaves such a tail (and a replay at open passes over it, as here), so
/// this is a warning: entries held there, if any, are not shown. Whole
/// records after the first bad one tell damage from a torn append.
fn warn_unread(dir: &Path, unread: &[history::Unread]) {
    for tail in unread {
        let cause = match history::whole_records_after(dir, tail) {
            Ok(0) => "a torn append, or damage".to_string(),
            Ok(records) => format!(
                "damage: at least {records} whole records follow the first bad one, \
                 or a power cut that wrote later pages first"
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                "a torn append, or damage; the segment was removed since".to_string()
            }
            Err(error) => format!("a torn append, or damage; reading it again: {error}"),
        };
        eprintln!(
            "kura: warning: segment {}: the {} bytes from offset {} on are no whole record \
             ({cause}): entries there, if any, are not shown",
            tail.segment, tail.bytes, tail.from
        );
    }
}

/// An entry as one tab-separated line, written as it is escaped: a large
/// value is not copied into a line first.
fn write_text(out: &mut impl Write, entry: &Entry) -> std::io::Result<()> {
    let time = format_micros(entry.micros);
    write!(out, "{}\t{time}\t{}\t", entry.lsn, entry.origin)?;
    match &entry.change {
        Change::Set {
            key,
            flags,
            expiry_unix,
            cas,
            value,
        } => {
            out.write_all(b"set\t")?;
            write_escaped(out, key)?;
            write!(out, "\t{flags}\t{expiry_unix}\t{cas}\t")?;
            match value {
                Some(value) => write_escaped(out, value)?,
                None => out.write_all(b"<not kept>")?,
            }
        }
        Change::Remove { key } => {
            out.write_all(b"delete\t")?;
            write_escaped(out, key)?;
        }
        Change::Flush { through_cas } => write!(out, "flush_all\t{through_cas}")?,
        Change::RowPut {
            table,
            key,
            columns,
        } => {
            out.write_all(b"row_put\t")?;
            write_escaped(out, table)?;
            out.write_all(b"\t")?;
            write_escaped(out, key)?;
            for (name, value) in columns {
                out.write_all(b"\t")?;
                write_escaped(out, name)?;
                out.write_all(b"\t")?;
                write_escaped(out, value)?;
            }
        }
        Change::RowRemove { table, key } => {
            out.write_all(b"row_delete\t")?;
            write_escaped(out, table)?;
            out.write_all(b"\t")?;
            write_escaped(out, key)?;
        }
    }
    out.write_all(b"\n")
}

/// Printable ASCII as it is; `\t`, `\n`, `\r`, `\\` and any other byte
/// as an escape, so each entry stays on one greppable line. Runs of
/// printable bytes go out in one write.
fn write_escaped(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rest = bytes;
    while !rest.is_empty() {
        let plain = (rest.iter())
            .position(|&byte| !(0x20..=0x7e).contains(&byte) || byte == b'\\')
            .unwrap_or(rest.len());
        out.write_all(&rest[..plain])?;
        let Some(&byte) = rest.get(plain) else {
            break;
        };
        match byte {
            b'\\' => out.write_all(b"\\\\")?,
            b'\t' => out.write_all(b"\\t")?,
            b'\n' => out.write_all(b"\\n")?,
            b'\r' => out.write_all(b"\\r")?,
            _ => out.write_all(&[
                b'\\',
                b'x',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ])?,
        }
        rest = &rest[plain + 1..];
    }
    Ok(())
}

fn json_line(entry: &Entry) -> String {
    let mut object = serde_json::Map::new();
    object.insert("lsn".into(), entry.lsn.into());
    object.insert("time".into(), format_micros(entry.micros).into());
    object.insert("micros".into(), entry.micros.into());
    object.insert("origin".into(), entry.origin.into());
    let mut bytes = |name: &str, bytes: &[u8]| match std::str::from_utf8(bytes) {
        Ok(text) => {
            object.insert(name.into(), text.into());
        }
        Err(_) => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
            object.insert(format!("{name}_base64"), encoded.into());
        }
    };
    match &entry.change {
        Change::Set {
            key,
            flags,
            expiry_unix,
            cas,
            value,
        } => {
            bytes("key", key);
            match value {
                Some(value) => bytes("value", value),
                None => {
                    object.insert("value".into(), serde_json::Value::Null);
                }
            }
            object.insert("op".into(), "set".into());
            object.insert("flags".into(), (*flags).into());
            object.insert("expiry".into(), (*expiry_unix).into());
            object.insert("cas".into(), (*cas).into());
        }
        Change::Remove { key } => {
            bytes("key", key);
            object.insert("op".into(), "delete".into());
        }
        Change::Flush { through_cas } => {
            object.insert("op".into(), "flush_all".into());
            object.insert("through_cas".into(), (*through_cas).into());
        }
        Change::RowPut {
            table,
            key,
            columns,
        } => {
            bytes("table", table);
            bytes("key", key);
            object.insert("op".into(), "row_put".into());
            // [name, value] pairs in order; bytes that are not UTF-8 as
            // {"base64": …}.
            let field = |b: &[u8]| match std::str::from_utf8(b) {
                Ok(text) => serde_json::Value::from(text),
                Err(_) => serde_json::json!({
                    "base64": base64::engine::general_purpose::STANDARD.encode(b)
                }),
            };
            let columns: Vec<serde_json::Value> = columns
                .iter()
                .map(|(name, value)| serde_json::json!([field(name), field(value)]))
                .collect();
            object.insert("columns".into(), columns.into());
        }
        Change::RowRemove { table, key } => {
            bytes("table", table);
            bytes("key", key);
            object.insert("op".into(), "row_delete".into());
        }
    }
    serde_json::Value::Object(object).to_string()
}

/// The manifest of a backup; `None` in a data directory.
fn manifest_of(dir: &Path) -> Result<Option<backup::Manifest>, Failure> {
    if !dir.join(MANIFEST).exists() {
        return Ok(None);
    }
    let manifest = backup::load(dir).map_err(|error| Failure::Runtime(error.into()))?;
    Ok(Some(manifest))
}

/// In a backup, the entries its manifest says it holds after `last_read`
/// (the segment that held them is damaged).
fn missing_tail(manifest: Option<&backup::Manifest>, last_read: Option<u64>) -> Option<(u64, u64)> {
    let manifest = manifest?;
    let after = last_read
        .map_or(manifest.first_lsn, |lsn| lsn + 1)
        .max(manifest.first_lsn);
    (after <= manifest.last.lsn).then_some((after, manifest.last.lsn))
}

fn stats(args: StatsArgs) -> Result<(), Failure> {
    check_log_dir(&args.dir)?;
    let manifest = manifest_of(&args.dir)?;
    let floor = manifest.as_ref().map_or(0, |manifest| manifest.first_lsn);
    // The entries from `floor` on (first, last, how many).
    let (mut first, mut last, mut entries) = (None, None, 0);
    let mut summary = history::read(&args.dir, Values::Skip, |entry| {
        if entry.lsn >= floor {
            first.get_or_insert((entry.lsn, entry.micros));
            last = Some((entry.lsn, entry.micros));
            entries += 1;
        }
        ControlFlow::Continue(())
    })
    .with_context(|| format!("reading the log in {}", args.dir.display()))?;
    (summary.first, summary.last, summary.entries) = (first, last, entries);
    summary.gaps = (summary.gaps.iter())
        .map(|&(gap_first, gap_last)| (gap_first.max(floor), gap_last))
        .filter(|(gap_first, gap_last)| gap_first <= gap_last)
        .collect();
    // A backup's entries start at its manifest's first LSN.
    if let (Some(_), Some((first_read, _))) = (&manifest, first) {
        let known = summary
            .gaps
            .iter()
            .any(|&(gap_first, _)| gap_first <= floor);
        if first_read > floor && !known {
            summary.gaps.insert(0, (floor, first_read - 1));
        }
    }
    (summary.gaps).extend(missing_tail(manifest.as_ref(), last.map(|(lsn, _)| lsn)));
    warn_unread(&args.dir, &summary.unread);
    let point = |at: Option<(u64, u64)>| at.map(|(lsn, micros)| (lsn, format_micros(micros)));
    if args.json {
        let json = serde_json::json!({
            "segments": summary.segments,
            "bytes": summary.bytes,
            "entries": summary.entries,
            "first_lsn": summary.first.map(|(lsn, _)| lsn),
            "first_time": point(summary.first).map(|(_, time)| time),
            "last_lsn": summary.last.map(|(lsn, _)| lsn),
            "last_time": point(summary.last).map(|(_, time)| time),
            "gaps": summary.gaps,
            "unread": (summary.unread.iter())
                .map(|tail| (tail.segment, tail.bytes))
                .collect::<Vec<_>>(),
        });
        outln!("{json}")?;
        return Ok(());
    }
    outln!("segments\t{}", summary.segments)?;
    outln!("bytes\t{}", summary.bytes)?;
    outln!("entries\t{}", summary.entries)?;
    match (point(summary.first), point(summary.last)) {
        (Some((first, first_time)), Some((last, last_time))) => {
            outln!("first\t{first}\t{first_time}")?;
            outln!("last\t{last}\t{last_time}")?;
        }
        _ => outln!("first\t-\nlast\t-")?,
    }
    if !summary.gaps.is_empty() {
        outln!("gaps\t{}", history::describe_ranges(&summary.gaps))?;
    }
    if !summary.unread.is_empty() {
        let unread: Vec<String> = (summary.unread.iter())
            .map(|tail| format!("{}:{}", tail.segment, tail.bytes))
            .collect();
        outln!("unread\t{}", unread.join(","))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_read_as_lsns_unix_seconds_or_rfc3339() {
        assert!(matches!(parse_point("42", "-"), Ok(LogPoint::Lsn(42))));
        assert!(matches!(
            parse_point("@1700000000.25", "-"),
            Ok(LogPoint::Micros(1_700_000_000_250_000))
        ));
        assert!(matches!(
            parse_point("2023-11-14T22:13:20.000001Z", "-"),
            Ok(LogPoint::Micros(1_700_000_000_000_001))
        ));
        assert!(matches!(
            parse_point("2023-11-15T07:13:20+09:00", "-"),
            Ok(LogPoint::Micros(1_700_000_000_000_000))
        ));
        assert!(parse_point("yesterday", "-").is_err());
        assert!(parse_point("@12x", "-").is_err());
        // Before the epoch, though by less than a µs: said so, not misread.
        for early in ["1969-12-31T23:59:59Z", "1969-12-31T23:59:59.9999999Z"] {
            let Err(Failure::Usage(message)) = parse_point(early, "--until") else {
                panic!("{early} was read as a time of the log");
            };
            assert!(message.ends_with(BEFORE_1970), "{message}");
        }
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00.0000009Z"), Some(0));
    }

    #[test]
    fn times_print_as_rfc3339_to_the_microsecond() {
        assert_eq!(
            format_micros(1_700_000_000_000_001),
            "2023-11-14T22:13:20.000001Z"
        );
        assert_eq!(parse_rfc3339(&format_micros(1_234_567)), Some(1_234_567));
    }

    #[test]
    fn escapes_keep_an_entry_on_one_line() {
        let mut out = Vec::new();
        write_escaped(&mut out, b"a\tb\nc\\d\x01\xffe").unwrap();
        assert_eq!(out, b"a\\tb\\nc\\\\d\\x01\\xffe");
    }
}
