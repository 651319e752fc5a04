//! `kura bench-engine`: the disk engine without the network, measured the
//! way Tokyo Cabinet's `tchtest write|read FILE RNUM` measures its own: keys
//! and values are the 8-digit decimal form of 1..=RNUM, written by one
//! thread, then read back by one thread after reopening.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use kura_store::{
    AckFence, AckState, DiskConfig, DiskStore, GetOptions, Store, StoreCommand, StoreMode,
};

use crate::output::outln;
use crate::Failure;

#[derive(Args)]
pub struct EngineBenchArgs {
    /// write: store RNUM records; read: get them back (after `write`).
    #[arg(value_enum)]
    phase: Phase,
    /// Data directory.
    dir: PathBuf,
    /// Number of records.
    #[arg(default_value_t = 1_000_000)]
    records: usize,
    /// Sync policy while writing (as `kura serve --sync`).
    #[arg(long, default_value = "none")]
    sync: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Phase {
    Write,
    Read,
}

pub fn run(args: EngineBenchArgs) -> Result<(), Failure> {
    let sync = args.sync.parse().map_err(Failure::Usage)?;
    // Keys are 8 digits, as tchtest's: more records would repeat them.
    if args.records > 99_999_999 {
        return Err(Failure::Usage(format!(
            "{} records: at most 99999999 (keys are 8 digits)",
            args.records
        )));
    }
    let started = Instant::now();
    let store = DiskStore::open(DiskConfig {
        sync,
        map_size: 16 << 30,
        reserve_bytes: 0,
        ..DiskConfig::new(&args.dir)
    })
    .map_err(|e| Failure::Runtime(e.into()))?;
    let mut key = [0u8; 8];
    let mut problems = 0usize;
    for i in 1..=args.records {
        decimal8(i, &mut key);
        match args.phase {
            Phase::Write => {
                let outcome = store.store(
                    &StoreCommand {
                        mode: StoreMode::Set,
                        key: &key,
                        value: &key,
                        flags: 0,
                        expiry: 0,
                        compare_cas: None,
                        stale_if_older: false,
                    },
                    &AckFence::default(),
                );
                problems +=
                    usize::from(!matches!(outcome, kura_store::StoreOutcome::Stored { .. }));
            }
            Phase::Read => {
                let mut matched = false;
                let options = GetOptions {
                    no_bump: true,
                    ..GetOptions::default()
                };
                store.get(&key, &options, &AckFence::default(), &mut |item| {
                    matched = item.value == key
                });
                problems += usize::from(!matched);
            }
        }
    }
    if matches!(args.phase, Phase::Write) && store.wait_until_all_applied() != AckState::Ready {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "the writes were not appended"
        )));
    }
    // Closing commits and syncs what the policy asks, as tchtest's close does.
    drop(store);
    let elapsed = started.elapsed().as_secs_f64();
    outln!(
        "{} {} records in {}: time: {elapsed:.3} s ({:.0} records/s), problems: {problems}",
        match args.phase {
            Phase::Write => "wrote",
            Phase::Read => "read",
        },
        args.records,
        args.dir.display(),
        args.records as f64 / elapsed,
    )?;
    if problems > 0 {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "{problems} records wrong"
        )));
    }
    Ok(())
}

/// The 8-digit zero-padded decimal form of `n` (tchtest's "%08d").
fn decimal8(mut n: usize, out: &mut [u8; 8]) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
}
